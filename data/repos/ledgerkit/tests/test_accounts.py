import pytest

from ledgerkit import (
    ASSET, LIABILITY, EQUITY, INCOME, EXPENSE,
    Account, AccountError, Chart, kind_for_code,
)


@pytest.mark.parametrize("code,kind", [
    (1000, ASSET), (1999, ASSET), (2000, LIABILITY), (3500, EQUITY),
    (4000, INCOME), (5999, EXPENSE),
])
def test_kind_for_code(code, kind):
    assert kind_for_code(code) == kind


def test_kind_for_code_out_of_range():
    with pytest.raises(AccountError):
        kind_for_code(6000)
    with pytest.raises(AccountError):
        kind_for_code(999)


def test_account_rejects_unknown_kind():
    with pytest.raises(AccountError):
        Account(1000, "Cash", "magic")


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
