import math

import pytest

from geomkit import Vec, angle_between, distance, midpoint, orientation


def test_add_sub():
    assert Vec(1, 2) + Vec(3, 5) == Vec(4, 7)
    assert Vec(1, 2) - Vec(3, 5) == Vec(-2, -3)
    assert Vec(1.5, -2) * 2 == Vec(3, -4)
    assert -Vec(1, -2) == Vec(-1, 2)


def test_equality_and_hash():
    assert Vec(1, 2) == Vec(1.0, 2.0)
    assert Vec(1, 2) != Vec(2, 1)
    assert Vec(1, 2) != Vec(1, 3)
    assert (Vec(1, 2) == (1, 2)) is False
    assert len({Vec(1, 2), Vec(1, 2), Vec(2, 1)}) == 2


def test_rounded():
    assert Vec(0.1 + 0.2, -1e-12).rounded() == Vec(0.3, 0)
    assert Vec(1.23456, 2.5).rounded(2) == Vec(1.23, 2.5)


def test_dot_and_cross():
    assert Vec(1, 2).dot(Vec(3, 4)) == 11
    assert Vec(1, 2).cross(Vec(3, 4)) == -2
    assert Vec(3, 4).cross(Vec(1, 2)) == 2


def test_length():
    assert Vec(3, 4).length() == 5.0
    assert Vec(3, 4).length_squared() == 25


def test_normalized():
    assert Vec(0, 5).normalized() == Vec(0, 1)
    assert Vec(3, 4).normalized() == Vec(0.6, 0.8)


def test_normalized_zero_raises():
    with pytest.raises(ValueError):
        Vec(0, 0).normalized()


def test_perpendicular():
    assert Vec(2, 1).perpendicular() == Vec(-1, 2)


def test_rotated_quarter_turn():
    assert Vec(1, 0).rotated(math.pi / 2).rounded() == Vec(0, 1)
    assert Vec(1, 2).rotated(math.pi / 2).rounded() == Vec(-2, 1)
    assert Vec(1, 2).rotated(math.pi).rounded() == Vec(-1, -2)


def test_distance_and_midpoint():
    assert distance(Vec(1, 1), Vec(4, 5)) == 5.0
    assert midpoint(Vec(0, 0), Vec(3, -4)) == Vec(1.5, -2)


def test_angle_between():
    assert angle_between(Vec(1, 0), Vec(0, 1)) == pytest.approx(math.pi / 2)
    assert angle_between(Vec(0, 1), Vec(1, 0)) == pytest.approx(-math.pi / 2)
    assert angle_between(Vec(1, 0), Vec(-1, 0)) == pytest.approx(math.pi)


def test_orientation():
    assert orientation(Vec(0, 0), Vec(1, 0), Vec(1, 1)) == 1
    assert orientation(Vec(0, 0), Vec(1, 0), Vec(1, -1)) == -1
    assert orientation(Vec(0, 0), Vec(1, 1), Vec(3, 3)) == 0
