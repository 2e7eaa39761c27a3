import pytest

from scheduler import (
    CycleError,
    Project,
    ancestors,
    find_cycle,
    has_cycle,
    in_degrees,
    is_valid_order,
    levels,
    project_from_dict,
    topological_order,
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

CYCLIC = {
    "a": (1, []),
    "b": (1, ["a", "d"]),
    "c": (1, ["b"]),
    "d": (1, ["c"]),
    "e": (1, ["a"]),
}


def test_in_degrees():
    assert in_degrees(project_from_dict(SPEC)) == {
        "A": 0, "B": 1, "C": 1, "D": 1, "E": 2, "F": 1, "G": 1,
    }


def test_topological_order_alphabetical_ties():
    assert topological_order(project_from_dict(SPEC)) == ["A", "B", "C", "D", "E", "F", "G"]


def test_topological_order_independent_tasks():
    p = project_from_dict({"z": (1, []), "m": (1, []), "a": (1, [])})
    assert topological_order(p) == ["a", "m", "z"]


def test_topological_order_prefers_ready_alphabetical():
    p = project_from_dict({"b": (1, []), "a": (1, ["c"]), "c": (1, [])})
    assert topological_order(p) == ["b", "c", "a"]


def test_topological_order_empty():
    assert topological_order(Project()) == []


def test_topological_order_cycle_raises():
    with pytest.raises(CycleError) as info:
        topological_order(project_from_dict(CYCLIC))
    assert info.value.cycle == ["b", "d", "c", "b"]


def test_find_cycle_none():
    assert find_cycle(project_from_dict(SPEC)) is None


def test_find_cycle_two_nodes():
    p = project_from_dict({"x": (1, ["y"]), "y": (1, ["x"])})
    assert find_cycle(p) == ["x", "y", "x"]


def test_find_cycle_skips_finished_branch():
    p = project_from_dict({"a": (1, ["b", "c"]), "b": (1, []), "c": (1, ["a"])})
    assert find_cycle(p) == ["a", "c", "a"]


def test_has_cycle():
    assert has_cycle(project_from_dict(CYCLIC)) is True
    assert has_cycle(project_from_dict(SPEC)) is False


def test_levels():
    assert levels(project_from_dict(SPEC)) == [["A"], ["B", "C"], ["D", "G"], ["E"], ["F"]]


def test_levels_empty_and_flat():
    assert levels(Project()) == []
    assert levels(project_from_dict({"b": (1, []), "a": (2, [])})) == [["a", "b"]]


def test_ancestors():
    p = project_from_dict(SPEC)
    assert ancestors(p, "E") == ["A", "B", "C", "D"]
    assert ancestors(p, "A") == []


def test_is_valid_order():
    p = project_from_dict(SPEC)
    assert is_valid_order(p, ["A", "C", "B", "G", "D", "E", "F"]) is True
    assert is_valid_order(p, ["A", "B", "D", "E", "C", "F", "G"]) is False


def test_is_valid_order_missing_or_duplicate():
    p = project_from_dict(SPEC)
    assert is_valid_order(p, ["A", "B", "C", "D", "E", "F"]) is False
    assert is_valid_order(p, ["A", "B", "C", "D", "E", "F", "G", "G"]) is False
