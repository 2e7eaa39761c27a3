import pytest

from geomkit import (
    Vec,
    closest_point,
    distance_to_segment,
    intersection_point,
    on_segment,
    project_parameter,
    segment_length,
    segments_intersect,
    split_segment,
)

A, B = Vec(0, 0), Vec(4, 4)


def test_on_segment_interior_and_endpoints():
    assert on_segment(Vec(2, 2), A, B) is True
    assert on_segment(Vec(0, 0), A, B) is True
    assert on_segment(Vec(4, 4), A, B) is True


def test_on_segment_outside():
    assert on_segment(Vec(5, 5), A, B) is False
    assert on_segment(Vec(2, 3), A, B) is False
    assert on_segment(Vec(-1, -1), A, B) is False
    assert on_segment(Vec(1, 5), Vec(1, 0), Vec(1, 2)) is False


def test_segments_cross():
    assert segments_intersect(A, B, Vec(0, 4), Vec(4, 0)) is True


def test_segments_parallel_disjoint():
    assert segments_intersect(A, B, Vec(1, 0), Vec(5, 4)) is False


def test_segments_touch_at_endpoint():
    assert segments_intersect(A, B, Vec(4, 4), Vec(6, 0)) is True


def test_segments_t_junction():
    assert segments_intersect(Vec(0, 0), Vec(4, 0), Vec(2, 0), Vec(2, 3)) is True


def test_segments_collinear_overlap_and_gap():
    assert segments_intersect(Vec(0, 0), Vec(3, 0), Vec(2, 0), Vec(5, 0)) is True
    assert segments_intersect(Vec(0, 0), Vec(1, 0), Vec(2, 0), Vec(5, 0)) is False
    assert segments_intersect(Vec(1, 0), Vec(1, 2), Vec(1, 2), Vec(1, 5)) is True
    assert segments_intersect(Vec(1, 0), Vec(1, 2), Vec(1, 3), Vec(1, 5)) is False


def test_segments_would_cross_if_extended():
    assert segments_intersect(Vec(0, 0), Vec(1, 1), Vec(0, 4), Vec(1, 3)) is False
    assert segments_intersect(Vec(0, 0), Vec(4, 0), Vec(5, 0), Vec(3, 2)) is False
    assert segments_intersect(Vec(5, 0), Vec(3, 2), Vec(0, 0), Vec(4, 0)) is False


def test_intersection_point():
    assert intersection_point(A, B, Vec(0, 4), Vec(4, 0)) == Vec(2, 2)
    assert intersection_point(Vec(1, 1), Vec(5, 5), Vec(1, 5), Vec(5, 1)) == Vec(3, 3)
    assert intersection_point(Vec(2, 0), Vec(2, 4), Vec(0, 1), Vec(4, 3)) == Vec(2, 2)
    assert intersection_point(Vec(0, 0), Vec(2, 0), Vec(1, -1), Vec(1, 3)) == Vec(1, 0)


def test_intersection_point_at_endpoint():
    assert intersection_point(Vec(0, 0), Vec(2, 0), Vec(2, 0), Vec(2, 5)) == Vec(2, 0)
    assert intersection_point(Vec(0, 0), Vec(2, 0), Vec(0, -3), Vec(0, 0)) == Vec(0, 0)


def test_intersection_point_none():
    assert intersection_point(A, B, Vec(1, 0), Vec(5, 4)) is None
    assert intersection_point(Vec(0, 0), Vec(1, 0), Vec(2, -1), Vec(2, 1)) is None
    assert intersection_point(Vec(2, -1), Vec(2, 1), Vec(0, 0), Vec(1, 0)) is None
    assert intersection_point(Vec(0, 0), Vec(2, 0), Vec(1, 1), Vec(1, 3)) is None


def test_project_parameter():
    assert project_parameter(Vec(2, 5), Vec(0, 0), Vec(4, 0)) == 0.5
    assert project_parameter(Vec(-2, 1), Vec(0, 0), Vec(4, 0)) == -0.5
    assert project_parameter(Vec(3, 3), Vec(1, 1), Vec(1, 1)) == 0.0
    assert project_parameter(Vec(3, 7), Vec(1, 1), Vec(5, 1)) == 0.5


def test_closest_point_clamps():
    assert closest_point(Vec(2, 5), Vec(0, 0), Vec(4, 0)) == Vec(2, 0)
    assert closest_point(Vec(-3, 1), Vec(0, 0), Vec(4, 0)) == Vec(0, 0)
    assert closest_point(Vec(9, 1), Vec(0, 0), Vec(4, 0)) == Vec(4, 0)
    assert closest_point(Vec(2, 9), Vec(1, 1), Vec(5, 1)) == Vec(2, 1)


def test_distance_to_segment():
    assert distance_to_segment(Vec(2, 3), Vec(0, 0), Vec(4, 0)) == 3.0
    assert distance_to_segment(Vec(7, 4), Vec(0, 0), Vec(4, 0)) == 5.0


def test_segment_length():
    assert segment_length(Vec(1, 1), Vec(4, 5)) == 5.0


def test_split_segment():
    assert split_segment(Vec(0, 0), Vec(4, 2), 2) == [Vec(0, 0), Vec(2, 1), Vec(4, 2)]
    assert split_segment(Vec(0, 0), Vec(1, 0), 1) == [Vec(0, 0), Vec(1, 0)]
    assert split_segment(Vec(1, 1), Vec(3, 5), 2) == [Vec(1, 1), Vec(2, 3), Vec(3, 5)]


def test_split_segment_invalid():
    with pytest.raises(ValueError):
        split_segment(Vec(0, 0), Vec(1, 0), 0)
