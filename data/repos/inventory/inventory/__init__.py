"""inventory: SKUs, stock moves, reservations, reorder points and FIFO valuation."""

from .catalog import CatalogError, Product, Catalog, normalize_sku, is_valid_sku
from .valuation import FifoLayers, InsufficientStockError, round_half_up
from .warehouse import Warehouse, Move, DEFAULT_LOCATION
from .reorder import (
    needs_reorder, round_up_to_pack, suggested_order_qty, reorder_report,
    average_daily_usage, days_of_cover,
)

__all__ = [
    "CatalogError", "Product", "Catalog", "normalize_sku", "is_valid_sku",
    "FifoLayers", "InsufficientStockError", "round_half_up",
    "Warehouse", "Move", "DEFAULT_LOCATION",
    "needs_reorder", "round_up_to_pack", "suggested_order_qty", "reorder_report",
    "average_daily_usage", "days_of_cover",
]
