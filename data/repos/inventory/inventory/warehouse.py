"""Stock moves, locations and reservations."""

from .valuation import FifoLayers, InsufficientStockError

DEFAULT_LOCATION = "MAIN"


class Move:
    """A recorded stock movement."""

    def __init__(self, kind, sku, qty, location, cost):
        self.kind = kind
        self.sku = sku
        self.qty = qty
        self.location = location
        self.cost = cost

    def as_tuple(self):
        """(kind, sku, qty, location, cost)."""
        return (self.kind, self.sku, self.qty, self.location, self.cost)


class Warehouse:
    """Stock per SKU and location, valued FIFO, with SKU-level reservations."""

    def __init__(self, catalog):
        self.catalog = catalog
        self._layers = {}
        self._reserved = {}
        self.moves = []

    def _sku(self, sku):
        return self.catalog.get(sku).sku

    def _stack(self, sku, location):
        return self._layers.setdefault((sku, location), FifoLayers())

    def _record(self, kind, sku, qty, location, cost):
        move = Move(kind, sku, qty, location, cost)
        self.moves.append(move)
        return move

    def receive(self, sku, qty, unit_cost, location=DEFAULT_LOCATION):
        """Add stock at a unit cost in cents; returns the move."""
        sku = self._sku(sku)
        self._stack(sku, location).add(qty, unit_cost)
        return self._record("receive", sku, qty, location, qty * unit_cost)

    def on_hand(self, sku, location=None):
        """Units physically present, at one location or in total."""
        sku = self._sku(sku)
        if location is not None:
            return self._stack(sku, location).quantity()
        return sum(layers.quantity() for (s, _), layers in self._layers.items() if s == sku)

    def reserved(self, sku):
        """Units promised to orders but not yet issued."""
        return self._reserved.get(self._sku(sku), 0)

    def available(self, sku):
        """On hand minus reserved."""
        return self.on_hand(sku) - self.reserved(sku)

    def reserve(self, sku, qty):
        """Reserve qty units for an order."""
        sku = self._sku(sku)
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if qty > self.available(sku):
            raise InsufficientStockError(f"only {self.available(sku)} of {sku} available")
        self._reserved[sku] = self.reserved(sku) + qty

    def release(self, sku, qty):
        """Cancel part of a reservation."""
        sku = self._sku(sku)
        if qty <= 0 or qty > self.reserved(sku):
            raise ValueError("cannot release more than reserved")
        self._reserved[sku] = self.reserved(sku) - qty

    def issue(self, sku, qty, location=DEFAULT_LOCATION, reserved=False):
        """Ship stock; returns cost of goods in cents. reserved=True consumes a reservation."""
        sku = self._sku(sku)
        if reserved:
            if qty > self.reserved(sku):
                raise InsufficientStockError("issue exceeds reservation")
        elif qty > self.available(sku):
            raise InsufficientStockError(f"only {self.available(sku)} of {sku} available")
        cost = self._stack(sku, location).remove(qty)
        if reserved:
            self._reserved[sku] -= qty
        self._record("issue", sku, qty, location, cost)
        return cost

    def transfer(self, sku, qty, source, target):
        """Move units between locations keeping their FIFO costs."""
        sku = self._sku(sku)
        if source == target:
            raise ValueError("source and target must differ")
        slices = self._stack(sku, source).take(qty)
        destination = self._stack(sku, target)
        for slice_qty, cost in slices:
            destination.add(slice_qty, cost)
        total = sum(q * c for q, c in slices)
        self._record("transfer", sku, qty, f"{source}>{target}", total)
        return total

    def adjust(self, sku, counted, location=DEFAULT_LOCATION, unit_cost=0):
        """Set stock at a location to a counted quantity; returns the difference."""
        sku = self._sku(sku)
        if counted < 0:
            raise ValueError("counted quantity must be non-negative")
        current = self.on_hand(sku, location)
        difference = counted - current
        if difference > 0:
            self._stack(sku, location).add(difference, unit_cost)
            self._record("adjust", sku, difference, location, difference * unit_cost)
        elif difference < 0:
            cost = self._stack(sku, location).remove(-difference)
            self._record("adjust", sku, difference, location, -cost)
        return difference

    def value(self, sku=None):
        """Inventory value in cents for one SKU or the whole warehouse."""
        key = None if sku is None else self._sku(sku)
        return sum(l.value() for (s, _), l in self._layers.items() if key is None or s == key)

    def locations(self, sku):
        """Locations holding the SKU, sorted by name."""
        sku = self._sku(sku)
        return sorted(loc for (s, loc), l in self._layers.items() if s == sku and l.quantity() > 0)

    def history(self, sku, kind=None):
        """Moves of one SKU as tuples, optionally filtered by kind."""
        sku = self._sku(sku)
        return [m.as_tuple() for m in self.moves if m.sku == sku and (kind is None or m.kind == kind)]
