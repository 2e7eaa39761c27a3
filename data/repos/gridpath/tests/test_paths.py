import pytest

from gridpath import Grid, GridError, is_adjacent, is_valid_path, path_cost, turns, render, dijkstra

WEIGHTED = Grid(["S91", ".9.", "..."])


def test_is_adjacent_orthogonal():
    assert is_adjacent((1, 1), (1, 2)) is True
    assert is_adjacent((1, 1), (2, 2)) is False
    assert is_adjacent((1, 1), (1, 1)) is False
    assert is_adjacent((1, 1), (1, 3)) is False


def test_is_adjacent_diagonal():
    assert is_adjacent((1, 1), (2, 2), diagonal=True) is True
    assert is_adjacent((1, 1), (0, 1), diagonal=True) is True
    assert is_adjacent((1, 1), (3, 2), diagonal=True) is False
    assert is_adjacent((1, 1), (1, 1), diagonal=True) is False


def test_is_valid_path():
    assert is_valid_path(WEIGHTED, [(0, 0), (1, 0), (2, 0)]) is True
    assert is_valid_path(WEIGHTED, [(0, 0), (2, 0)]) is False
    assert is_valid_path(WEIGHTED, []) is False
    assert is_valid_path(Grid(["S#."]), [(0, 0), (0, 1), (0, 2)]) is False


def test_single_cell_path_is_valid():
    assert is_valid_path(WEIGHTED, [(1, 1)]) is True
    assert path_cost(WEIGHTED, [(1, 1)]) == 0


def test_path_cost_counts_entered_cells():
    assert path_cost(WEIGHTED, [(0, 0), (0, 1), (0, 2)]) == 10
    assert path_cost(WEIGHTED, [(0, 2), (0, 1), (0, 0)]) == 10
    assert path_cost(WEIGHTED, [(0, 0), (1, 0), (1, 1)]) == 10


def test_path_cost_invalid():
    with pytest.raises(GridError):
        path_cost(WEIGHTED, [(0, 0), (2, 2)])


def test_path_cost_matches_search():
    result = dijkstra(WEIGHTED, (0, 0), (0, 2))
    assert path_cost(WEIGHTED, result.path) == result.cost


def test_turns():
    assert turns([(0, 0), (0, 1), (0, 2)]) == 0
    assert turns([(1, 0), (2, 0), (3, 0)]) == 0
    assert turns([(0, 0), (0, 1), (1, 1), (1, 2)]) == 2
    assert turns([(0, 0)]) == 0
    assert turns([]) == 0


def test_render_marks_interior():
    grid = Grid(["S..", "...", "..G"])
    path = [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2)]
    assert render(grid, path) == ["S..", "*..", "**G"]


def test_render_custom_mark_short_path():
    grid = Grid(["S.G"])
    assert render(grid, [(0, 0), (0, 1), (0, 2)], mark="o") == ["SoG"]
    assert render(grid, [(0, 0)]) == ["S.G"]
