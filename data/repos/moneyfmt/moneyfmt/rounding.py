"""Rounding decimals to a number of places with explicit rounding modes."""

from decimal import Decimal

HALF_UP = "half_up"
HALF_DOWN = "half_down"
HALF_EVEN = "half_even"
BANKERS = HALF_EVEN
UP = "up"
DOWN = "down"
CEILING = "ceiling"
FLOOR = "floor"

MODES = (HALF_UP, HALF_DOWN, HALF_EVEN, UP, DOWN, CEILING, FLOOR)
_HALF = Decimal("0.5")


def to_decimal(value):
    """Convert int, str, float or Decimal to Decimal (floats via their repr)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(value)


def _round_magnitude(magnitude, negative, mode):
    """Round a non-negative scaled magnitude to an integer."""
    whole = int(magnitude)
    fraction = magnitude - whole
    if fraction == 0:
        return whole
    if mode == DOWN:
        return whole
    if mode == UP:
        return whole + 1
    if mode == CEILING:
        return whole if negative else whole + 1
    if mode == FLOOR:
        return whole + 1 if negative else whole
    if fraction > _HALF:
        return whole + 1
    if fraction < _HALF:
        return whole
    if mode == HALF_UP:
        return whole + 1
    if mode == HALF_DOWN:
        return whole
    return whole + (whole % 2)


def round_to(value, places=0, mode=HALF_EVEN):
    """Round value to `places` decimal places using the given mode; returns Decimal."""
    if mode not in MODES:
        raise ValueError("unknown rounding mode %r" % mode)
    if places < 0:
        raise ValueError("places must be non-negative")
    number = to_decimal(value)
    scale = Decimal(10) ** places
    scaled = number * scale
    negative = scaled < 0
    rounded = _round_magnitude(abs(scaled), negative, mode)
    if negative:
        rounded = -rounded
    return Decimal(rounded).scaleb(-places)


def to_minor_units(value, places=2, mode=HALF_EVEN):
    """Return the amount as an integer number of minor units (e.g. cents)."""
    return int(round_to(value, places, mode) * (10 ** places))


def from_minor_units(units, places=2):
    """Convert an integer number of minor units back to a Decimal amount."""
    return Decimal(units).scaleb(-places)


def allocate(amount, ratios, places=2):
    """Split amount by ratios so the parts sum exactly; leftovers go to the largest remainders."""
    if not ratios or sum(ratios) <= 0:
        raise ValueError("ratios must have a positive sum")
    if any(r < 0 for r in ratios):
        raise ValueError("ratios must be non-negative")
    total_units = to_minor_units(amount, places)
    total_ratio = sum(ratios)
    shares = [total_units * r // total_ratio for r in ratios]
    remainders = [total_units * r % total_ratio for r in ratios]
    leftover = total_units - sum(shares)
    order = sorted(range(len(ratios)), key=lambda i: (-remainders[i], i))
    for i in order[:leftover]:
        shares[i] += 1
    return [from_minor_units(s, places) for s in shares]
