from intervalset import Interval, merge, gaps, total_length, max_overlap, covering, point_coverage


def test_merge_overlapping_and_touching():
    assert merge([(5, 8), (1, 3), (2, 4), (8, 9)]) == [Interval(1, 4), Interval(5, 9)]


def test_merge_keeps_disjoint_sorted():
    assert merge([(10, 12), (1, 2), (4, 5)]) == [Interval(1, 2), Interval(4, 5), Interval(10, 12)]


def test_merge_nested():
    assert merge([(1, 10), (2, 3), (4, 12)]) == [Interval(1, 12)]


def test_merge_discrete_adjacent():
    assert merge([(1, 3), (4, 6), (8, 9)], discrete=True) == [Interval(1, 6), Interval(8, 9)]
    assert merge([(1, 3), (4, 6)]) == [Interval(1, 3), Interval(4, 6)]


def test_merge_empty():
    assert merge([]) == []


def test_gaps_continuous():
    assert gaps([(0, 2), (5, 6), (6, 8), (10, 11)]) == [Interval(2, 5), Interval(8, 10)]


def test_gaps_discrete():
    assert gaps([(0, 2), (5, 6), (8, 8)], discrete=True) == [Interval(3, 4), Interval(7, 7)]
    assert gaps([(0, 2), (3, 6)], discrete=True) == []


def test_gaps_single_or_none():
    assert gaps([(0, 5)]) == []
    assert gaps([]) == []


def test_total_length():
    assert total_length([(0, 2), (1, 4), (10, 11)]) == 5
    assert total_length([(0.5, 1.0)]) == 0.5
    assert total_length([]) == 0


def test_max_overlap():
    assert max_overlap([(1, 5), (2, 6), (4, 8), (7, 9)]) == 3
    assert max_overlap([(1, 2), (3, 4)]) == 1
    assert max_overlap([(1, 2), (3, 4), (3, 5)]) == 2
    assert max_overlap([]) == 0


def test_max_overlap_touching_counts():
    assert max_overlap([(1, 3), (3, 5)]) == 2
    assert max_overlap([(1, 3), (3, 5), (3, 3)]) == 3


def test_covering_and_point_coverage():
    ivs = [(0, 10), (5, 6), (6, 9), (11, 12)]
    assert covering(ivs, 6) == [Interval(0, 10), Interval(5, 6), Interval(6, 9)]
    assert point_coverage(ivs, 6) == 3
    assert point_coverage(ivs, 10) == 1
    assert point_coverage(ivs, 10.5) == 0
