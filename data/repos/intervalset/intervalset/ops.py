"""Functions over plain lists of intervals."""

from .interval import Interval


def _coerce(item):
    if isinstance(item, Interval):
        return item
    lo, hi = item
    return Interval(lo, hi)


def merge(intervals, discrete=False):
    """Sort and merge overlapping (and, if discrete, adjacent) intervals."""
    gap = 1 if discrete else 0
    result = []
    for iv in sorted(_coerce(i) for i in intervals):
        if result and iv.lo <= result[-1].hi + gap:
            last = result[-1]
            result[-1] = Interval(last.lo, max(last.hi, iv.hi))
        else:
            result.append(iv)
    return result


def gaps(intervals, discrete=False):
    """Uncovered stretches between the merged intervals."""
    merged = merge(intervals, discrete)
    result = []
    for prev, nxt in zip(merged, merged[1:]):
        if discrete:
            result.append(Interval(prev.hi + 1, nxt.lo - 1))
        else:
            result.append(Interval(prev.hi, nxt.lo))
    return result


def total_length(intervals):
    """Length covered by the union of the intervals."""
    return sum(iv.length for iv in merge(intervals))


def max_overlap(intervals):
    """Largest number of intervals sharing a common point (touching counts)."""
    events = []
    for item in intervals:
        iv = _coerce(item)
        events.append((iv.lo, 0, 1))
        events.append((iv.hi, 1, -1))
    events.sort()
    depth = 0
    best = 0
    for _, _, delta in events:
        depth += delta
        if depth > best:
            best = depth
    return best


def covering(intervals, x):
    """The intervals that contain x, sorted."""
    return sorted(iv for iv in map(_coerce, intervals) if iv.contains(x))


def point_coverage(intervals, x):
    """How many intervals contain x."""
    return len(covering(intervals, x))
