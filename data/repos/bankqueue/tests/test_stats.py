import pytest

from bankqueue import (
    average_queue_length,
    average_time_in_system,
    average_wait,
    balk_rate,
    busy_time,
    count_waited,
    max_queue_length,
    max_wait,
    service_level,
    simulate,
    summary,
    teller_loads,
    throughput,
    utilisation,
)


@pytest.fixture
def backlog():
    return simulate([0, 1, 2, 3], [3, 3, 3, 3])


@pytest.fixture
def empty():
    return simulate([], [])


def test_average_wait(backlog):
    assert average_wait(backlog) == 3.0


def test_average_wait_empty(empty):
    assert average_wait(empty) == 0.0


def test_max_wait(backlog, empty):
    assert max_wait(backlog) == 6
    assert max_wait(empty) == 0


def test_average_time_in_system(backlog):
    assert average_time_in_system(backlog) == 6.0


def test_count_waited_threshold_is_strict(backlog):
    assert count_waited(backlog) == 3
    assert count_waited(backlog, threshold=4) == 1
    assert count_waited(backlog, threshold=6) == 0


def test_service_level_inclusive(backlog):
    assert service_level(backlog, 2) == 0.5
    assert service_level(backlog, 6) == 1.0
    assert service_level(backlog, 1) == 0.25


def test_service_level_empty(empty):
    assert service_level(empty, 0) == 1.0


def test_busy_time_per_teller():
    result = simulate([0, 0, 0], [4, 2, 3], tellers=2)
    assert busy_time(result, 0) == 4
    assert busy_time(result, 1) == 5


def test_utilisation_full(backlog):
    assert utilisation(backlog) == 1.0


def test_utilisation_with_idle_time():
    result = simulate([0, 6], [2, 2])
    assert utilisation(result) == 0.5


def test_utilisation_two_tellers():
    result = simulate([0, 0, 0], [4, 2, 3], tellers=2)
    assert utilisation(result) == 9 / 10


def test_utilisation_horizon_truncates(backlog):
    assert utilisation(backlog, horizon=6) == 1.0
    result = simulate([0, 8], [4, 4])
    assert utilisation(result, horizon=10) == 0.6


def test_utilisation_empty(empty):
    assert utilisation(empty) == 0.0


def test_teller_loads():
    result = simulate([0, 0, 1, 6], [5, 1, 1, 1], tellers=3)
    assert teller_loads(result) == [2, 2, 0]


def test_max_queue_length(backlog, empty):
    assert max_queue_length(backlog) == 2
    assert max_queue_length(empty) == 0


def test_average_queue_length(backlog):
    assert average_queue_length(backlog) == 1.0


def test_average_queue_length_with_horizon(backlog):
    assert average_queue_length(backlog, horizon=4) == 1.25


def test_average_queue_length_empty(empty):
    assert average_queue_length(empty) == 0.0


def test_balk_rate():
    result = simulate([0, 1, 2, 3], [10, 1, 1, 1], max_queue=1)
    assert balk_rate(result) == 0.5


def test_balk_rate_empty(empty):
    assert balk_rate(empty) == 0.0


def test_throughput(backlog, empty):
    assert throughput(backlog) == 4 / 12
    assert throughput(empty) == 0.0


def test_summary(backlog):
    assert summary(backlog) == {
        "served": 4,
        "balked": 0,
        "average_wait": 3.0,
        "max_wait": 6,
        "utilisation": 1.0,
        "max_queue": 2,
        "average_queue": 1.0,
    }
