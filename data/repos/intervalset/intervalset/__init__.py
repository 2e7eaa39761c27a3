"""intervalset: closed-interval arithmetic on integers and floats."""

from .interval import Interval
from .ops import merge, gaps, total_length, max_overlap, covering, point_coverage
from .intervalset import IntervalSet

__all__ = [
    "Interval", "IntervalSet",
    "merge", "gaps", "total_length", "max_overlap", "covering", "point_coverage",
]
