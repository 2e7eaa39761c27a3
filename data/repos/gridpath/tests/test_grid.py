import pytest

from gridpath import Grid, GridError

OPEN3 = ["...", "...", "..."]


def test_from_text_strips_and_skips_blank_lines():
    grid = Grid.from_text("""
        S.#
        ..G
    """)
    assert grid.rows == ["S.#", "..G"]
    assert (grid.height, grid.width) == (2, 3)
    assert grid.diagonal is False


def test_empty_grid_rejected():
    with pytest.raises(GridError):
        Grid([])
    with pytest.raises(GridError):
        Grid([""])


def test_ragged_rows_rejected():
    with pytest.raises(GridError):
        Grid(["...", ".."])


def test_in_bounds_inside():
    grid = Grid(["....", "....", "...."])
    assert grid.in_bounds((0, 0)) is True
    assert grid.in_bounds((2, 3)) is True


def test_in_bounds_outside():
    grid = Grid(["....", "....", "...."])
    assert grid.in_bounds((3, 0)) is False
    assert grid.in_bounds((0, 4)) is False
    assert grid.in_bounds((-1, 0)) is False
    assert grid.in_bounds((0, -1)) is False


def test_cell_out_of_bounds():
    with pytest.raises(GridError):
        Grid(OPEN3).cell((3, 0))


def test_passable():
    grid = Grid(["S#", ".G"])
    assert grid.passable((0, 0)) is True
    assert grid.passable((0, 1)) is False
    assert grid.passable((2, 0)) is False


def test_cost_of_cells():
    grid = Grid([".5S", "G#9"])
    assert grid.cost((0, 0)) == 1
    assert grid.cost((0, 1)) == 5
    assert grid.cost((0, 2)) == 1
    assert grid.cost((1, 0)) == 1
    assert grid.cost((1, 2)) == 9


def test_cost_of_wall_and_zero():
    with pytest.raises(GridError):
        Grid(["#"]).cost((0, 0))
    with pytest.raises(GridError):
        Grid(["0"]).cost((0, 0))


def test_step_cost_diagonal_multiplier():
    grid = Grid([".3", "2."], diagonal=True)
    assert grid.step_cost((0, 0), (0, 1)) == 3
    assert grid.step_cost((0, 1), (1, 0)) == 3.0
    assert grid.step_cost((1, 1), (0, 0)) == 1.5


def test_neighbors_orthogonal_order():
    assert Grid(OPEN3).neighbors((1, 1)) == [(0, 1), (1, 2), (2, 1), (1, 0)]


def test_neighbors_corner():
    assert Grid(OPEN3).neighbors((0, 0)) == [(0, 1), (1, 0)]
    assert Grid(OPEN3).neighbors((2, 2)) == [(1, 2), (2, 1)]


def test_neighbors_diagonal_order():
    assert Grid(OPEN3, diagonal=True).neighbors((1, 1)) == [
        (0, 1), (1, 2), (2, 1), (1, 0), (0, 2), (2, 2), (2, 0), (0, 0),
    ]


def test_neighbors_skip_walls():
    assert Grid([".#.", "...", "#.."]).neighbors((1, 1)) == [(1, 2), (2, 1), (1, 0)]


def test_diagonal_cannot_cut_corners():
    grid = Grid(["S#", ".G"], diagonal=True)
    assert grid.neighbors((0, 0)) == [(1, 0)]
    grid2 = Grid(["S.", ".G"], diagonal=True)
    assert grid2.neighbors((0, 0)) == [(0, 1), (1, 0), (1, 1)]


def test_find_markers():
    grid = Grid(["..S", "G.."])
    assert grid.find("S") == (0, 2)
    assert grid.find("G") == (1, 0)
    with pytest.raises(GridError):
        grid.find("X")


def test_counts():
    grid = Grid(["#.#", "...", "##."])
    assert grid.count_walls() == 4
    assert grid.open_cells() == 5
