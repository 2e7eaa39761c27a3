"""Grid model: cells, walls, weights and neighbourhoods."""

WALL = "#"
OPEN = "."
START = "S"
GOAL = "G"

ORTHOGONAL = ((-1, 0), (0, 1), (1, 0), (0, -1))
DIAGONAL = ((-1, 1), (1, 1), (1, -1), (-1, -1))


class GridError(ValueError):
    """Raised for malformed grids or invalid positions."""


class Grid:
    """A rectangular grid of cells addressed as (row, col)."""

    def __init__(self, rows, diagonal=False):
        if not rows:
            raise GridError("grid must have at least one row")
        width = len(rows[0])
        if width == 0:
            raise GridError("grid rows must not be empty")
        for row in rows:
            if len(row) != width:
                raise GridError("grid rows must have equal length")
        self.rows = list(rows)
        self.height = len(rows)
        self.width = width
        self.diagonal = diagonal

    @classmethod
    def from_text(cls, text, diagonal=False):
        """Build a grid from multi-line text, ignoring blank lines and indentation."""
        rows = [line.strip() for line in text.splitlines() if line.strip()]
        return cls(rows, diagonal=diagonal)

    def in_bounds(self, pos):
        """True if pos lies inside the grid."""
        r, c = pos
        return 0 <= r < self.height and 0 <= c < self.width

    def cell(self, pos):
        """Return the character at pos."""
        if not self.in_bounds(pos):
            raise GridError(f"position {pos} out of bounds")
        r, c = pos
        return self.rows[r][c]

    def passable(self, pos):
        """True if pos is inside the grid and not a wall."""
        return self.in_bounds(pos) and self.cell(pos) != WALL

    def cost(self, pos):
        """Cost of entering the cell at pos."""
        ch = self.cell(pos)
        if ch == WALL:
            raise GridError(f"position {pos} is a wall")
        if ch.isdigit():
            value = int(ch)
            if value == 0:
                raise GridError("cell cost must be at least 1")
            return value
        return 1

    def step_cost(self, src, dst):
        """Cost of moving from src to the adjacent cell dst (diagonals cost more)."""
        base = self.cost(dst)
        if src[0] != dst[0] and src[1] != dst[1]:
            return base * 1.5
        return base

    def neighbors(self, pos):
        """Passable neighbours of pos in a fixed order (N, E, S, W, then diagonals)."""
        r, c = pos
        deltas = ORTHOGONAL + DIAGONAL if self.diagonal else ORTHOGONAL
        result = []
        for dr, dc in deltas:
            nxt = (r + dr, c + dc)
            if not self.passable(nxt):
                continue
            if dr != 0 and dc != 0:
                if not (self.passable((r + dr, c)) and self.passable((r, c + dc))):
                    continue
            result.append(nxt)
        return result

    def find(self, marker):
        """Return the first position holding marker, scanning row by row."""
        for r, row in enumerate(self.rows):
            c = row.find(marker)
            if c >= 0:
                return (r, c)
        raise GridError(f"marker {marker!r} not found")

    def count_walls(self):
        """Number of wall cells."""
        return sum(row.count(WALL) for row in self.rows)

    def open_cells(self):
        """Number of passable cells."""
        return self.height * self.width - self.count_walls()
