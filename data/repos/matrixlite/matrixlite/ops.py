"""Matrix helpers: powers, structural checks and vector products."""

from .matrix import Matrix, MatrixError


def power(matrix, exponent):
    """Matrix raised to a non-negative integer power by repeated squaring."""
    if not matrix.is_square():
        raise MatrixError("power needs a square matrix")
    if exponent < 0:
        raise MatrixError("exponent must be non-negative")
    result = Matrix.identity(matrix.n_rows)
    base = matrix
    while exponent > 0:
        if exponent % 2 == 1:
            result = result @ base
        base = base @ base
        exponent //= 2
    return result


def is_symmetric(matrix):
    """True if the matrix equals its transpose."""
    return matrix.is_square() and matrix == matrix.transpose()


def is_diagonal(matrix):
    """True if every off-diagonal entry is zero."""
    return all(
        matrix[i, j] == 0
        for i in range(matrix.n_rows)
        for j in range(matrix.n_cols)
        if i != j
    )


def is_upper_triangular(matrix):
    """True if every entry below the main diagonal is zero."""
    return all(matrix[i, j] == 0 for i in range(matrix.n_rows) for j in range(min(i, matrix.n_cols)))


def hadamard(a, b):
    """Elementwise product of two matrices of the same shape."""
    if a.shape != b.shape:
        raise MatrixError("shape mismatch")
    return Matrix([[x * y for x, y in zip(r1, r2)] for r1, r2 in zip(a.rows, b.rows)])


def dot(u, v):
    """Dot product of two equal-length vectors."""
    if len(u) != len(v):
        raise MatrixError("vectors must have the same length")
    return sum(x * y for x, y in zip(u, v))


def outer(u, v):
    """Outer product u v^T."""
    return Matrix([[x * y for y in v] for x in u])


def frobenius_squared(matrix):
    """Sum of squares of all entries."""
    return sum(x * x for row in matrix.rows for x in row)


def kronecker(a, b):
    """Kronecker product of two matrices."""
    rows = []
    for i in range(a.n_rows):
        for k in range(b.n_rows):
            rows.append([a[i, j] * b[k, m] for j in range(a.n_cols) for m in range(b.n_cols)])
    return Matrix(rows)
