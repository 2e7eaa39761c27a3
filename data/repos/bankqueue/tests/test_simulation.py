import pytest

from bankqueue import Customer, simulate, simulate_customers


def _timeline(result):
    return [(r.cid, r.start, r.finish, r.teller) for r in result.records]


def test_single_customer():
    result = simulate([4], [3])
    assert _timeline(result) == [(1, 4, 7, 0)]
    assert result.end_time == 7


def test_no_customers():
    result = simulate([], [])
    assert result.records == []
    assert result.served == 0
    assert result.end_time == 0
    assert result.queue_log == [(0, 0)]


def test_fifo_single_teller_backlog():
    result = simulate([0, 1, 2, 3], [3, 3, 3, 3])
    assert _timeline(result) == [(1, 0, 3, 0), (2, 3, 6, 0), (3, 6, 9, 0), (4, 9, 12, 0)]


def test_idle_gap_between_customers():
    result = simulate([0, 10], [2, 2])
    assert _timeline(result) == [(1, 0, 2, 0), (2, 10, 12, 0)]


def test_departure_before_arrival_at_same_time():
    result = simulate([0, 5], [5, 1])
    assert result.record_for(2).start == 5
    assert result.record_for(2).wait == 0
    assert result.queue_log == [(0, 0)]


def test_two_tellers_parallel():
    result = simulate([0, 0, 0], [4, 2, 3], tellers=2)
    assert _timeline(result) == [(1, 0, 4, 0), (2, 0, 2, 1), (3, 2, 5, 1)]


def test_lowest_free_teller_is_chosen():
    result = simulate([0, 0, 1, 6], [5, 1, 1, 1], tellers=3)
    assert [r.teller for r in result.records] == [0, 1, 1, 0]


def test_queue_log_records_changes():
    result = simulate([0, 1, 2, 3], [3, 3, 3, 3])
    assert result.queue_log == [(0, 0), (1, 1), (2, 2), (3, 2), (6, 1), (9, 0)]


def test_balking_when_queue_full():
    result = simulate([0, 1, 2, 3], [10, 1, 1, 1], max_queue=1)
    assert result.balked == [3, 4]
    assert [r.cid for r in result.records] == [1, 2]


def test_max_queue_zero_means_no_waiting():
    result = simulate([0, 1, 5], [3, 1, 1], max_queue=0)
    assert result.balked == [2]
    assert result.served == 2


def test_max_queue_boundary_allows_exactly_limit():
    result = simulate([0, 1, 2], [10, 1, 1], max_queue=2)
    assert result.balked == []
    assert result.served == 3


def test_records_sorted_by_customer_id():
    customers = [Customer(3, 5, 1), Customer(1, 0, 1), Customer(2, 2, 1)]
    result = simulate_customers(customers)
    assert [r.cid for r in result.records] == [1, 2, 3]


def test_same_arrival_time_keeps_input_order():
    customers = [Customer(9, 0, 2), Customer(4, 0, 2)]
    result = simulate_customers(customers)
    assert result.record_for(9).start == 0
    assert result.record_for(4).start == 2


def test_record_for_missing_id():
    result = simulate([0], [1])
    with pytest.raises(KeyError):
        result.record_for(99)


def test_zero_tellers_rejected():
    with pytest.raises(ValueError):
        simulate([0], [1], tellers=0)
