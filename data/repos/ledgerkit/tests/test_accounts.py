import pytest

from ledgerkit import (
    ASSET, LIABILITY, EQUITY, INCOME, EXPENSE,
    Account, AccountError, Chart, kind_for_code,
)


def test_kind_for_code_boundaries():
    assert kind_for_code(1000) == ASSET
    assert kind_for_code(1999) == ASSET
    assert kind_for_code(2000) == LIABILITY
    assert kind_for_code(2999) == LIABILITY
    assert kind_for_code(3000) == EQUITY


def test_kind_for_code_income_expense():
    assert kind_for_code(4000) == INCOME
    assert kind_for_code(4999) == INCOME
    assert kind_for_code(5999) == EXPENSE


def test_kind_for_code_out_of_range():
    with pytest.raises(AccountError):
        kind_for_code(6000)
    with pytest.raises(AccountError):
        kind_for_code(999)


def test_account_rejects_unknown_kind():
    with pytest.raises(AccountError):
        Account(1000, "Cash", "magic")


def test_account_accepts_range_boundaries():
    assert Account(1000, "Cash", ASSET).code == 1000
    assert Account(1999, "Other", ASSET).code == 1999


def test_account_rejects_code_outside_range():
    with pytest.raises(AccountError):
        Account(2000, "Cash", ASSET)


def test_debit_normal_accounts():
    assert Account(1000, "Cash", ASSET).is_debit_normal is True
    assert Account(5000, "Rent", EXPENSE).is_debit_normal is True
    assert Account(2000, "Loan", LIABILITY).is_debit_normal is False
    assert Account(4000, "Sales", INCOME).is_debit_normal is False


def test_signed_balance_direction():
    assert Account(1000, "Cash", ASSET).signed_balance(500, 200) == 300
    assert Account(3000, "Capital", EQUITY).signed_balance(500, 200) == -300


def test_chart_add_infers_kind():
    chart = Chart()
    account = chart.add(4100, "Service revenue")
    assert account.kind == INCOME
    assert account.name == "Service revenue"
    assert repr(account) == "Account(4100, 'Service revenue', 'income')"
    assert 4100 in chart
    assert len(chart) == 1


def test_chart_duplicate_code():
    chart = Chart()
    chart.add(1000, "Cash")
    with pytest.raises(AccountError):
        chart.add(1000, "Cash again")


def test_chart_get_unknown():
    with pytest.raises(AccountError):
        Chart().get(1000)


def test_chart_codes_sorted_and_of_kind():
    chart = Chart()
    chart.add(1200, "Receivables")
    chart.add(5000, "Rent")
    chart.add(1000, "Cash")
    assert chart.codes() == [1000, 1200, 5000]
    assert [a.code for a in chart.of_kind(ASSET)] == [1000, 1200]
    assert chart.of_kind(LIABILITY) == []
