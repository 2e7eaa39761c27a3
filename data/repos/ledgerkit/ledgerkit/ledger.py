"""The general ledger: posting entries, balances and reports."""

from .accounts import ASSET, LIABILITY, EQUITY, INCOME, EXPENSE, AccountError
from .money import from_cents


class Ledger:
    """Posts journal entries against a chart of accounts."""

    def __init__(self, chart):
        self.chart = chart
        self.entries = []

    def post(self, entry):
        """Validate and record an entry; all its accounts must exist."""
        entry.validate()
        for code in entry.accounts():
            if code not in self.chart:
                raise AccountError(f"unknown account {code}")
        self.entries.append(entry)
        return len(self.entries)

    def _lines(self, code, start=None, end=None):
        for entry in self.entries:
            if start is not None and entry.date < start:
                continue
            if end is not None and entry.date > end:
                continue
            for line in entry.lines:
                if line.account_code == code:
                    yield line

    def totals(self, code, start=None, end=None):
        """Return (debit cents, credit cents) for an account in a date range."""
        debits = 0
        credits = 0
        for line in self._lines(code, start, end):
            debits += line.debit_cents()
            credits += line.credit_cents()
        return debits, credits

    def balance_cents(self, code, start=None, end=None):
        """Balance in the account's normal direction, in cents."""
        account = self.chart.get(code)
        debits, credits = self.totals(code, start, end)
        return account.signed_balance(debits, credits)

    def balance(self, code, start=None, end=None):
        """Balance as a Decimal amount."""
        return from_cents(self.balance_cents(code, start, end))

    def kind_total_cents(self, kind, end=None):
        """Sum of normal balances of all accounts of one type, in cents."""
        return sum(self.balance_cents(a.code, end=end) for a in self.chart.of_kind(kind))

    def trial_balance(self, end=None):
        """Rows (code, debit cents, credit cents) with net balance on one side."""
        rows = []
        for code in self.chart.codes():
            debits, credits = self.totals(code, end=end)
            net = debits - credits
            if net > 0:
                rows.append((code, net, 0))
            elif net < 0:
                rows.append((code, 0, -net))
        return rows

    def trial_balance_totals(self, end=None):
        """Total debit and credit columns of the trial balance."""
        rows = self.trial_balance(end)
        return sum(r[1] for r in rows), sum(r[2] for r in rows)

    def is_in_balance(self, end=None):
        """True if the trial balance columns agree."""
        debit_total, credit_total = self.trial_balance_totals(end)
        return debit_total == credit_total

    def net_income_cents(self, start=None, end=None):
        """Income minus expenses over a period, in cents."""
        income = sum(self.balance_cents(a.code, start, end) for a in self.chart.of_kind(INCOME))
        expense = sum(self.balance_cents(a.code, start, end) for a in self.chart.of_kind(EXPENSE))
        return income - expense

    def accounting_equation_holds(self, end=None):
        """Check assets == liabilities + equity + net income."""
        assets = self.kind_total_cents(ASSET, end)
        liabilities = self.kind_total_cents(LIABILITY, end)
        equity = self.kind_total_cents(EQUITY, end)
        return assets == liabilities + equity + self.net_income_cents(end=end)

    def running_balance(self, code):
        """List of (date, balance cents) after each entry touching the account."""
        account = self.chart.get(code)
        history = []
        debits = 0
        credits = 0
        for entry in sorted(self.entries, key=lambda e: e.date):
            touched = False
            for line in entry.lines:
                if line.account_code == code:
                    debits += line.debit_cents()
                    credits += line.credit_cents()
                    touched = True
            if touched:
                history.append((entry.date, account.signed_balance(debits, credits)))
        return history
