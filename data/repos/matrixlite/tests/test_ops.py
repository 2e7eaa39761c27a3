import pytest

from matrixlite import (
    Matrix, MatrixError, power, is_symmetric, is_diagonal, is_upper_triangular,
    hadamard, dot, outer, frobenius_squared, kronecker,
)

FIB = Matrix([[1, 1], [1, 0]])


def test_power_fibonacci():
    assert power(FIB, 10).tolist() == [[89, 55], [55, 34]]
    assert power(FIB, 5).tolist() == [[8, 5], [5, 3]]


def test_power_small_exponents():
    assert power(FIB, 0) == Matrix.identity(2)
    assert power(FIB, 1) == FIB
    assert power(FIB, 2).tolist() == [[2, 1], [1, 1]]


def test_power_errors():
    with pytest.raises(MatrixError):
        power(FIB, -1)
    with pytest.raises(MatrixError, match="square"):
        power(Matrix([[1, 2]]), 2)


def test_is_symmetric():
    assert is_symmetric(Matrix([[1, 7], [7, 2]])) is True
    assert is_symmetric(Matrix([[1, 7], [6, 2]])) is False
    assert is_symmetric(Matrix([[1, 2]])) is False


def test_is_diagonal():
    assert is_diagonal(Matrix([[3, 0], [0, 5]])) is True
    assert is_diagonal(Matrix([[3, 0], [1, 5]])) is False
    assert is_diagonal(Matrix([[3, 1], [0, 5]])) is False


def test_is_upper_triangular():
    assert is_upper_triangular(Matrix([[1, 2, 3], [0, 4, 5], [0, 0, 6]])) is True
    assert is_upper_triangular(Matrix([[1, 2, 3], [0, 4, 5], [0, 1, 6]])) is False
    assert is_upper_triangular(Matrix([[1, 2], [3, 4]])) is False
    assert is_upper_triangular(Matrix([[1, 2, 3], [0, 4, 5]])) is True


def test_hadamard():
    a = Matrix([[1, 2], [3, 4]])
    assert hadamard(a, a).tolist() == [[1, 4], [9, 16]]
    with pytest.raises(MatrixError):
        hadamard(a, Matrix([[1, 2]]))


def test_dot():
    assert dot([1, 2, 3], [4, 5, 6]) == 32
    assert dot([], []) == 0
    with pytest.raises(MatrixError):
        dot([1, 2], [1])


def test_outer():
    assert outer([1, 2], [3, 4, 5]).tolist() == [[3, 4, 5], [6, 8, 10]]


def test_frobenius_squared():
    assert frobenius_squared(Matrix([[1, -2], [3, 0]])) == 14


def test_kronecker():
    a = Matrix([[1, 2], [3, 4]])
    assert kronecker(Matrix.identity(2), a).tolist() == [
        [1, 2, 0, 0], [3, 4, 0, 0], [0, 0, 1, 2], [0, 0, 3, 4],
    ]
    assert kronecker(Matrix([[1, 2]]), Matrix([[1], [10]])).tolist() == [[1, 2], [10, 20]]
