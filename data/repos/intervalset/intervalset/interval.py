"""A single closed interval [lo, hi]."""


class Interval:
    """Closed interval from lo to hi inclusive."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        if lo > hi:
            raise ValueError(f"empty interval: lo={lo} > hi={hi}")
        self.lo = lo
        self.hi = hi

    def __repr__(self):
        return f"Interval({self.lo}, {self.hi})"

    def __eq__(self, other):
        if not isinstance(other, Interval):
            return NotImplemented
        return self.lo == other.lo and self.hi == other.hi

    def __lt__(self, other):
        return (self.lo, self.hi) < (other.lo, other.hi)

    def __hash__(self):
        return hash((self.lo, self.hi))

    def as_tuple(self):
        """Return (lo, hi)."""
        return (self.lo, self.hi)

    @property
    def length(self):
        """Continuous length hi - lo."""
        return self.hi - self.lo

    def size(self):
        """Number of integers in the interval (for integer bounds)."""
        return self.hi - self.lo + 1

    def midpoint(self):
        """Centre of the interval."""
        return (self.lo + self.hi) / 2

    def contains(self, x):
        """True if lo <= x <= hi."""
        return self.lo <= x <= self.hi

    def contains_interval(self, other):
        """True if other lies entirely inside this interval."""
        return self.lo <= other.lo and other.hi <= self.hi

    def overlaps(self, other):
        """True if the intervals share at least one point."""
        return self.lo <= other.hi and other.lo <= self.hi

    def is_adjacent(self, other, step=1):
        """True if the intervals are separated by exactly step (integer neighbours)."""
        return self.hi + step == other.lo or other.hi + step == self.lo

    def intersection(self, other):
        """The common part, or None if disjoint."""
        lo = max(self.lo, other.lo)
        hi = min(self.hi, other.hi)
        if lo > hi:
            return None
        return Interval(lo, hi)

    def hull(self, other):
        """Smallest interval containing both."""
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def distance(self, other):
        """Gap between the intervals (0 if they overlap)."""
        if self.overlaps(other):
            return 0
        return max(other.lo - self.hi, self.lo - other.hi)

    def shift(self, delta):
        """Interval moved by delta."""
        return Interval(self.lo + delta, self.hi + delta)

    def expand(self, amount):
        """Interval grown by amount on both sides (negative shrinks)."""
        return Interval(self.lo - amount, self.hi + amount)

    def clamp(self, x):
        """Nearest point of the interval to x."""
        if x < self.lo:
            return self.lo
        if x > self.hi:
            return self.hi
        return x

    def split(self, at):
        """Split into [lo, at] and [at, hi]; at must be strictly inside."""
        if not self.lo < at < self.hi:
            raise ValueError(f"split point {at} not inside {self!r}")
        return Interval(self.lo, at), Interval(at, self.hi)
