"""Convex hull via Andrew's monotone chain."""

from .polygon import area, perimeter
from .segment import as_vecs
from .vector import Vec


def _half_hull(points):
    chain = []
    for p in points:
        while len(chain) >= 2 and (chain[-1] - chain[-2]).cross(p - chain[-2]) <= 0:
            chain.pop()
        chain.append(p)
    return chain


def convex_hull(points):
    """Return hull vertices counter-clockwise, starting from the lowest-leftmost point."""
    unique = sorted(set(as_vecs(points)), key=lambda p: (p.x, p.y))
    if len(unique) <= 2:
        return unique
    lower = _half_hull(unique)
    upper = _half_hull(list(reversed(unique)))
    return lower[:-1] + upper[:-1]


def hull_area(points):
    """Area of the convex hull of the points."""
    return area(convex_hull(points))


def hull_perimeter(points):
    """Perimeter of the convex hull of the points."""
    return perimeter(convex_hull(points))


def diameter(points):
    """Largest distance between any two of the points."""
    hull = convex_hull(points)
    best = 0.0
    for i in range(len(hull)):
        for j in range(i + 1, len(hull)):
            best = max(best, (hull[j] - hull[i]).length())
    return best


def extreme_point(points, direction):
    """Return the point furthest along direction (first one on ties)."""
    pts = as_vecs(points)
    if not pts:
        raise ValueError("no points")
    d = direction if isinstance(direction, Vec) else Vec(direction[0], direction[1])
    best = pts[0]
    for p in pts[1:]:
        if p.dot(d) > best.dot(d):
            best = p
    return best
