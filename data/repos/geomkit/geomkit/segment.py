"""Line segments: containment, intersection and distances."""

from .vector import Vec, orientation


def on_segment(p, a, b):
    """Return True if point p lies on the closed segment ab."""
    if orientation(a, b, p) != 0:
        return False
    return min(a.x, b.x) <= p.x <= max(a.x, b.x) and min(a.y, b.y) <= p.y <= max(a.y, b.y)


def segments_intersect(a, b, c, d):
    """Return True if closed segments ab and cd share at least one point."""
    o1 = orientation(a, b, c)
    o2 = orientation(a, b, d)
    o3 = orientation(c, d, a)
    o4 = orientation(c, d, b)
    if o1 != o2 and o3 != o4:
        return True
    if o1 == 0 and o2 == 0:
        # collinear: the segments meet if their projections overlap on both axes
        return _overlap(a.x, b.x, c.x, d.x) and _overlap(a.y, b.y, c.y, d.y)
    return False


def _overlap(p, q, r, s):
    """Return True if the closed intervals [p, q] and [r, s] (any order) overlap."""
    return max(min(p, q), min(r, s)) <= min(max(p, q), max(r, s))


def intersection_point(a, b, c, d):
    """Return the single intersection point of segments ab and cd, or None."""
    r = b - a
    s = d - c
    denom = r.cross(s)
    if denom == 0:
        return None
    qp = c - a
    t = qp.cross(s) / denom
    u = qp.cross(r) / denom
    if 0 <= t <= 1 and 0 <= u <= 1:
        return a + r * t
    return None


def project_parameter(p, a, b):
    """Return t such that a + t*(b-a) is the projection of p onto line ab."""
    ab = b - a
    length_sq = ab.length_squared()
    if length_sq == 0:
        return 0.0
    return (p - a).dot(ab) / length_sq


def closest_point(p, a, b):
    """Return the point on segment ab closest to p."""
    t = project_parameter(p, a, b)
    t = max(0.0, min(1.0, t))
    return a + (b - a) * t


def distance_to_segment(p, a, b):
    """Shortest distance from p to segment ab."""
    return (p - closest_point(p, a, b)).length()


def segment_length(a, b):
    """Length of segment ab."""
    return (b - a).length()


def split_segment(a, b, parts):
    """Return the parts+1 evenly spaced points from a to b."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    step = (b - a) * (1.0 / parts)
    return [a + step * i for i in range(parts + 1)]


def as_vecs(points):
    """Convert (x, y) tuples to Vec objects."""
    return [p if isinstance(p, Vec) else Vec(p[0], p[1]) for p in points]
