import pytest

from matrixlite import Matrix, MatrixError

A = Matrix([[1, 2], [3, 4]])
B = Matrix([[5, 6], [7, 8]])


def test_shape_properties():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    assert m.n_rows == 2
    assert m.n_cols == 3
    assert m.shape == (2, 3)
    assert m.is_square() is False
    assert A.is_square() is True


def test_invalid_construction():
    with pytest.raises(MatrixError):
        Matrix([])
    with pytest.raises(MatrixError):
        Matrix([[]])
    with pytest.raises(MatrixError):
        Matrix([[1, 2], [3]])


def test_indexing_rows_cols():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    assert m[1, 2] == 6
    assert m[0, 0] == 1
    assert m.row(1) == [4, 5, 6]
    assert m.col(2) == [3, 6]
    assert m.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_constructors():
    assert Matrix.zeros(2, 3).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert Matrix.identity(3).tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert Matrix.column([1, 2, 3]).shape == (3, 1)


def test_add_and_sub():
    assert (A + B).tolist() == [[6, 8], [10, 12]]
    assert (B - A).tolist() == [[4, 4], [4, 4]]
    assert (A - B).tolist() == [[-4, -4], [-4, -4]]


def test_add_shape_mismatch():
    with pytest.raises(MatrixError):
        A + Matrix([[1, 2, 3]])
    with pytest.raises(MatrixError):
        A - Matrix([[1], [2]])


def test_scalar_multiplication():
    assert (A * 3).tolist() == [[3, 6], [9, 12]]
    assert (2 * A).tolist() == [[2, 4], [6, 8]]
    assert (-A).tolist() == [[-1, -2], [-3, -4]]


def test_matmul_square():
    assert (A @ B).tolist() == [[19, 22], [43, 50]]
    assert (B @ A).tolist() == [[23, 34], [31, 46]]


def test_matmul_rectangular():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    n = Matrix([[7, 8], [9, 10], [11, 12]])
    assert (m @ n).tolist() == [[58, 64], [139, 154]]
    assert (n @ m).shape == (3, 3)


def test_matmul_vector_and_identity():
    assert (A @ Matrix.column([1, 1])).tolist() == [[3], [7]]
    assert A @ Matrix.identity(2) == A


def test_matmul_mismatch():
    with pytest.raises(MatrixError):
        A @ Matrix([[1, 2, 3]])


def test_transpose():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    assert m.transpose().tolist() == [[1, 4], [2, 5], [3, 6]]
    assert m.transpose().transpose() == m


def test_trace():
    assert A.trace() == 5
    assert Matrix([[7]]).trace() == 7
    with pytest.raises(MatrixError):
        Matrix([[1, 2, 3]]).trace()


def test_map_and_submatrix():
    m = Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert m.map(lambda x: x % 2).tolist() == [[1, 0, 1], [0, 1, 0], [1, 0, 1]]
    assert m.submatrix(0, 0).tolist() == [[5, 6], [8, 9]]
    assert m.submatrix(1, 2).tolist() == [[1, 2], [7, 8]]


def test_equality_hash_repr():
    assert Matrix([[1, 2], [3, 4]]) == A
    assert A != B
    assert A != [[1, 2], [3, 4]]
    assert len({A, Matrix([[1, 2], [3, 4]])}) == 1
    assert repr(A) == "Matrix([[1, 2], [3, 4]])"
