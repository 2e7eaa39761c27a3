import pytest

from gridpath import (
    Grid, GridError, bfs, dijkstra, astar, reconstruct_path, distance_map,
    reachable, farthest_cell, get_heuristic,
)

WALLED = Grid(["S.#.", ".##.", "...G"])
WEIGHTED = Grid(["S91", ".9.", "..."])
BLOCKED = Grid(["S#.", "##.", "..G"])
MAZE = Grid.from_text("""
    S.....#...
    .####.#.#.
    .#....#.#.
    .#.####.#.
    .#......#G
    .########.
    ..........
""")


def test_reconstruct_path():
    came_from = {(0, 1): (0, 0), (0, 2): (0, 1), (1, 0): (0, 0)}
    assert reconstruct_path(came_from, (0, 0), (0, 2)) == [(0, 0), (0, 1), (0, 2)]


def test_reconstruct_path_trivial_and_missing():
    assert reconstruct_path({}, (1, 1), (1, 1)) == [(1, 1)]
    assert reconstruct_path({(0, 1): (0, 0)}, (0, 0), (5, 5)) == []


def test_bfs_open_grid_steps():
    grid = Grid(["....", "....", "...."])
    result = bfs(grid, (0, 0), (2, 3))
    assert result.steps == 5
    assert result.cost == 5
    assert result.path[0] == (0, 0)
    assert result.path[-1] == (2, 3)


def test_bfs_walled_unique_path():
    result = bfs(WALLED, (0, 0), (2, 3))
    assert result.path == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (2, 3)]


def test_bfs_ignores_weights():
    result = bfs(WEIGHTED, (0, 0), (0, 2))
    assert result.path == [(0, 0), (0, 1), (0, 2)]
    assert result.cost == 2


def test_bfs_start_equals_goal():
    result = bfs(WALLED, (0, 0), (0, 0))
    assert result.found is True
    assert result.path == [(0, 0)]
    assert result.steps == 0
    assert result.cost == 0


def test_no_path():
    for search in (bfs, dijkstra, astar):
        result = search(BLOCKED, (0, 0), (2, 2))
        assert result.found is False
        assert result.path == []
        assert result.cost is None
        assert result.steps == 0


def test_wall_endpoint_rejected():
    with pytest.raises(GridError):
        bfs(WALLED, (0, 2), (2, 3))
    with pytest.raises(GridError):
        dijkstra(WALLED, (0, 0), (1, 1))
    with pytest.raises(GridError):
        astar(WALLED, (0, 0), (9, 9))


def test_dijkstra_avoids_expensive_cells():
    result = dijkstra(WEIGHTED, (0, 0), (0, 2))
    assert result.cost == 6
    assert result.path == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (1, 2), (0, 2)]


def test_dijkstra_takes_expensive_cell_when_cheaper():
    grid = Grid(["S3G", ".#.", "..."])
    result = dijkstra(grid, (0, 0), (0, 2))
    assert result.cost == 4
    assert result.path == [(0, 0), (0, 1), (0, 2)]


def test_dijkstra_equal_cost_alternative():
    grid = Grid(["S4G", ".#.", "..."])
    assert dijkstra(grid, (0, 0), (0, 2)).cost == 5
    grid6 = Grid(["S5G", ".#.", "..."])
    assert dijkstra(grid6, (0, 0), (0, 2)).cost == 6


def test_astar_matches_dijkstra_on_weighted():
    assert astar(WEIGHTED, (0, 0), (0, 2)).cost == 6
    assert astar(WEIGHTED, (0, 0), (0, 2), heuristic=get_heuristic("zero")).cost == 6


def test_maze_costs_agree():
    start = MAZE.find("S")
    goal = MAZE.find("G")
    assert goal == (4, 9)
    assert bfs(MAZE, start, goal).steps == 17
    assert dijkstra(MAZE, start, goal).cost == 17
    assert astar(MAZE, start, goal).cost == 17
    assert len(astar(MAZE, start, goal).path) == 18


def test_astar_expands_fewer_nodes():
    grid = Grid(["....."] * 5)
    fast = astar(grid, (2, 0), (2, 4))
    slow = dijkstra(grid, (2, 0), (2, 4))
    assert fast.expanded == 5
    assert fast.cost == slow.cost == 4
    assert slow.expanded > fast.expanded


def test_astar_diagonal_grid():
    grid = Grid(["...", "...", "..."], diagonal=True)
    result = astar(grid, (0, 0), (2, 2))
    assert result.cost == 3.0
    assert result.path == [(0, 0), (1, 1), (2, 2)]


def test_diagonal_blocked_corner_forces_detour():
    grid = Grid(["S#", ".G"], diagonal=True)
    result = dijkstra(grid, (0, 0), (1, 1))
    assert result.path == [(0, 0), (1, 0), (1, 1)]
    assert result.cost == 2


def test_distance_map():
    dist = distance_map(WALLED, (0, 0))
    assert dist[(0, 0)] == 0
    assert dist[(2, 3)] == 5
    assert dist[(0, 3)] == 7
    assert (1, 1) not in dist
    assert len(dist) == 9


def test_distance_map_from_wall():
    with pytest.raises(GridError):
        distance_map(WALLED, (0, 2))


def test_reachable():
    assert reachable(WALLED, (0, 0), (0, 3)) is True
    assert reachable(BLOCKED, (0, 0), (2, 2)) is False
    assert reachable(BLOCKED, (0, 2), (2, 0)) is True


def test_farthest_cell():
    assert farthest_cell(WALLED, (0, 0)) == (0, 3)
    assert farthest_cell(Grid(["..", ".."]), (0, 0)) == (1, 1)
    assert farthest_cell(Grid(["...", "..."]), (0, 1)) == (1, 0)


def test_maze_long_route_when_bottom_blocked():
    rows = list(MAZE.rows)
    rows[6] = ".....#...."
    maze = Grid(rows)
    assert bfs(maze, (0, 0), (4, 9)).steps == 27
    assert astar(maze, (0, 0), (4, 9)).cost == 27


def test_bfs_expanded_count():
    corridor = Grid(["S...G"])
    assert bfs(corridor, (0, 0), (0, 4)).expanded == 5
    assert bfs(corridor, (0, 0), (0, 0)).expanded == 1


def test_ties_broken_in_insertion_order():
    grid = Grid(["..", ".."])
    assert dijkstra(grid, (0, 0), (1, 1)).path == [(0, 0), (0, 1), (1, 1)]
    assert bfs(grid, (0, 0), (1, 1)).path == [(0, 0), (0, 1), (1, 1)]


def test_tie_break_prefers_earlier_neighbour_direction():
    grid = Grid(["...", "...", "..."])
    assert dijkstra(grid, (1, 1), (2, 0)).path == [(1, 1), (2, 1), (2, 0)]


def test_dijkstra_expands_each_cell_once():
    grid = Grid(["S9..........", "............"])
    result = dijkstra(grid, (0, 0), (0, 11))
    assert result.cost == 13
    assert result.expanded == 24
