"""Currency rounding and amount helpers (amounts are handled in integer cents)."""

from decimal import Decimal, ROUND_HALF_UP, ROUND_HALF_EVEN

CENTS_PER_UNIT = 100


def to_cents(amount):
    """Convert a number or numeric string to integer cents, rounding half up."""
    value = Decimal(str(amount)) * CENTS_PER_UNIT
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def from_cents(cents):
    """Convert integer cents to a Decimal amount with two places."""
    return (Decimal(cents) / CENTS_PER_UNIT).quantize(Decimal("0.01"))


def round_money(amount, places=2, bankers=False):
    """Round an amount to the given number of decimal places."""
    if places < 0:
        raise ValueError("places must be non-negative")
    exponent = Decimal(1).scaleb(-places)
    mode = ROUND_HALF_EVEN if bankers else ROUND_HALF_UP
    return Decimal(str(amount)).quantize(exponent, rounding=mode)


def format_cents(cents, symbol="$"):
    """Format cents as a currency string with thousands separators."""
    sign = "-" if cents < 0 else ""
    units, rest = divmod(abs(cents), CENTS_PER_UNIT)
    return f"{sign}{symbol}{units:,}.{rest:02d}"


def allocate(cents, weights):
    """Split cents proportionally to weights; leftover cents go to the first shares."""
    if not weights:
        raise ValueError("weights must not be empty")
    total_weight = sum(weights)
    if total_weight <= 0:
        raise ValueError("weights must sum to a positive number")
    shares = [cents * w // total_weight for w in weights]
    remainder = cents - sum(shares)
    index = 0
    while remainder > 0:
        shares[index % len(shares)] += 1
        remainder -= 1
        index += 1
    return shares
