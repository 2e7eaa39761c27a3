from datetime import date

import pytest

from ledgerkit import JournalEntry, Line, UnbalancedEntryError, simple_entry, DEBIT, CREDIT

D = date(2024, 1, 15)


def test_line_stores_cents():
    line = Line(1000, DEBIT, "19.99")
    assert line.cents == 1999
    assert line.debit_cents() == 1999
    assert line.credit_cents() == 0


def test_credit_line_sides():
    line = Line(4000, CREDIT, 5)
    assert line.credit_cents() == 500
    assert line.debit_cents() == 0


def test_line_rejects_zero_and_negative():
    with pytest.raises(ValueError):
        Line(1000, DEBIT, 0)
    with pytest.raises(ValueError):
        Line(1000, DEBIT, "-1")


def test_line_rejects_bad_side():
    with pytest.raises(ValueError):
        Line(1000, "left", 10)


def test_entry_totals():
    entry = JournalEntry(D).debit(1000, 70).debit(1200, 30).credit(4000, 100)
    assert entry.total_debits() == 10000
    assert entry.total_credits() == 10000
    assert entry.is_balanced() is True


def test_entry_unbalanced():
    entry = JournalEntry(D).debit(1000, 70).credit(4000, "69.99")
    assert entry.is_balanced() is False
    with pytest.raises(UnbalancedEntryError, match="1 cents"):
        entry.validate()


def test_single_line_entry_not_balanced():
    entry = JournalEntry(D).debit(1000, 10)
    assert entry.is_balanced() is False
    with pytest.raises(UnbalancedEntryError):
        entry.validate()


def test_two_line_entry_validates():
    entry = simple_entry(D, 1000, 3000, 250)
    assert entry.is_balanced() is True
    entry.validate()


def test_empty_entry_not_balanced():
    assert JournalEntry(D).is_balanced() is False
    with pytest.raises(UnbalancedEntryError, match="at least two lines"):
        JournalEntry(D).validate()


def test_entry_accounts_sorted_distinct():
    entry = JournalEntry(D).debit(5000, 10).debit(1200, 5).credit(1000, 15).credit(1000, 0.01).debit(5000, 0.01)
    assert entry.accounts() == [1000, 1200, 5000]


def test_simple_entry_sides():
    entry = simple_entry(D, 5000, 1000, 42, memo="rent")
    assert entry.memo == "rent"
    assert [(l.account_code, l.side, l.cents) for l in entry.lines] == [
        (5000, DEBIT, 4200), (1000, CREDIT, 4200),
    ]
