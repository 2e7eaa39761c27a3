"""Account types and the chart of accounts."""

ASSET = "asset"
LIABILITY = "liability"
EQUITY = "equity"
INCOME = "income"
EXPENSE = "expense"

ACCOUNT_TYPES = (ASSET, LIABILITY, EQUITY, INCOME, EXPENSE)
DEBIT_NORMAL = frozenset({ASSET, EXPENSE})

CODE_RANGES = {
    ASSET: (1000, 1999),
    LIABILITY: (2000, 2999),
    EQUITY: (3000, 3999),
    INCOME: (4000, 4999),
    EXPENSE: (5000, 5999),
}


class AccountError(Exception):
    """Raised for invalid account operations."""


class Account:
    """A ledger account identified by a numeric code."""

    def __init__(self, code, name, kind):
        if kind not in ACCOUNT_TYPES:
            raise AccountError(f"unknown account type: {kind}")
        low, high = CODE_RANGES[kind]
        if code < low or code > high:
            raise AccountError(f"code {code} outside range for {kind}")
        self.code = code
        self.name = name
        self.kind = kind

    @property
    def is_debit_normal(self):
        """True if the account increases with debits."""
        return self.kind in DEBIT_NORMAL

    def signed_balance(self, debits, credits):
        """Return the balance in the account's normal direction."""
        if self.is_debit_normal:
            return debits - credits
        return credits - debits

    def __repr__(self):
        return f"Account({self.code}, {self.name!r}, {self.kind!r})"


def kind_for_code(code):
    """Return the account type whose code range contains code."""
    for kind in ACCOUNT_TYPES:
        low, high = CODE_RANGES[kind]
        if low <= code <= high:
            return kind
    raise AccountError(f"no account type for code {code}")


class Chart:
    """A chart of accounts keyed by code."""

    def __init__(self):
        self._accounts = {}

    def add(self, code, name, kind=None):
        """Add an account; its type is inferred from the code if omitted."""
        if code in self._accounts:
            raise AccountError(f"duplicate account code {code}")
        account = Account(code, name, kind or kind_for_code(code))
        self._accounts[code] = account
        return account

    def get(self, code):
        """Return the account with the given code."""
        try:
            return self._accounts[code]
        except KeyError:
            raise AccountError(f"unknown account {code}") from None

    def __contains__(self, code):
        return code in self._accounts

    def __len__(self):
        return len(self._accounts)

    def codes(self):
        """Return all account codes in ascending order."""
        return sorted(self._accounts)

    def of_kind(self, kind):
        """Return the accounts of one type, sorted by code."""
        return [self._accounts[c] for c in self.codes() if self._accounts[c].kind == kind]
