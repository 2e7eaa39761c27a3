import pytest

from geomkit import (
    BOUNDARY,
    INSIDE,
    OUTSIDE,
    Vec,
    area,
    bounding_box,
    centroid,
    contains,
    is_convex,
    is_counter_clockwise,
    locate_point,
    perimeter,
    signed_area,
)

SQUARE = [(0, 0), (2, 0), (2, 2), (0, 2)]
L_SHAPE = [(0, 0), (4, 0), (4, 1), (1, 1), (1, 3), (0, 3)]


def test_signed_area_orientation():
    assert signed_area(SQUARE) == 4.0
    assert signed_area(list(reversed(SQUARE))) == -4.0


def test_area_triangle():
    assert area([(0, 0), (4, 0), (0, 3)]) == 6.0
    assert area(L_SHAPE) == 6.0


def test_area_degenerate():
    assert area([]) == 0.0
    assert area([(0, 0), (1, 1)]) == 0.0


def test_is_counter_clockwise():
    assert is_counter_clockwise(SQUARE) is True
    assert is_counter_clockwise(list(reversed(SQUARE))) is False
    assert is_counter_clockwise([(0, 0), (1, 0), (0, 1)]) is True
    assert is_counter_clockwise([(0, 0), (1, 1), (2, 2)]) is False


def test_perimeter():
    assert perimeter(SQUARE) == 8.0
    assert perimeter([(0, 0), (3, 0), (0, 4)]) == 12.0
    assert perimeter([(1, 1)]) == 0.0


def test_centroid_square():
    assert centroid(SQUARE).rounded() == Vec(1, 1)


def test_centroid_triangle_and_clockwise():
    assert centroid([(0, 0), (6, 0), (0, 3)]).rounded() == Vec(2, 1)
    assert centroid([(0, 3), (6, 0), (0, 0)]).rounded() == Vec(2, 1)


def test_centroid_l_shape():
    assert centroid(L_SHAPE).rounded() == Vec(1.5, 1.0)


def test_centroid_degenerate_raises():
    with pytest.raises(ValueError):
        centroid([(0, 0), (1, 1), (2, 2)])


def test_bounding_box():
    assert bounding_box(L_SHAPE) == (Vec(0, 0), Vec(4, 3))
    assert bounding_box([(1, 2), (5, -1), (3, 4)]) == (Vec(1, -1), Vec(5, 4))
    with pytest.raises(ValueError):
        bounding_box([])


def test_is_convex():
    assert is_convex(SQUARE) is True
    assert is_convex(list(reversed(SQUARE))) is True
    assert is_convex(L_SHAPE) is False
    assert is_convex([(0, 0), (1, 0), (0, 1)]) is True
    assert is_convex([(0, 0), (2, 0), (3, 2), (1, 3), (-1, 2)]) is True


def test_is_convex_concave_quad():
    assert is_convex([(0, 0), (2, 1), (4, 0), (2, 4)]) is False
    assert is_convex([(2, 1), (4, 0), (2, 4), (0, 0)]) is False


def test_is_convex_with_collinear_vertex():
    assert is_convex([(0, 0), (1, 0), (2, 0), (2, 2), (0, 2)]) is True
    assert is_convex([(0, 0), (2, 0), (2, 2), (1, 2), (0, 2)]) is True


def test_is_convex_degenerate():
    assert is_convex([]) is False
    assert is_convex([(0, 0), (1, 1)]) is False
    assert is_convex([(0, 0), (1, 1), (2, 2)]) is False


@pytest.mark.parametrize(
    "point, expected",
    [((1, 1), INSIDE), ((3, 1), OUTSIDE), ((2, 1), BOUNDARY), ((0, 0), BOUNDARY),
     ((1, 2), BOUNDARY), ((-1, 1), OUTSIDE), ((1, -0.5), OUTSIDE)],
)
def test_locate_point_square(point, expected):
    assert locate_point(point, SQUARE) == expected


def test_locate_point_concave():
    assert locate_point((2, 2), L_SHAPE) == OUTSIDE
    assert locate_point((0.5, 2), L_SHAPE) == INSIDE
    assert locate_point((3, 0.5), L_SHAPE) == INSIDE


def test_locate_point_ray_through_vertex():
    diamond = [(0, -2), (2, 0), (0, 2), (-2, 0)]
    assert locate_point((-1, 0), diamond) == INSIDE
    assert locate_point((-3, 0), diamond) == OUTSIDE


def test_contains_boundary_flag():
    assert contains(SQUARE, (2, 1)) is True
    assert contains(SQUARE, (2, 1), include_boundary=False) is False
    assert contains(SQUARE, (1, 1), include_boundary=False) is True
