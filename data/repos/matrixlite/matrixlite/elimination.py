"""Exact Gaussian elimination: echelon forms, rank, determinant, inverse, solve."""

from fractions import Fraction

from .matrix import Matrix, MatrixError


class SingularMatrixError(MatrixError):
    """Raised when a matrix has no inverse or a system has no unique solution."""


def _fraction_rows(matrix):
    return [[Fraction(x) for x in row] for row in matrix.rows]


def _pivot_row(rows, col, start):
    """Index of the first row at or below start with a non-zero entry in col."""
    for r in range(start, len(rows)):
        if rows[r][col] != 0:
            return r
    return None


def _echelon(rows):
    """Reduce rows in place to row echelon form; return the number of swaps."""
    swaps = 0
    pivot_row = 0
    n_rows, n_cols = len(rows), len(rows[0])
    for col in range(n_cols):
        if pivot_row >= n_rows:
            break
        found = _pivot_row(rows, col, pivot_row)
        if found is None:
            continue
        if found != pivot_row:
            rows[pivot_row], rows[found] = rows[found], rows[pivot_row]
            swaps += 1
        pivot = rows[pivot_row][col]
        for r in range(pivot_row + 1, n_rows):
            factor = rows[r][col] / pivot
            if factor != 0:
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[pivot_row])]
        pivot_row += 1
    return swaps


def row_echelon(matrix):
    """Row echelon form with Fraction entries."""
    rows = _fraction_rows(matrix)
    _echelon(rows)
    return Matrix(rows)


def rref(matrix):
    """Reduced row echelon form with Fraction entries."""
    rows = _fraction_rows(matrix)
    n_rows, n_cols = len(rows), len(rows[0])
    pivot_row = 0
    for col in range(n_cols):
        if pivot_row >= n_rows:
            break
        found = _pivot_row(rows, col, pivot_row)
        if found is None:
            continue
        rows[pivot_row], rows[found] = rows[found], rows[pivot_row]
        pivot = rows[pivot_row][col]
        rows[pivot_row] = [x / pivot for x in rows[pivot_row]]
        for r in range(n_rows):
            if r != pivot_row and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[pivot_row])]
        pivot_row += 1
    return Matrix(rows)


def rank(matrix):
    """Number of linearly independent rows."""
    rows = _fraction_rows(matrix)
    _echelon(rows)
    return sum(1 for row in rows if any(x != 0 for x in row))


def determinant(matrix):
    """Determinant of a square matrix as a Fraction."""
    if not matrix.is_square():
        raise MatrixError("determinant needs a square matrix")
    rows = _fraction_rows(matrix)
    swaps = _echelon(rows)
    result = Fraction(-1) if swaps % 2 else Fraction(1)
    for i in range(len(rows)):
        result *= rows[i][i]
    return result


def cofactor_determinant(matrix):
    """Determinant by cofactor expansion along the first row (for small matrices)."""
    if not matrix.is_square():
        raise MatrixError("determinant needs a square matrix")
    n = matrix.n_rows
    if n == 1:
        return matrix[0, 0]
    if n == 2:
        return matrix[0, 0] * matrix[1, 1] - matrix[0, 1] * matrix[1, 0]
    total = 0
    for j in range(n):
        sign = 1 if j % 2 == 0 else -1
        total += sign * matrix[0, j] * cofactor_determinant(matrix.submatrix(0, j))
    return total


def inverse(matrix):
    """Inverse by Gauss-Jordan elimination on [A | I]."""
    if not matrix.is_square():
        raise MatrixError("inverse needs a square matrix")
    n = matrix.n_rows
    augmented = Matrix([
        list(row) + [1 if i == j else 0 for j in range(n)]
        for i, row in enumerate(matrix.rows)
    ])
    reduced = rref(augmented)
    for i in range(n):
        if reduced[i, i] != 1:
            raise SingularMatrixError("matrix is singular")
    return Matrix([row[n:] for row in reduced.rows])


def solve(matrix, rhs):
    """Solve A x = b for a square, non-singular A; returns a list of Fractions."""
    if not matrix.is_square():
        raise MatrixError("solve needs a square matrix")
    n = matrix.n_rows
    if len(rhs) != n:
        raise MatrixError(f"right-hand side has {len(rhs)} entries, expected {n}")
    augmented = Matrix([list(row) + [b] for row, b in zip(matrix.rows, rhs)])
    reduced = rref(augmented)
    for i in range(n):
        if reduced[i, i] != 1:
            raise SingularMatrixError("system has no unique solution")
    return [reduced[i, n] for i in range(n)]
