import math

import pytest

from gridpath import manhattan, chebyshev, euclidean, octile, zero, get_heuristic


def test_manhattan():
    assert manhattan((0, 0), (3, 4)) == 7
    assert manhattan((5, 2), (1, 6)) == 8


def test_chebyshev():
    assert chebyshev((0, 0), (3, 4)) == 4
    assert chebyshev((5, 2), (1, 3)) == 4


def test_euclidean():
    assert euclidean((0, 0), (3, 4)) == 5.0
    assert math.isclose(euclidean((1, 1), (2, 2)), math.sqrt(2))
    assert euclidean((1, 2), (4, 6)) == 5.0


def test_octile_default_cost():
    assert octile((0, 0), (3, 4)) == 5.5
    assert octile((0, 0), (0, 4)) == 4
    assert octile((1, 2), (4, 6)) == 5.5


def test_octile_custom_cost():
    assert octile((0, 0), (3, 4), diagonal_cost=2) == 7


def test_zero_and_same_point():
    assert zero((0, 0), (9, 9)) == 0
    assert manhattan((2, 2), (2, 2)) == 0
    assert octile((2, 2), (2, 2)) == 0


def test_get_heuristic():
    assert get_heuristic("manhattan") is manhattan
    assert get_heuristic("octile") is octile
    with pytest.raises(ValueError):
        get_heuristic("taxicab")
