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


def backlog():
    return simulate([0, 1, 2, 3], [3, 3, 3, 3])


def empty():
    return simulate([], [])


def test_average_wait():
    assert average_wait(backlog()) == 3.0


def test_average_wait_empty():
    assert average_wait(empty()) == 0.0


def test_max_wait():
    assert max_wait(backlog()) == 6
    assert max_wait(empty()) == 0


def test_average_time_in_system():
    assert average_time_in_system(backlog()) == 6.0


def test_count_waited_threshold_is_strict():
    assert count_waited(backlog()) == 3
    assert count_waited(backlog(), threshold=4) == 1
    assert count_waited(backlog(), threshold=6) == 0
    assert count_waited(simulate([0, 1], [2, 1])) == 1


def test_service_level_inclusive():
    assert service_level(backlog(), 2) == 0.5
    assert service_level(backlog(), 6) == 1.0
    assert service_level(backlog(), 1) == 0.25


def test_service_level_empty():
    assert service_level(empty(), 0) == 1.0


def test_busy_time_per_teller():
    result = simulate([0, 0, 0], [4, 2, 3], tellers=2)
    assert busy_time(result, 0) == 4
    assert busy_time(result, 1) == 5


def test_utilisation_full():
    assert utilisation(backlog()) == 1.0


def test_utilisation_with_idle_time():
    result = simulate([0, 6], [2, 2])
    assert utilisation(result) == 0.5


def test_utilisation_two_tellers():
    result = simulate([0, 0, 0], [4, 2, 3], tellers=2)
    assert utilisation(result) == 9 / 10


def test_utilisation_horizon_truncates():
    assert utilisation(backlog(), horizon=6) == 1.0
    result = simulate([0, 8], [4, 4])
    assert utilisation(result, horizon=10) == 0.6


def test_utilisation_short_run():
    assert utilisation(simulate([0], [0.5])) == 1.0


def test_utilisation_empty():
    assert utilisation(empty()) == 0.0


def test_teller_loads():
    result = simulate([0, 0, 1, 6], [5, 1, 1, 1], tellers=3)
    assert teller_loads(result) == [2, 2, 0]


def test_max_queue_length():
    assert max_queue_length(backlog()) == 2
    assert max_queue_length(empty()) == 0


def test_average_queue_length():
    assert average_queue_length(backlog()) == 1.0


def test_average_queue_length_with_horizon():
    assert average_queue_length(backlog(), horizon=4) == 1.25
    assert average_queue_length(simulate([0, 0], [1, 1]), horizon=0.5) == 1.0


def test_average_queue_length_empty():
    assert average_queue_length(empty()) == 0.0


def test_balk_rate():
    result = simulate([0, 1, 2, 3], [10, 1, 1, 1], max_queue=1)
    assert balk_rate(result) == 0.5


def test_balk_rate_empty():
    assert balk_rate(empty()) == 0.0


def test_throughput():
    assert throughput(backlog()) == 4 / 12
    assert throughput(empty()) == 0.0


def test_summary():
    assert summary(backlog()) == {
        "served": 4,
        "balked": 0,
        "average_wait": 3.0,
        "max_wait": 6,
        "utilisation": 1.0,
        "max_queue": 2,
        "average_queue": 1.0,
    }


def test_summary_rounds_to_four_digits():
    result = simulate([0, 1, 5], [2, 1, 1])
    assert summary(result) == {
        "served": 3,
        "balked": 0,
        "average_wait": 0.3333,
        "max_wait": 1,
        "utilisation": 0.6667,
        "max_queue": 1,
        "average_queue": 0.1667,
    }
