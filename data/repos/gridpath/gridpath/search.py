"""Search algorithms: BFS, Dijkstra and A*."""

import heapq
from collections import deque

from .grid import GridError
from .heuristics import manhattan, octile


class SearchResult:
    """Outcome of a search: the path (empty if none), its cost and nodes expanded."""

    def __init__(self, path, cost, expanded):
        self.path = path
        self.cost = cost
        self.expanded = expanded

    @property
    def found(self):
        """True if a path was found."""
        return len(self.path) > 0

    @property
    def steps(self):
        """Number of moves in the path."""
        return max(len(self.path) - 1, 0)


def reconstruct_path(came_from, start, goal):
    """Rebuild the path from start to goal using a predecessor map."""
    if goal != start and goal not in came_from:
        return []
    path = [goal]
    current = goal
    while current != start:
        current = came_from[current]
        path.append(current)
    path.reverse()
    return path


def _check_endpoints(grid, start, goal):
    for pos in (start, goal):
        if not grid.passable(pos):
            raise GridError(f"endpoint {pos} is not passable")


def bfs(grid, start, goal):
    """Shortest path by number of steps, ignoring cell weights."""
    _check_endpoints(grid, start, goal)
    frontier = deque([start])
    came_from = {}
    seen = {start}
    expanded = 0
    while frontier:
        current = frontier.popleft()
        expanded += 1
        if current == goal:
            break
        for nxt in grid.neighbors(current):
            if nxt not in seen:
                seen.add(nxt)
                came_from[nxt] = current
                frontier.append(nxt)
    path = reconstruct_path(came_from, start, goal)
    return SearchResult(path, len(path) - 1 if path else None, expanded)


def _best_first(grid, start, goal, heuristic):
    _check_endpoints(grid, start, goal)
    counter = 0
    frontier = [(heuristic(start, goal), counter, start)]
    best = {start: 0}
    came_from = {}
    closed = set()
    expanded = 0
    while frontier:
        _, _, current = heapq.heappop(frontier)
        if current in closed:
            continue
        closed.add(current)
        expanded += 1
        if current == goal:
            break
        for nxt in grid.neighbors(current):
            new_cost = best[current] + grid.step_cost(current, nxt)
            if nxt not in best or new_cost < best[nxt]:
                best[nxt] = new_cost
                came_from[nxt] = current
                counter += 1
                heapq.heappush(frontier, (new_cost + heuristic(nxt, goal), counter, nxt))
    path = reconstruct_path(came_from, start, goal)
    return SearchResult(path, best[goal] if path else None, expanded)


def dijkstra(grid, start, goal):
    """Cheapest path using cell weights."""
    return _best_first(grid, start, goal, lambda a, b: 0)


def astar(grid, start, goal, heuristic=None):
    """Cheapest path using A*; defaults to Manhattan (octile if diagonal moves allowed)."""
    if heuristic is None:
        heuristic = octile if grid.diagonal else manhattan
    return _best_first(grid, start, goal, heuristic)


def distance_map(grid, start):
    """Map every reachable cell to its BFS step distance from start."""
    if not grid.passable(start):
        raise GridError(f"start {start} is not passable")
    dist = {start: 0}
    frontier = deque([start])
    while frontier:
        current = frontier.popleft()
        for nxt in grid.neighbors(current):
            if nxt not in dist:
                dist[nxt] = dist[current] + 1
                frontier.append(nxt)
    return dist


def reachable(grid, start, goal):
    """True if goal can be reached from start."""
    return goal in distance_map(grid, start)


def farthest_cell(grid, start):
    """Reachable cell with the largest step distance; ties broken by smallest position."""
    dist = distance_map(grid, start)
    return min(dist, key=lambda pos: (-dist[pos], pos))
