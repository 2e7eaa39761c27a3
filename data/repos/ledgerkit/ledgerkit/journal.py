"""Journal entries made of debit and credit lines."""

from .money import to_cents

DEBIT = "debit"
CREDIT = "credit"


class UnbalancedEntryError(ValueError):
    """Raised when debits and credits of an entry differ."""


class Line:
    """One side of a journal entry, amount held in cents."""

    def __init__(self, account_code, side, amount):
        if side not in (DEBIT, CREDIT):
            raise ValueError(f"invalid side: {side}")
        cents = to_cents(amount)
        if cents <= 0:
            raise ValueError("line amount must be positive")
        self.account_code = account_code
        self.side = side
        self.cents = cents

    def debit_cents(self):
        """Cents on the debit side (zero for a credit line)."""
        return self.cents if self.side == DEBIT else 0

    def credit_cents(self):
        """Cents on the credit side (zero for a debit line)."""
        return self.cents if self.side == CREDIT else 0


class JournalEntry:
    """A dated entry whose lines must balance before posting."""

    def __init__(self, date, memo=""):
        self.date = date
        self.memo = memo
        self.lines = []

    def debit(self, account_code, amount):
        """Add a debit line and return the entry for chaining."""
        self.lines.append(Line(account_code, DEBIT, amount))
        return self

    def credit(self, account_code, amount):
        """Add a credit line and return the entry for chaining."""
        self.lines.append(Line(account_code, CREDIT, amount))
        return self

    def total_debits(self):
        """Sum of debit lines in cents."""
        return sum(line.debit_cents() for line in self.lines)

    def total_credits(self):
        """Sum of credit lines in cents."""
        return sum(line.credit_cents() for line in self.lines)

    def is_balanced(self):
        """True if the entry has lines on both sides with equal totals."""
        if len(self.lines) < 2:
            return False
        return self.total_debits() == self.total_credits()

    def validate(self):
        """Raise UnbalancedEntryError if the entry cannot be posted."""
        if len(self.lines) < 2:
            raise UnbalancedEntryError("entry needs at least two lines")
        difference = self.total_debits() - self.total_credits()
        if difference != 0:
            raise UnbalancedEntryError(f"entry out of balance by {difference} cents")

    def accounts(self):
        """Sorted distinct account codes touched by the entry."""
        return sorted({line.account_code for line in self.lines})


def simple_entry(date, debit_code, credit_code, amount, memo=""):
    """Build a two-line entry moving amount from credit_code to debit_code."""
    return JournalEntry(date, memo).debit(debit_code, amount).credit(credit_code, amount)
