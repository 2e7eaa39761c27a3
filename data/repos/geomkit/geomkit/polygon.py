"""Polygon measurements and point-in-polygon tests."""

from .segment import as_vecs, on_segment
from .vector import Vec, distance, orientation

INSIDE = "inside"
OUTSIDE = "outside"
BOUNDARY = "boundary"


def _edges(points):
    count = len(points)
    for i in range(count):
        yield points[i], points[(i + 1) % count]


def signed_area(points):
    """Shoelace signed area: positive for counter-clockwise vertex order."""
    total = 0.0
    for a, b in _edges(as_vecs(points)):
        total += a.cross(b)
    return total / 2.0


def area(points):
    """Absolute area of a simple polygon."""
    return abs(signed_area(points))


def is_counter_clockwise(points):
    """Return True if the vertices are in counter-clockwise order."""
    return signed_area(points) > 0


def perimeter(points):
    """Total length of the closed boundary."""
    return sum(distance(a, b) for a, b in _edges(as_vecs(points)))


def centroid(points):
    """Area centroid of a simple polygon."""
    pts = as_vecs(points)
    a = signed_area(pts)
    if a == 0:
        raise ValueError("degenerate polygon has no centroid")
    cx = 0.0
    cy = 0.0
    for p, q in _edges(pts):
        weight = p.cross(q)
        cx += (p.x + q.x) * weight
        cy += (p.y + q.y) * weight
    factor = 1.0 / (6.0 * a)
    return Vec(cx * factor, cy * factor)


def bounding_box(points):
    """Return (min corner, max corner) of the points; ValueError if there are none."""
    pts = as_vecs(points)
    xs = [p.x for p in pts]
    ys = [p.y for p in pts]
    return Vec(min(xs), min(ys)), Vec(max(xs), max(ys))


def is_convex(points):
    """Return True if the polygon is convex (collinear vertices allowed, degenerate ones not)."""
    pts = as_vecs(points)
    count = len(pts)
    sign = 0
    for i in range(count):
        turn = orientation(pts[i], pts[(i + 1) % count], pts[(i + 2) % count])
        if turn == 0:
            continue
        if sign == 0:
            sign = turn
        elif turn != sign:
            return False
    return sign != 0


def locate_point(p, points):
    """Classify p as INSIDE, OUTSIDE or on the BOUNDARY of the polygon (ray casting)."""
    pts = as_vecs(points)
    p = as_vecs([p])[0]
    inside = False
    for a, b in _edges(pts):
        if on_segment(p, a, b):
            return BOUNDARY
        if (a.y > p.y) != (b.y > p.y):
            x_cross = a.x + (p.y - a.y) * (b.x - a.x) / (b.y - a.y)
            if p.x < x_cross:
                inside = not inside
    return INSIDE if inside else OUTSIDE


def contains(points, p, include_boundary=True):
    """Return True if p is inside the polygon (or on its boundary if allowed)."""
    where = locate_point(p, points)
    if where == BOUNDARY:
        return include_boundary
    return where == INSIDE
