import pytest

from scheduler import (
    Project,
    SchedulingError,
    Timing,
    analyse,
    critical_path,
    critical_tasks,
    earliest_times,
    latest_times,
    list_schedule,
    makespan,
    project_duration,
    project_from_dict,
    slack,
)

SPEC = {
    "A": (3, []),
    "B": (2, ["A"]),
    "C": (4, ["A"]),
    "D": (1, ["B"]),
    "E": (2, ["C", "D"]),
    "F": (3, ["E"]),
    "G": (2, ["B"]),
}


def sample():
    return project_from_dict(SPEC)


def test_timing_slack_and_tuple():
    t = Timing(2, 5, 4, 7)
    assert t.slack == 2
    assert t.is_critical() is False
    assert t.as_tuple() == (2, 5, 4, 7)
    assert Timing(1, 2, 1, 2).is_critical() is True


def test_earliest_times():
    project = sample()
    assert earliest_times(project) == {
        "A": (0, 3), "B": (3, 5), "C": (3, 7), "D": (5, 6),
        "E": (7, 9), "F": (9, 12), "G": (5, 7),
    }


def test_earliest_times_with_start():
    project = sample()
    assert earliest_times(project, start=10)["E"] == (17, 19)


def test_project_duration():
    project = sample()
    assert project_duration(project) == 12
    assert project_duration(project, start=5) == 12


def test_project_duration_empty():
    assert project_duration(Project()) == 0


def test_latest_times():
    project = sample()
    assert latest_times(project) == {
        "A": (0, 3), "B": (4, 6), "C": (3, 7), "D": (6, 7),
        "E": (7, 9), "F": (9, 12), "G": (10, 12),
    }


def test_latest_times_with_deadline():
    project = sample()
    assert latest_times(project, deadline=15)["A"] == (3, 6)


def test_deadline_equal_to_duration_allowed():
    project = sample()
    assert latest_times(project, deadline=12)["F"] == (9, 12)


def test_deadline_too_short():
    project = sample()
    with pytest.raises(SchedulingError):
        latest_times(project, deadline=11)


def test_slack():
    project = sample()
    assert slack(project) == {"A": 0, "B": 1, "C": 0, "D": 1, "E": 0, "F": 0, "G": 5}


def test_slack_with_deadline():
    project = sample()
    assert slack(project, deadline=14)["C"] == 2


def test_analyse_timing():
    project = sample()
    assert analyse(project)["G"].as_tuple() == (5, 7, 10, 12)


def test_critical_tasks():
    project = sample()
    assert critical_tasks(project) == ["A", "C", "E", "F"]


def test_critical_path():
    project = sample()
    assert critical_path(project) == ["A", "C", "E", "F"]


def test_critical_path_parallel_equal_branches():
    p = project_from_dict({"s": (1, []), "x": (2, ["s"]), "y": (2, ["s"]), "t": (1, ["x", "y"])})
    assert critical_tasks(p) == ["s", "t", "x", "y"]
    assert critical_path(p) == ["s", "x", "t"]


def test_critical_path_empty():
    assert critical_path(Project()) == []


def test_list_schedule_two_workers():
    project = sample()
    assert list_schedule(project, 2) == {
        "A": (0, 0), "B": (3, 0), "C": (3, 1), "D": (5, 0),
        "E": (7, 0), "F": (9, 0), "G": (7, 1),
    }


def test_makespan():
    project = sample()
    assert makespan(project, 2) == 12
    assert makespan(project, 1) == 17


def test_makespan_independent_tasks():
    p = project_from_dict({"a": (4, []), "b": (3, []), "c": (2, []), "d": (1, [])})
    assert makespan(p, 2) == 5
    assert makespan(p, 4) == 4


def test_makespan_empty():
    assert makespan(Project(), 3) == 0


def test_list_schedule_invalid_workers():
    project = sample()
    with pytest.raises(SchedulingError):
        list_schedule(project, 0)
