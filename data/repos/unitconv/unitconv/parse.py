"""Parsing and formatting quantity strings such as '3.5 km'."""

from .compound import convert_any, is_compound, split_compound
from .units import normalize_unit

_DIGITS = "0123456789"


class QuantityError(ValueError):
    """Raised when a quantity string cannot be parsed."""


def _split_number(text):
    """Split text into its leading numeric part and the remainder."""
    index = 0
    seen_digit = False
    seen_dot = False
    if text[:1] in ("+", "-"):
        index += 1
    while index < len(text):
        char = text[index]
        if char in _DIGITS:
            seen_digit = True
        elif char == "." and not seen_dot:
            seen_dot = True
        else:
            break
        index += 1
    if not seen_digit:
        raise QuantityError("no number in %r" % text)
    return text[:index], text[index:]


def parse_quantity(text):
    """Parse '3.5 km' into (3.5, 'km'); the unit is normalised."""
    number, rest = _split_number(text.strip().replace(",", ""))
    unit = rest.strip()
    if not unit:
        raise QuantityError("missing unit in %r" % text)
    value = float(number)
    if is_compound(unit):
        num, den = split_compound(unit)
        return value, normalize_unit(num) + "/" + normalize_unit(den)
    return value, normalize_unit(unit)


def format_quantity(value, unit, digits=2):
    """Format a value and unit as a string, trimming trailing zeros."""
    text = "%.*f" % (digits, value)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if text == "-0":
        text = "0"
    return "%s %s" % (text, unit)


def convert_text(text, to_unit, digits=2):
    """Parse a quantity string and return it formatted in another unit."""
    value, unit = parse_quantity(text)
    return format_quantity(convert_any(value, unit, to_unit), to_unit, digits)


def parse_sum(text, to_unit):
    """Parse a '+'-separated list of quantities and sum them in to_unit."""
    total = 0.0
    for part in text.split("+"):
        if part.strip():
            value, unit = parse_quantity(part)
            total += convert_any(value, unit, to_unit)
    return total
