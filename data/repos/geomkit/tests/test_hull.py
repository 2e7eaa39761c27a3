import pytest

from geomkit import Vec, convex_hull, diameter, extreme_point, hull_area, hull_perimeter

CLOUD = [(0, 0), (2, 0), (1, 1), (2, 2), (0, 2), (1, 0), (0.5, 1.5)]


def test_hull_square_with_interior_and_collinear_points():
    assert convex_hull(CLOUD) == [Vec(0, 0), Vec(2, 0), Vec(2, 2), Vec(0, 2)]


def test_hull_triangle_order():
    assert convex_hull([(3, 0), (0, 0), (0, 3)]) == [Vec(0, 0), Vec(3, 0), Vec(0, 3)]
    assert convex_hull([(1, 0), (0, 1), (0, 0)]) == [Vec(0, 0), Vec(1, 0), Vec(0, 1)]


def test_hull_octagon():
    ring = [(0, 1), (1, 0), (2, 0), (3, 1), (3, 2), (2, 3), (1, 3), (0, 2)]
    inner = [(1, 1), (2, 2), (1.5, 1.5), (2, 1)]
    assert convex_hull(inner + list(reversed(ring))) == [Vec(*p) for p in ring]
    assert hull_area(ring + inner) == 7.0


def test_hull_duplicates_removed():
    assert convex_hull([(1, 1), (1, 1), (0, 0)]) == [Vec(0, 0), Vec(1, 1)]


def test_hull_small_inputs():
    assert convex_hull([]) == []
    assert convex_hull([(5, 5)]) == [Vec(5, 5)]


def test_hull_collinear_points():
    assert convex_hull([(0, 0), (1, 1), (2, 2), (3, 3)]) == [Vec(0, 0), Vec(3, 3)]


def test_hull_area_and_perimeter():
    assert hull_area(CLOUD) == 4.0
    assert hull_perimeter(CLOUD) == 8.0


def test_hull_perimeter_of_segment():
    assert hull_perimeter([(0, 0), (3, 4)]) == 10.0


def test_diameter():
    assert diameter([(0, 0), (3, 0), (3, 4), (1, 1)]) == 5.0
    assert diameter([(2, 2)]) == 0.0
    assert diameter([(0, 0), (10, 0), (5, 1)]) == 10.0


def test_extreme_point():
    pts = [(0, 0), (3, 1), (1, 4)]
    assert extreme_point(pts, (1, 0)) == Vec(3, 1)
    assert extreme_point(pts, Vec(0, 1)) == Vec(1, 4)
    assert extreme_point(pts, (-1, -1)) == Vec(0, 0)


def test_extreme_point_tie_keeps_first():
    assert extreme_point([(1, 0), (1, 5)], (1, 0)) == Vec(1, 0)


def test_extreme_point_empty():
    with pytest.raises(ValueError):
        extreme_point([], (1, 0))
