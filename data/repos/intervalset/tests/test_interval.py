import pytest

from intervalset import Interval


def test_construction_and_repr():
    iv = Interval(1, 5)
    assert iv.as_tuple() == (1, 5)
    assert repr(iv) == "Interval(1, 5)"


def test_empty_interval_rejected():
    with pytest.raises(ValueError):
        Interval(5, 4)


def test_degenerate_interval_allowed():
    iv = Interval(3, 3)
    assert iv.length == 0
    assert iv.size() == 1


def test_length_size_midpoint():
    iv = Interval(2, 7)
    assert iv.length == 5
    assert iv.size() == 6
    assert iv.midpoint() == 4.5


def test_contains_boundaries():
    iv = Interval(1.5, 3.0)
    assert iv.contains(1.5) is True
    assert iv.contains(3.0) is True
    assert iv.contains(2) is True
    assert iv.contains(1.49) is False
    assert iv.contains(3.01) is False


def test_contains_interval():
    outer = Interval(0, 10)
    assert outer.contains_interval(Interval(0, 10)) is True
    assert outer.contains_interval(Interval(2, 3)) is True
    assert outer.contains_interval(Interval(-1, 3)) is False
    assert outer.contains_interval(Interval(9, 11)) is False


def test_overlaps():
    a = Interval(0, 5)
    assert a.overlaps(Interval(5, 8)) is True
    assert a.overlaps(Interval(-3, 0)) is True
    assert a.overlaps(Interval(6, 8)) is False
    assert a.overlaps(Interval(-3, -1)) is False
    assert a.overlaps(Interval(1, 2)) is True


def test_is_adjacent():
    assert Interval(1, 3).is_adjacent(Interval(4, 6)) is True
    assert Interval(4, 6).is_adjacent(Interval(1, 3)) is True
    assert Interval(1, 3).is_adjacent(Interval(5, 6)) is False
    assert Interval(1, 3).is_adjacent(Interval(3, 6)) is False
    assert Interval(1, 3).is_adjacent(Interval(5, 6), step=2) is True


def test_intersection():
    assert Interval(0, 5).intersection(Interval(3, 9)) == Interval(3, 5)
    assert Interval(0, 5).intersection(Interval(5, 9)) == Interval(5, 5)
    assert Interval(0, 5).intersection(Interval(6, 9)) is None
    assert Interval(0, 9).intersection(Interval(2, 3)) == Interval(2, 3)


def test_hull():
    assert Interval(0, 2).hull(Interval(5, 9)) == Interval(0, 9)
    assert Interval(4, 6).hull(Interval(1, 5)) == Interval(1, 6)


def test_distance():
    assert Interval(0, 2).distance(Interval(5, 9)) == 3
    assert Interval(5, 9).distance(Interval(0, 2)) == 3
    assert Interval(0, 5).distance(Interval(5, 9)) == 0
    assert Interval(0, 5).distance(Interval(1, 2)) == 0


def test_shift_and_expand():
    assert Interval(1, 4).shift(3) == Interval(4, 7)
    assert Interval(1, 4).shift(-1) == Interval(0, 3)
    assert Interval(2, 8).expand(1) == Interval(1, 9)
    assert Interval(2, 8).expand(-3) == Interval(5, 5)
    with pytest.raises(ValueError):
        Interval(2, 8).expand(-4)


def test_clamp():
    iv = Interval(10, 20)
    assert iv.clamp(5) == 10
    assert iv.clamp(25) == 20
    assert iv.clamp(15) == 15
    assert iv.clamp(10) == 10


def test_split():
    assert Interval(0, 10).split(4) == (Interval(0, 4), Interval(4, 10))
    with pytest.raises(ValueError):
        Interval(0, 10).split(0)
    with pytest.raises(ValueError):
        Interval(0, 10).split(10)


def test_ordering_and_hash():
    assert sorted([Interval(3, 4), Interval(1, 9), Interval(1, 2)]) == [
        Interval(1, 2), Interval(1, 9), Interval(3, 4),
    ]
    assert len({Interval(1, 2), Interval(1, 2), Interval(2, 3)}) == 2
    assert Interval(1, 2) != (1, 2)


def test_equality_needs_both_ends():
    assert Interval(1, 2) == Interval(1, 2)
    assert Interval(1, 2) != Interval(1, 3)
    assert Interval(1, 2) != Interval(0, 2)
    assert not (Interval(1, 2) < Interval(1, 2))
