"""unitconv: physical unit conversion."""

from .compound import (
    compound_dimension,
    compound_factor,
    convert_any,
    convert_compound,
    is_compound,
    speed,
    split_compound,
    travel_time,
)
from .convert import (
    best_unit,
    celsius_to_fahrenheit,
    celsius_to_kelvin,
    convert,
    convert_rounded,
    convert_temperature,
    fahrenheit_to_celsius,
    kelvin_to_celsius,
    sum_quantities,
)
from .parse import QuantityError, convert_text, format_quantity, parse_quantity, parse_sum
from .units import (
    DimensionError,
    UnknownUnitError,
    dimension_of,
    factor_of,
    is_temperature,
    normalize_unit,
    units_of,
)

