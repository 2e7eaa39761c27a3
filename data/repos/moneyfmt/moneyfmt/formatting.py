"""Formatting numbers, percentages and money amounts."""

from decimal import Decimal

from .rounding import HALF_EVEN, round_to, to_decimal

# locale style: (thousands separator, decimal separator)
STYLES = {
    "en": (",", "."),
    "de": (".", ","),
    "fr": (" ", ","),
    "ch": ("'", "."),
}

# code: (symbol, minor digits, symbol before amount)
CURRENCIES = {
    "USD": ("$", 2, True),
    "GBP": ("£", 2, True),
    "EUR": ("€", 2, False),
    "JPY": ("¥", 0, True),
    "CHF": ("CHF", 2, True),
    "CAD": ("C$", 2, True),
    "BHD": ("BD", 3, False),
}


def currency_info(code):
    """Return (symbol, digits, symbol_first) for a currency code."""
    try:
        return CURRENCIES[code.upper()]
    except KeyError:
        raise ValueError("unknown currency %r" % code) from None


def style_separators(style):
    """Return (thousands separator, decimal separator) for a style name."""
    if style not in STYLES:
        raise ValueError("unknown style %r" % style)
    return STYLES[style]


def group_digits(digits, separator=",", size=3):
    """Insert a separator every `size` digits counting from the right."""
    if size < 1:
        raise ValueError("group size must be positive")
    groups = []
    end = len(digits)
    while end > size:
        groups.append(digits[end - size:end])
        end -= size
    groups.append(digits[:end])
    return separator.join(reversed(groups))


def format_number(value, places=2, style="en", mode=HALF_EVEN, group=True):
    """Round and format a number with locale-style separators."""
    thousands, decimal_sep = style_separators(style)
    rounded = round_to(value, places, mode)
    negative = rounded < 0
    text = "%s" % abs(rounded)
    whole, _, fraction = text.partition(".")
    if group:
        whole = group_digits(whole, thousands)
    result = whole + (decimal_sep + fraction if places > 0 else "")
    return "-" + result if negative else result


def format_percent(ratio, places=1, style="en", mode=HALF_EVEN):
    """Format a ratio (0.125) as a percentage string ('12.5%')."""
    percent = to_decimal(ratio) * 100
    return format_number(percent, places, style, mode) + "%"


def format_money(amount, code="USD", style="en", mode=HALF_EVEN, accounting=False, space=None):
    """Format an amount with its currency symbol and the currency's minor digits."""
    symbol, places, symbol_first = currency_info(code)
    number = format_number(amount, places, style, mode)
    negative = number.startswith("-")
    body = number.lstrip("-")
    if space is None:
        space = len(symbol) > 2 or not symbol_first
    gap = " " if space else ""
    text = symbol + gap + body if symbol_first else body + gap + symbol
    if not negative:
        return text
    if accounting:
        return "(" + text + ")"
    return "-" + text


def format_compact(value, places=1):
    """Abbreviate large numbers: 1500 -> '1.5K', 2500000 -> '2.5M'."""
    number = to_decimal(value)
    magnitude = abs(number)
    steps = ((Decimal(10) ** 9, "B"), (Decimal(10) ** 6, "M"), (Decimal(1000), "K"))
    for threshold, suffix in steps:
        if magnitude >= threshold:
            short = format_number(number / threshold, places, group=False)
            if "." in short:
                short = short.rstrip("0").rstrip(".")
            return short + suffix
    return format_number(number, 0)
