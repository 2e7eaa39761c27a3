"""ledgerkit: a tiny double-entry bookkeeping library."""

from .money import to_cents, from_cents, round_money, format_cents, allocate
from .accounts import (
    ASSET, LIABILITY, EQUITY, INCOME, EXPENSE,
    Account, AccountError, Chart, kind_for_code,
)
from .journal import JournalEntry, Line, UnbalancedEntryError, simple_entry, DEBIT, CREDIT
from .ledger import Ledger

__all__ = [
    "to_cents", "from_cents", "round_money", "format_cents", "allocate",
    "ASSET", "LIABILITY", "EQUITY", "INCOME", "EXPENSE",
    "Account", "AccountError", "Chart", "kind_for_code",
    "JournalEntry", "Line", "UnbalancedEntryError", "simple_entry", "DEBIT", "CREDIT",
    "Ledger",
]
