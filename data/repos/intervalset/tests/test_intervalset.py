import pytest

from intervalset import Interval, IntervalSet


def S(*pairs, discrete=False):
    return IntervalSet.from_pairs(pairs, discrete=discrete)


def test_normalizes_on_construction():
    assert S((5, 7), (1, 3), (2, 4)).pairs() == [(1, 4), (5, 7)]
    assert len(S((5, 7), (1, 3), (2, 4))) == 2


def test_discrete_merges_neighbours():
    assert S((1, 3), (4, 6), discrete=True).pairs() == [(1, 6)]


def test_from_pairs_defaults_to_continuous():
    s = IntervalSet.from_pairs([(1, 3), (4, 6)])
    assert s.discrete is False
    assert s.pairs() == [(1, 3), (4, 6)]


def test_empty_set():
    empty = IntervalSet()
    assert not empty
    assert empty.pairs() == []
    assert empty.bounds() is None
    assert empty.largest() is None
    assert empty.measure() == 0


def test_intervals_property():
    assert S((4, 5), (1, 3)).intervals == (Interval(1, 3), Interval(4, 5))


def test_equality_and_repr():
    assert S((1, 2), (2, 3)) == S((1, 3))
    assert S((1, 2)) != [(1, 2)]
    assert S((1, 3)) != S((1, 3), discrete=True)
    assert repr(S((1, 3))) == "IntervalSet([(1, 3)], discrete=False)"


def test_add_returns_new_set():
    base = S((1, 3))
    bigger = base.add((2, 8))
    assert base.pairs() == [(1, 3)]
    assert bigger.pairs() == [(1, 8)]
    assert base.add(Interval(10, 11)).pairs() == [(1, 3), (10, 11)]


def test_union():
    assert S((1, 3), (10, 12)).union(S((2, 5), (7, 8))).pairs() == [(1, 5), (7, 8), (10, 12)]


def test_mixed_modes_rejected():
    with pytest.raises(ValueError):
        S((1, 3)).union(S((1, 3), discrete=True))
    with pytest.raises(ValueError):
        S((1, 3)).intersection(S((1, 3), discrete=True))
    with pytest.raises(ValueError):
        S((1, 3), discrete=True).difference(S((1, 3)))


def test_intersection():
    a = S((0, 5), (10, 15))
    b = S((3, 12), (14, 20))
    assert a.intersection(b).pairs() == [(3, 5), (10, 12), (14, 15)]


def test_intersection_touching_and_disjoint():
    assert S((0, 5)).intersection(S((5, 9))).pairs() == [(5, 5)]
    assert S((0, 4)).intersection(S((5, 9))).pairs() == []
    assert S((0, 4)).intersection(IntervalSet()).pairs() == []


def test_intersection_one_spanning_many():
    assert S((0, 100)).intersection(S((1, 2), (5, 6), (99, 120))).pairs() == [(1, 2), (5, 6), (99, 100)]


def test_difference_continuous():
    assert S((0, 10)).difference(S((3, 5))).pairs() == [(0, 3), (5, 10)]
    assert S((0, 10)).difference(S((0, 4))).pairs() == [(4, 10)]
    assert S((0, 10)).difference(S((8, 12))).pairs() == [(0, 8)]


def test_difference_discrete():
    a = S((0, 10), discrete=True)
    assert a.difference(S((3, 5), discrete=True)).pairs() == [(0, 2), (6, 10)]
    assert a.difference(S((0, 0), (10, 10), discrete=True)).pairs() == [(1, 9)]


def test_difference_removes_everything():
    assert S((2, 4)).difference(S((0, 10))).pairs() == []
    assert S((2, 4)).difference(S((2, 4))).pairs() == []


def test_difference_multiple_cuts():
    result = S((0, 20), discrete=True).difference(S((2, 3), (7, 9), (15, 30), discrete=True))
    assert result.pairs() == [(0, 1), (4, 6), (10, 14)]


def test_difference_untouched_pieces():
    assert S((0, 2), (8, 9)).difference(S((4, 5))).pairs() == [(0, 2), (8, 9)]


def test_symmetric_difference():
    a = S((0, 5), discrete=True)
    b = S((3, 8), discrete=True)
    assert a.symmetric_difference(b).pairs() == [(0, 2), (6, 8)]


def test_complement():
    assert S((2, 3), (6, 7), discrete=True).complement(0, 9).pairs() == [(0, 1), (4, 5), (8, 9)]
    assert S((2, 3)).complement(0, 5).pairs() == [(0, 2), (3, 5)]
    assert IntervalSet().complement(0, 5).pairs() == [(0, 5)]


def test_gaps_method():
    assert S((0, 1), (4, 5), (9, 9), discrete=True).gaps() == [Interval(2, 3), Interval(6, 8)]
    assert S((0, 1), (4, 5)).gaps() == [Interval(1, 4)]


def test_contains_point():
    s = S((0, 2), (5, 7))
    assert s.contains(0) is True
    assert s.contains(7) is True
    assert s.contains(3) is False
    assert s.contains(7.5) is False


def test_contains_interval():
    s = S((0, 2), (5, 7))
    assert s.contains_interval((5, 7)) is True
    assert s.contains_interval((1, 2)) is True
    assert s.contains_interval((1, 6)) is False


def test_measure():
    assert S((0, 2), (5, 7.5)).measure() == 4.5
    assert S((0, 2), (5, 7), discrete=True).measure() == 6
    assert S((4, 4), discrete=True).measure() == 1


def test_bounds_and_largest():
    s = S((3, 4), (6, 9), (12, 15))
    assert s.bounds() == Interval(3, 15)
    assert s.largest() == Interval(6, 9)


def test_largest_tie_keeps_first():
    assert S((0, 2), (5, 7)).largest() == Interval(0, 2)


def test_nearest():
    s = S((0, 2), (6, 8))
    assert s.nearest(1) == 1
    assert s.nearest(3) == 2
    assert s.nearest(5) == 6
    assert s.nearest(4) == 2
    assert s.nearest(100) == 8
    with pytest.raises(ValueError, match="empty set"):
        IntervalSet().nearest(1)


def test_iteration():
    assert [iv.lo for iv in S((5, 6), (1, 2))] == [1, 5]
