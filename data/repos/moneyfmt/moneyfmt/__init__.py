"""moneyfmt: money and number formatting with explicit rounding modes."""

from .formatting import CURRENCIES, STYLES, currency_info, format_compact, format_money
from .formatting import format_number, format_percent, group_digits, style_separators
from .parsing import ParseError, detect_currency, parse_money, parse_number, parse_percent
from .rounding import BANKERS, CEILING, DOWN, FLOOR, HALF_DOWN, HALF_EVEN, HALF_UP, MODES, UP
from .rounding import allocate, from_minor_units, round_to, to_decimal, to_minor_units
