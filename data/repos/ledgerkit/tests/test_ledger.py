from datetime import date
from decimal import Decimal

import pytest

from ledgerkit import (
    ASSET, LIABILITY, EQUITY, INCOME, EXPENSE, AccountError, Chart, JournalEntry,
    Ledger, UnbalancedEntryError, simple_entry,
)


def make_ledger():
    chart = Chart()
    chart.add(1000, "Cash")
    chart.add(1200, "Receivables")
    chart.add(2000, "Loan")
    chart.add(3000, "Capital")
    chart.add(4000, "Sales")
    chart.add(5000, "Rent")
    ledger = Ledger(chart)
    ledger.post(simple_entry(date(2024, 1, 1), 1000, 3000, 1000))
    ledger.post(simple_entry(date(2024, 1, 5), 1000, 2000, 500))
    ledger.post(simple_entry(date(2024, 1, 10), 1200, 4000, 300))
    ledger.post(simple_entry(date(2024, 1, 20), 5000, 1000, "120.50"))
    ledger.post(simple_entry(date(2024, 2, 1), 1000, 1200, 200))
    return ledger


def test_post_returns_count():
    ledger = Ledger(Chart())
    ledger.chart.add(1000, "Cash")
    ledger.chart.add(3000, "Capital")
    assert ledger.post(simple_entry(date(2024, 1, 1), 1000, 3000, 1)) == 1
    assert ledger.post(simple_entry(date(2024, 1, 2), 1000, 3000, 1)) == 2


def test_post_rejects_unknown_account():
    ledger = make_ledger()
    with pytest.raises(AccountError):
        ledger.post(simple_entry(date(2024, 1, 1), 1000, 1500, 10))
    assert len(ledger.entries) == 5


def test_post_rejects_unbalanced():
    ledger = make_ledger()
    entry = JournalEntry(date(2024, 1, 1)).debit(1000, 10).credit(3000, 9)
    with pytest.raises(UnbalancedEntryError):
        ledger.post(entry)


def test_totals_and_balance_cents():
    ledger = make_ledger()
    assert ledger.totals(1000) == (170000, 12050)
    assert ledger.balance_cents(1000) == 157950


def test_balance_decimal():
    assert make_ledger().balance(1000) == Decimal("1579.50")


def test_credit_normal_balances_positive():
    ledger = make_ledger()
    assert ledger.balance_cents(2000) == 50000
    assert ledger.balance_cents(4000) == 30000
    assert ledger.balance_cents(3000) == 100000


def test_balance_with_date_range_inclusive():
    ledger = make_ledger()
    assert ledger.balance_cents(1000, end=date(2024, 1, 5)) == 150000
    assert ledger.balance_cents(1000, start=date(2024, 1, 5)) == 57950
    assert ledger.balance_cents(1000, start=date(2024, 1, 6), end=date(2024, 1, 31)) == -12050


def test_receivable_cleared():
    assert make_ledger().balance_cents(1200) == 10000


def test_kind_total():
    ledger = make_ledger()
    assert ledger.kind_total_cents(ASSET) == 167950
    assert ledger.kind_total_cents(EXPENSE) == 12050


def test_trial_balance_rows():
    assert make_ledger().trial_balance() == [
        (1000, 157950, 0),
        (1200, 10000, 0),
        (2000, 0, 50000),
        (3000, 0, 100000),
        (4000, 0, 30000),
        (5000, 12050, 0),
    ]


def test_trial_balance_omits_zero_accounts():
    ledger = make_ledger()
    assert [row[0] for row in ledger.trial_balance(end=date(2024, 1, 1))] == [1000, 3000]


def test_trial_balance_totals_equal():
    ledger = make_ledger()
    assert ledger.trial_balance_totals() == (180000, 180000)
    assert ledger.is_in_balance() is True


def test_net_income():
    ledger = make_ledger()
    assert ledger.net_income_cents() == 17950
    assert ledger.net_income_cents(end=date(2024, 1, 15)) == 30000


def test_accounting_equation():
    assert make_ledger().accounting_equation_holds() is True
    assert make_ledger().accounting_equation_holds(end=date(2024, 1, 12)) is True


def test_running_balance():
    ledger = make_ledger()
    assert ledger.running_balance(1000) == [
        (date(2024, 1, 1), 100000),
        (date(2024, 1, 5), 150000),
        (date(2024, 1, 20), 137950),
        (date(2024, 2, 1), 157950),
    ]


def test_running_balance_sorted_by_date():
    ledger = make_ledger()
    ledger.post(simple_entry(date(2023, 12, 31), 1000, 2000, 1))
    assert ledger.running_balance(2000) == [(date(2023, 12, 31), 100), (date(2024, 1, 5), 50100)]


def test_empty_ledger():
    chart = Chart()
    chart.add(1000, "Cash")
    ledger = Ledger(chart)
    assert ledger.balance_cents(1000) == 0
    assert ledger.trial_balance() == []
    assert ledger.is_in_balance() is True
    assert ledger.running_balance(1000) == []


def test_trial_balance_keeps_one_cent_balances():
    chart = Chart()
    chart.add(1000, "Cash")
    chart.add(3000, "Capital")
    ledger = Ledger(chart)
    ledger.post(simple_entry(date(2024, 1, 1), 1000, 3000, "0.01"))
    assert ledger.trial_balance() == [(1000, 1, 0), (3000, 0, 1)]
