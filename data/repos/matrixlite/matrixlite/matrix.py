"""The Matrix type and its elementwise and multiplicative operations."""


class MatrixError(ValueError):
    """Raised for shape mismatches and invalid matrices."""


class Matrix:
    """An immutable dense matrix stored as a tuple of row tuples."""

    def __init__(self, rows):
        rows = [tuple(row) for row in rows]
        if not rows or not rows[0]:
            raise MatrixError("matrix must have at least one row and column")
        width = len(rows[0])
        if any(len(row) != width for row in rows):
            raise MatrixError("all rows must have the same length")
        self.rows = tuple(rows)

    @classmethod
    def zeros(cls, n_rows, n_cols):
        """Matrix of zeros."""
        return cls([[0] * n_cols for _ in range(n_rows)])

    @classmethod
    def identity(cls, n):
        """n x n identity matrix."""
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def column(cls, values):
        """Column vector from a list of values."""
        return cls([[v] for v in values])

    @property
    def n_rows(self):
        """Number of rows."""
        return len(self.rows)

    @property
    def n_cols(self):
        """Number of columns."""
        return len(self.rows[0])

    @property
    def shape(self):
        """(rows, columns)."""
        return (self.n_rows, self.n_cols)

    def is_square(self):
        """True if rows == columns."""
        return self.n_rows == self.n_cols

    def __getitem__(self, index):
        i, j = index
        return self.rows[i][j]

    def row(self, i):
        """Row i as a list."""
        return list(self.rows[i])

    def col(self, j):
        """Column j as a list."""
        return [row[j] for row in self.rows]

    def tolist(self):
        """Rows as nested lists."""
        return [list(row) for row in self.rows]

    def __eq__(self, other):
        if not isinstance(other, Matrix):
            return NotImplemented
        return self.rows == other.rows

    def __hash__(self):
        return hash(self.rows)

    def __repr__(self):
        return f"Matrix({self.tolist()!r})"

    def _check_same_shape(self, other):
        if self.shape != other.shape:
            raise MatrixError(f"shape mismatch {self.shape} vs {other.shape}")

    def __add__(self, other):
        self._check_same_shape(other)
        return Matrix([[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(self.rows, other.rows)])

    def __sub__(self, other):
        self._check_same_shape(other)
        return Matrix([[a - b for a, b in zip(r1, r2)] for r1, r2 in zip(self.rows, other.rows)])

    def __neg__(self):
        return self.scale(-1)

    def scale(self, factor):
        """Every entry multiplied by factor."""
        return Matrix([[factor * x for x in row] for row in self.rows])

    def __mul__(self, factor):
        return self.scale(factor)

    __rmul__ = __mul__

    def __matmul__(self, other):
        if self.n_cols != other.n_rows:
            raise MatrixError(f"cannot multiply {self.shape} by {other.shape}")
        cols = [other.col(j) for j in range(other.n_cols)]
        return Matrix([
            [sum(a * b for a, b in zip(row, col)) for col in cols]
            for row in self.rows
        ])

    def transpose(self):
        """Rows and columns swapped."""
        return Matrix([self.col(j) for j in range(self.n_cols)])

    def trace(self):
        """Sum of the main diagonal of a square matrix."""
        if not self.is_square():
            raise MatrixError("trace needs a square matrix")
        return sum(self.rows[i][i] for i in range(self.n_rows))

    def map(self, func):
        """Apply func to every entry."""
        return Matrix([[func(x) for x in row] for row in self.rows])

    def submatrix(self, skip_row, skip_col):
        """Matrix with one row and one column removed."""
        return Matrix([
            [x for j, x in enumerate(row) if j != skip_col]
            for i, row in enumerate(self.rows) if i != skip_row
        ])
