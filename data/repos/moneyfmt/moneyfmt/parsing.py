"""Parsing formatted numbers, money and percentages back into Decimals."""

from decimal import Decimal

from .formatting import CURRENCIES, style_separators


class ParseError(ValueError):
    """Raised when text cannot be parsed as a number."""


def _check_grouping(whole, thousands):
    if thousands not in whole:
        return whole
    groups = whole.split(thousands)
    if not groups[0] or len(groups[0]) > 3:
        raise ParseError("bad grouping in %r" % whole)
    for group in groups[1:]:
        if len(group) != 3:
            raise ParseError("bad grouping in %r" % whole)
    return "".join(groups)


def parse_number(text, style="en"):
    """Parse a formatted number such as '-1,234.50' into a Decimal."""
    thousands, decimal_sep = style_separators(style)
    cleaned = text.strip()
    negative = False
    if cleaned.startswith("(") and cleaned.endswith(")"):
        negative = True
        cleaned = cleaned[1:-1].strip()
    if cleaned[:1] in ("-", "+"):
        negative = negative or cleaned[0] == "-"
        cleaned = cleaned[1:]
    whole, _, fraction = cleaned.partition(decimal_sep)
    whole = _check_grouping(whole, thousands)
    if not (whole + fraction).isdigit():
        raise ParseError("not a number: %r" % text)
    value = Decimal(whole + "." + fraction) if fraction else Decimal(whole)
    return -value if negative else value


def detect_currency(text):
    """Return the currency code whose symbol or code appears in text, or None."""
    upper = text.upper()
    for code in sorted(CURRENCIES):
        if code in upper:
            return code
    matches = []
    for code in sorted(CURRENCIES):
        symbol = CURRENCIES[code][0]
        if symbol in text:
            matches.append((-len(symbol), code))
    if not matches:
        return None
    return min(matches)[1]


def parse_money(text, style="en"):
    """Parse '$1,234.50', '-€5' or '(USD 12.00)' into (Decimal, code)."""
    code = detect_currency(text)
    if code is None:
        raise ParseError("no currency in %r" % text)
    symbol = CURRENCIES[code][0]
    remaining = text.upper().replace(code, "").replace(symbol, "")
    return parse_number(remaining.strip(), style), code


def parse_percent(text, style="en"):
    """Parse '12.5%' into the ratio Decimal('0.125')."""
    cleaned = text.strip()
    if not cleaned.endswith("%"):
        raise ParseError("missing percent sign in %r" % text)
    return parse_number(cleaned[:-1], style) / 100
