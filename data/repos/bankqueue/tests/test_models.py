import pytest

from bankqueue import Customer, Record, arrivals_from_gaps, make_customers


def test_customer_fields():
    c = Customer(7, 2.5, 4)
    assert (c.cid, c.arrival, c.service) == (7, 2.5, 4)


def test_customer_arrival_zero_allowed():
    assert Customer(1, 0, 1).arrival == 0


def test_customer_negative_arrival_rejected():
    with pytest.raises(ValueError):
        Customer(1, -1, 3)


def test_customer_zero_service_rejected():
    with pytest.raises(ValueError):
        Customer(1, 0, 0)


def test_record_derived_times():
    r = Record(1, arrival=2, start=5, finish=9, teller=0)
    assert r.wait == 3
    assert r.service == 4
    assert r.time_in_system == 7


def test_arrivals_from_gaps():
    assert arrivals_from_gaps([1, 2, 0, 4]) == [1, 3, 3, 7]


def test_arrivals_from_gaps_with_start():
    assert arrivals_from_gaps([2, 2], start=10) == [12, 14]


def test_arrivals_from_gaps_empty():
    assert arrivals_from_gaps([]) == []


def test_arrivals_from_gaps_negative():
    with pytest.raises(ValueError):
        arrivals_from_gaps([1, -1])


def test_make_customers_numbers_from_one():
    customers = make_customers([0, 5], [3, 2])
    assert [(c.cid, c.arrival, c.service) for c in customers] == [(1, 0, 3), (2, 5, 2)]


def test_make_customers_length_mismatch():
    with pytest.raises(ValueError):
        make_customers([0, 1], [1])
