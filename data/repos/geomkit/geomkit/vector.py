"""Points and vectors in the plane."""

import math

class Vec:
    """An immutable 2D point or vector."""

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __add__(self, other):
        return Vec(self.x + other.x, self.y + other.y)

    def __sub__(self, other):
        return Vec(self.x - other.x, self.y - other.y)

    def __mul__(self, factor):
        return Vec(self.x * factor, self.y * factor)

    def __neg__(self):
        return Vec(-self.x, -self.y)

    def __eq__(self, other):
        if not isinstance(other, Vec):
            return NotImplemented
        return self.x == other.x and self.y == other.y

    def __hash__(self):
        return hash((self.x, self.y))

    def rounded(self, digits=9):
        """Return a copy with both coordinates rounded (useful for float results)."""
        return Vec(round(self.x, digits), round(self.y, digits))

    def __repr__(self):
        return "Vec(%r, %r)" % (self.x, self.y)

    def dot(self, other):
        """Dot product."""
        return self.x * other.x + self.y * other.y

    def cross(self, other):
        """Z component of the cross product."""
        return self.x * other.y - self.y * other.x

    def length(self):
        """Euclidean length."""
        return math.hypot(self.x, self.y)

    def length_squared(self):
        """Squared Euclidean length."""
        return self.x * self.x + self.y * self.y

    def normalized(self):
        """Unit vector in the same direction."""
        size = self.length()
        if size == 0:
            raise ValueError("cannot normalise a zero vector")
        return Vec(self.x / size, self.y / size)

    def perpendicular(self):
        """The vector rotated 90 degrees counter-clockwise."""
        return Vec(-self.y, self.x)

    def rotated(self, angle):
        """The vector rotated counter-clockwise by angle radians."""
        c = math.cos(angle)
        s = math.sin(angle)
        return Vec(self.x * c - self.y * s, self.x * s + self.y * c)


def distance(a, b):
    """Distance between two points."""
    return (b - a).length()


def midpoint(a, b):
    """Midpoint of two points."""
    return Vec((a.x + b.x) / 2.0, (a.y + b.y) / 2.0)


def angle_between(u, v):
    """Signed angle in radians from u to v, in (-pi, pi]."""
    return math.atan2(u.cross(v), u.dot(v))


def orientation(a, b, c):
    """Return 1 for a counter-clockwise turn a->b->c, -1 for clockwise, 0 if collinear."""
    value = (b - a).cross(c - a)
    if value > 0:
        return 1
    if value < 0:
        return -1
    return 0
