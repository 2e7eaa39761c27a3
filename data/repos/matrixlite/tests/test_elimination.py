from fractions import Fraction

import pytest

from matrixlite import (
    Matrix, MatrixError, SingularMatrixError, row_echelon, rref, rank,
    determinant, cofactor_determinant, inverse, solve,
)

C = Matrix([[2, 1, 1], [1, 3, 2], [1, 0, 0]])
M4 = Matrix([[1, 0, 2, -1], [3, 0, 0, 5], [2, 1, 4, -3], [1, 0, 5, 0]])


def test_row_echelon():
    assert row_echelon(Matrix([[1, 2], [3, 4]])).tolist() == [[1, 2], [0, -2]]


def test_row_echelon_swaps_zero_pivot():
    assert row_echelon(Matrix([[0, 1], [2, 3]])).tolist() == [[2, 3], [0, 1]]


def test_rref_rectangular():
    assert rref(Matrix([[1, 2, 3], [4, 5, 6]])).tolist() == [[1, 0, -1], [0, 1, 2]]


def test_rref_single_row():
    assert rref(Matrix([[2, 4]])).tolist() == [[1, 2]]


def test_rref_with_zero_column():
    assert rref(Matrix([[0, 2, 4], [0, 1, 3]])).tolist() == [[0, 1, 0], [0, 0, 1]]


def test_rank():
    assert rank(Matrix([[1, 2, 3], [2, 4, 6], [1, 0, 1]])) == 2
    assert rank(Matrix.identity(3)) == 3
    assert rank(Matrix.zeros(2, 2)) == 0
    assert rank(Matrix([[1, 2, 3], [4, 5, 6]])) == 2
    assert rank(Matrix([[1], [2], [3]])) == 1


def test_determinant_small():
    assert determinant(Matrix([[5]])) == 5
    assert determinant(Matrix([[1, 2], [3, 4]])) == -2
    assert determinant(Matrix.identity(4)) == 1


def test_determinant_with_row_swaps():
    assert determinant(Matrix([[0, 1], [1, 0]])) == -1
    assert determinant(Matrix([[0, 2, 1], [1, 1, 0], [2, 0, 3]])) == -8
    assert determinant(Matrix([[0, 0, 1], [1, 0, 0], [0, 1, 0]])) == 1


def test_determinant_3x3_and_4x4():
    assert determinant(C) == -1
    assert determinant(M4) == 30


def test_determinant_singular_is_zero():
    assert determinant(Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 1]])) == 0
    assert determinant(Matrix([[1, 2], [2, 4]])) == 0


def test_determinant_fractional_entries():
    assert determinant(Matrix([[Fraction(1, 2), 1], [1, 4]])) == 1
    assert determinant(Matrix([[0.5, 0.25], [2, 3]])) == 1


def test_determinant_non_square():
    with pytest.raises(MatrixError):
        determinant(Matrix([[1, 2, 3], [4, 5, 6]]))


def test_cofactor_determinant_agrees():
    assert cofactor_determinant(Matrix([[4]])) == 4
    assert cofactor_determinant(Matrix([[1, 2], [3, 4]])) == -2
    assert cofactor_determinant(C) == -1
    assert cofactor_determinant(M4) == 30
    with pytest.raises(MatrixError):
        cofactor_determinant(Matrix([[1, 2]]))


def test_inverse_2x2():
    inv = inverse(Matrix([[1, 2], [3, 4]]))
    assert inv.tolist() == [[-2, 1], [Fraction(3, 2), Fraction(-1, 2)]]


def test_inverse_3x3():
    inv = inverse(C)
    assert inv.tolist() == [[0, 0, 1], [-2, 1, 3], [3, -1, -5]]
    assert C @ inv == Matrix.identity(3)


def test_inverse_needs_pivot_swap():
    assert inverse(Matrix([[0, 1], [1, 0]])).tolist() == [[0, 1], [1, 0]]


def test_inverse_singular():
    with pytest.raises(SingularMatrixError):
        inverse(Matrix([[1, 2], [2, 4]]))
    with pytest.raises(MatrixError):
        inverse(Matrix([[1, 2, 3]]))


def test_solve_2x2():
    assert solve(Matrix([[2, 1], [1, -1]]), [5, 1]) == [2, 1]


def test_solve_3x3():
    a = Matrix([[1, 1, 1], [0, 2, 5], [2, 5, -1]])
    assert solve(a, [6, -4, 27]) == [5, 3, -2]


def test_solve_fractional_solution():
    assert solve(Matrix([[2, 0], [0, 4]]), [1, 1]) == [Fraction(1, 2), Fraction(1, 4)]


def test_solve_errors():
    with pytest.raises(SingularMatrixError):
        solve(Matrix([[1, 2], [2, 4]]), [3, 6])
    with pytest.raises(MatrixError):
        solve(Matrix([[1, 0], [0, 1]]), [1, 2, 3])
    with pytest.raises(MatrixError):
        solve(Matrix([[1, 0, 0], [0, 1, 0]]), [1, 2])
