"""gridpath: BFS, Dijkstra and A* on 2D grids."""

from .grid import Grid, GridError, WALL, OPEN, START, GOAL
from .heuristics import manhattan, chebyshev, euclidean, octile, zero, get_heuristic
from .search import (
    SearchResult, reconstruct_path, bfs, dijkstra, astar,
    distance_map, reachable, farthest_cell,
)
from .paths import is_adjacent, is_valid_path, path_cost, turns, render

__all__ = [
    "Grid", "GridError", "WALL", "OPEN", "START", "GOAL",
    "manhattan", "chebyshev", "euclidean", "octile", "zero", "get_heuristic",
    "SearchResult", "reconstruct_path", "bfs", "dijkstra", "astar",
    "distance_map", "reachable", "farthest_cell",
    "is_adjacent", "is_valid_path", "path_cost", "turns", "render",
]
