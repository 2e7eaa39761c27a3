"""Distance heuristics for A*."""

import math

def manhattan(a, b):
    """Sum of absolute coordinate differences."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def chebyshev(a, b):
    """Largest absolute coordinate difference."""
    return max(abs(a[0] - b[0]), abs(a[1] - b[1]))


def euclidean(a, b):
    """Straight-line distance."""
    return math.hypot(a[0] - b[0], a[1] - b[1])


def octile(a, b, diagonal_cost=1.5):
    """Distance with 8-way moves where a diagonal step costs diagonal_cost."""
    dr = abs(a[0] - b[0])
    dc = abs(a[1] - b[1])
    return max(dr, dc) + (diagonal_cost - 1) * min(dr, dc)


def zero(a, b):
    """Heuristic that always returns 0 (turns A* into Dijkstra)."""
    return 0


HEURISTICS = {
    "manhattan": manhattan,
    "chebyshev": chebyshev,
    "euclidean": euclidean,
    "octile": octile,
    "zero": zero,
}


def get_heuristic(name):
    """Look up a heuristic by name."""
    try:
        return HEURISTICS[name]
    except KeyError:
        raise ValueError(f"unknown heuristic {name!r}") from None
