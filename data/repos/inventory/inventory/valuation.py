"""FIFO cost layers, amounts in integer cents."""


class InsufficientStockError(ValueError):
    """Raised when more stock is requested than is available."""


def round_half_up(numerator, denominator):
    """Integer division rounded half up, for non-negative values."""
    return (2 * numerator + denominator) // (2 * denominator)


class FifoLayers:
    """Cost layers consumed oldest first."""

    def __init__(self):
        self.layers = []

    def add(self, qty, unit_cost):
        """Add a layer of qty units at unit_cost cents each."""
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if unit_cost < 0:
            raise ValueError("unit cost must be non-negative")
        self.layers.append([qty, unit_cost])

    def quantity(self):
        """Units on hand across all layers."""
        return sum(layer[0] for layer in self.layers)

    def value(self):
        """Total cost of units on hand in cents."""
        return sum(qty * cost for qty, cost in self.layers)

    def average_cost(self):
        """Weighted average unit cost in cents (0 when empty)."""
        qty = self.quantity()
        if qty == 0:
            return 0
        return round_half_up(self.value(), qty)

    def peek_cost(self, qty):
        """Cost of the next qty units without consuming them."""
        if qty > self.quantity():
            raise InsufficientStockError(f"only {self.quantity()} units in layers")
        remaining = qty
        total = 0
        for layer_qty, cost in self.layers:
            used = min(remaining, layer_qty)
            total += used * cost
            remaining -= used
            if remaining == 0:
                break
        return total

    def take(self, qty):
        """Remove qty units oldest first; return the consumed (qty, cost) slices."""
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if qty > self.quantity():
            raise InsufficientStockError(f"only {self.quantity()} units in layers")
        taken = []
        remaining = qty
        while remaining > 0:
            layer = self.layers[0]
            used = min(remaining, layer[0])
            taken.append((used, layer[1]))
            layer[0] -= used
            remaining -= used
            if layer[0] == 0:
                self.layers.pop(0)
        return taken

    def remove(self, qty):
        """Remove qty units oldest first and return their total cost."""
        return sum(q * c for q, c in self.take(qty))
