"""matrixlite: a small dense matrix library."""

from .matrix import Matrix, MatrixError
from .elimination import (
    SingularMatrixError, row_echelon, rref, rank, determinant, cofactor_determinant,
    inverse, solve,
)
from .ops import (
    power, is_symmetric, is_diagonal, is_upper_triangular, hadamard, dot, outer,
    frobenius_squared, kronecker,
)

__all__ = [
    "Matrix", "MatrixError", "SingularMatrixError",
    "row_echelon", "rref", "rank", "determinant", "cofactor_determinant", "inverse", "solve",
    "power", "is_symmetric", "is_diagonal", "is_upper_triangular", "hadamard", "dot",
    "outer", "frobenius_squared", "kronecker",
]
