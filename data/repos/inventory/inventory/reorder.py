"""Reorder points and replenishment suggestions."""


def needs_reorder(product, available):
    """True when available stock is at or below the reorder point."""
    return available <= product.reorder_point


def round_up_to_pack(qty, pack_size):
    """Smallest multiple of pack_size that is at least qty."""
    if pack_size < 1:
        raise ValueError("pack size must be at least 1")
    if qty <= 0:
        return 0
    return -(-qty // pack_size) * pack_size


def suggested_order_qty(product, available, target=None):
    """Units to order: enough to reach target (default point + reorder qty), in whole packs."""
    if not needs_reorder(product, available):
        return 0
    goal = target if target is not None else product.reorder_point + product.reorder_qty
    shortfall = goal - available
    qty = max(product.reorder_qty, shortfall)
    return round_up_to_pack(qty, product.pack_size)


def reorder_report(warehouse):
    """(sku, available, order qty) for each product that needs ordering, sorted by SKU."""
    rows = []
    for sku in warehouse.catalog.skus():
        product = warehouse.catalog.get(sku)
        available = warehouse.available(sku)
        qty = suggested_order_qty(product, available)
        if qty > 0:
            rows.append((sku, available, qty))
    return rows


def average_daily_usage(issued, days):
    """Average units issued per day over a period."""
    if days <= 0:
        raise ValueError("days must be positive")
    return sum(issued) / days


def days_of_cover(available, daily_usage):
    """Whole days current stock lasts, or None if there is no usage."""
    if daily_usage <= 0:
        return None
    return int(available // daily_usage)
