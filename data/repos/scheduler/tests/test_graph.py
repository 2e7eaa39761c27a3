import pytest

from scheduler import CycleError, Project, SchedulingError, project_from_dict

SPEC = {
    "A": (3, []),
    "B": (2, ["A"]),
    "C": (4, ["A"]),
    "D": (1, ["B"]),
    "E": (2, ["C", "D"]),
    "F": (3, ["E"]),
    "G": (2, ["B"]),
}


def test_tasks_sorted():
    assert project_from_dict(SPEC).tasks() == ["A", "B", "C", "D", "E", "F", "G"]


def test_duration_lookup():
    assert project_from_dict(SPEC).duration("C") == 4


def test_predecessors_sorted_and_deduplicated():
    p = Project().add_task("x", 1).add_task("y", 1).add_task("z", 2, ["y", "x", "y"])
    assert p.predecessors("z") == ["x", "y"]


def test_successors():
    p = project_from_dict(SPEC)
    assert p.successors("B") == ["D", "G"]
    assert p.successors("F") == []


def test_roots_and_leaves():
    p = project_from_dict(SPEC)
    assert p.roots() == ["A"]
    assert p.leaves() == ["F", "G"]


def test_total_work():
    assert project_from_dict(SPEC).total_work() == 17


def test_zero_duration_allowed():
    assert Project().add_task("milestone", 0).duration("milestone") == 0


def test_negative_duration_rejected():
    with pytest.raises(SchedulingError):
        Project().add_task("a", -1)


def test_duplicate_task_rejected():
    with pytest.raises(SchedulingError):
        Project().add_task("a", 1).add_task("a", 2)


def test_self_dependency_is_cycle():
    with pytest.raises(CycleError) as info:
        Project().add_task("a", 1, ["a"])
    assert info.value.cycle == ["a", "a"]


def test_unknown_dependency_rejected():
    with pytest.raises(SchedulingError):
        project_from_dict({"a": (1, ["ghost"])})


def test_cycle_error_message():
    err = CycleError(["a", "b", "a"])
    assert str(err) == "dependency cycle: a -> b -> a"
    assert isinstance(err, SchedulingError)
