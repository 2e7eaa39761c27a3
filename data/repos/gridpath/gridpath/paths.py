"""Helpers to validate, measure and render paths."""

from .grid import GridError


def is_adjacent(a, b, diagonal=False):
    """True if b is one move away from a."""
    dr = abs(a[0] - b[0])
    dc = abs(a[1] - b[1])
    if diagonal:
        return max(dr, dc) == 1
    return dr + dc == 1


def is_valid_path(grid, path):
    """True if every cell is passable and consecutive cells are adjacent."""
    if not path:
        return False
    for pos in path:
        if not grid.passable(pos):
            return False
    for a, b in zip(path, path[1:]):
        if not is_adjacent(a, b, grid.diagonal):
            return False
    return True


def path_cost(grid, path):
    """Total cost of following path (the start cell is free)."""
    if not is_valid_path(grid, path):
        raise GridError("invalid path")
    return sum(grid.step_cost(a, b) for a, b in zip(path, path[1:]))


def turns(path):
    """Number of direction changes along a path."""
    count = 0
    previous = None
    for a, b in zip(path, path[1:]):
        direction = (b[0] - a[0], b[1] - a[1])
        if previous is not None and direction != previous:
            count += 1
        previous = direction
    return count


def render(grid, path, mark="*"):
    """Return the grid rows with path cells (except endpoints) replaced by mark."""
    cells = [list(row) for row in grid.rows]
    for r, c in path[1:-1]:
        cells[r][c] = mark
    return ["".join(row) for row in cells]
