"""An immutable set of disjoint closed intervals."""

from .interval import Interval
from .ops import merge, gaps as _gaps, _coerce


class IntervalSet:
    """Sorted, merged intervals; discrete mode merges integer neighbours."""

    def __init__(self, intervals=(), discrete=False):
        self.discrete = discrete
        self._intervals = tuple(merge(intervals, discrete))

    @classmethod
    def from_pairs(cls, pairs, discrete=False):
        """Build a set from (lo, hi) pairs."""
        return cls([Interval(lo, hi) for lo, hi in pairs], discrete)

    def _new(self, intervals):
        return IntervalSet(intervals, self.discrete)

    def _check(self, other):
        if self.discrete != other.discrete:
            raise ValueError("cannot combine discrete and continuous sets")

    @property
    def intervals(self):
        """The disjoint intervals in ascending order."""
        return self._intervals

    def pairs(self):
        """The intervals as (lo, hi) tuples."""
        return [iv.as_tuple() for iv in self._intervals]

    def __len__(self):
        return len(self._intervals)

    def __iter__(self):
        return iter(self._intervals)

    def __bool__(self):
        return bool(self._intervals)

    def __eq__(self, other):
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self.discrete == other.discrete and self._intervals == other._intervals

    def __repr__(self):
        return f"IntervalSet({self.pairs()!r}, discrete={self.discrete})"

    def add(self, item):
        """New set with one more interval."""
        return self._new(self._intervals + (_coerce(item),))

    def union(self, other):
        """Points in either set."""
        self._check(other)
        return self._new(self._intervals + other._intervals)

    def intersection(self, other):
        """Points in both sets."""
        self._check(other)
        a, b = self._intervals, other._intervals
        i = j = 0
        result = []
        while i < len(a) and j < len(b):
            common = a[i].intersection(b[j])
            if common is not None:
                result.append(common)
            if a[i].hi < b[j].hi:
                i += 1
            else:
                j += 1
        return self._new(result)

    def difference(self, other):
        """Points in this set but not in other (continuous cuts keep endpoints)."""
        self._check(other)
        gap = 1 if self.discrete else 0
        pieces = list(self._intervals)
        for cut in other._intervals:
            remaining = []
            for piece in pieces:
                if not piece.overlaps(cut):
                    remaining.append(piece)
                    continue
                if piece.lo < cut.lo:
                    remaining.append(Interval(piece.lo, cut.lo - gap))
                if piece.hi > cut.hi:
                    remaining.append(Interval(cut.hi + gap, piece.hi))
            pieces = remaining
        return self._new(pieces)

    def symmetric_difference(self, other):
        """Points in exactly one of the sets."""
        return self.difference(other).union(other.difference(self))

    def complement(self, lo, hi):
        """Points of [lo, hi] not in this set."""
        return self._new([Interval(lo, hi)]).difference(self)

    def gaps(self):
        """Holes between consecutive intervals."""
        return _gaps(self._intervals, self.discrete)

    def contains(self, x):
        """True if some interval contains x."""
        return any(iv.contains(x) for iv in self._intervals)

    def contains_interval(self, item):
        """True if a single member interval covers item entirely."""
        target = _coerce(item)
        return any(iv.contains_interval(target) for iv in self._intervals)

    def measure(self):
        """Total length (continuous) or number of integers (discrete)."""
        if self.discrete:
            return sum(iv.size() for iv in self._intervals)
        return sum(iv.length for iv in self._intervals)

    def bounds(self):
        """Hull of all intervals, or None when empty."""
        if not self._intervals:
            return None
        return Interval(self._intervals[0].lo, self._intervals[-1].hi)

    def largest(self):
        """The longest interval (the first one on ties), or None when empty."""
        best = None
        for iv in self._intervals:
            if best is None or iv.length > best.length:
                best = iv
        return best

    def nearest(self, x):
        """The point of the set closest to x (lower point on ties)."""
        if not self._intervals:
            raise ValueError("empty set has no nearest point")
        candidates = [iv.clamp(x) for iv in self._intervals]
        return min(candidates, key=lambda p: (abs(p - x), p))
