"""Unit definitions: every unit maps to a dimension and a factor to the base unit."""

LENGTH = "length"
MASS = "mass"
TIME = "time"
TEMPERATURE = "temperature"

# factor converts a value in the unit to the base unit of its dimension
# (metre, kilogram, second).  Temperature is handled separately.
_UNITS = {
    "mm": (LENGTH, 0.001),
    "cm": (LENGTH, 0.01),
    "m": (LENGTH, 1.0),
    "km": (LENGTH, 1000.0),
    "in": (LENGTH, 0.0254),
    "ft": (LENGTH, 0.3048),
    "yd": (LENGTH, 0.9144),
    "mi": (LENGTH, 1609.344),
    "mg": (MASS, 0.000001),
    "g": (MASS, 0.001),
    "kg": (MASS, 1.0),
    "t": (MASS, 1000.0),
    "oz": (MASS, 0.028349523125),
    "lb": (MASS, 0.45359237),
    "ms": (TIME, 0.001),
    "s": (TIME, 1.0),
    "min": (TIME, 60.0),
    "h": (TIME, 3600.0),
    "day": (TIME, 86400.0),
    "week": (TIME, 604800.0),
}

_TEMPERATURE_UNITS = ("C", "F", "K")

_ALIASES = {
    "meter": "m",
    "meters": "m",
    "metre": "m",
    "metres": "m",
    "kilometer": "km",
    "kilometers": "km",
    "inch": "in",
    "inches": "in",
    "foot": "ft",
    "feet": "ft",
    "mile": "mi",
    "miles": "mi",
    "gram": "g",
    "grams": "g",
    "kilogram": "kg",
    "kilograms": "kg",
    "pound": "lb",
    "pounds": "lb",
    "lbs": "lb",
    "second": "s",
    "seconds": "s",
    "sec": "s",
    "minute": "min",
    "minutes": "min",
    "hour": "h",
    "hours": "h",
    "hr": "h",
    "days": "day",
    "weeks": "week",
    "celsius": "C",
    "fahrenheit": "F",
    "kelvin": "K",
}


class UnknownUnitError(ValueError):
    """Raised when a unit symbol is not known."""


class DimensionError(ValueError):
    """Raised when converting between incompatible dimensions."""


def normalize_unit(symbol):
    """Return the canonical symbol for a unit name or alias."""
    cleaned = symbol.strip()
    if cleaned in _UNITS or cleaned in _TEMPERATURE_UNITS:
        return cleaned
    lowered = cleaned.lower()
    if lowered in _ALIASES:
        return _ALIASES[lowered]
    if lowered in _UNITS:
        return lowered
    raise UnknownUnitError("unknown unit: %r" % symbol)


def is_temperature(symbol):
    """Return True if the symbol names a temperature unit."""
    return normalize_unit(symbol) in _TEMPERATURE_UNITS


def dimension_of(symbol):
    """Return the dimension name of a unit."""
    unit = normalize_unit(symbol)
    if unit in _TEMPERATURE_UNITS:
        return TEMPERATURE
    return _UNITS[unit][0]


def factor_of(symbol):
    """Return the factor that converts the unit to its base unit."""
    unit = normalize_unit(symbol)
    if unit in _TEMPERATURE_UNITS:
        raise DimensionError("temperature units have no linear factor")
    return _UNITS[unit][1]


def units_of(dimension):
    """Return the sorted list of unit symbols for a dimension."""
    if dimension == TEMPERATURE:
        return sorted(_TEMPERATURE_UNITS)
    return sorted(u for u, (dim, _) in _UNITS.items() if dim == dimension)
