"""Products, SKU validation and the catalog."""

import re

SKU_PATTERN = re.compile(r"^[A-Z]{3}-\d{4}$")


class CatalogError(ValueError):
    """Raised for invalid products or unknown SKUs."""


def normalize_sku(text):
    """Upper-case a SKU, trim it and turn spaces or underscores into dashes."""
    return text.strip().upper().replace(" ", "-").replace("_", "-")


def is_valid_sku(text):
    """True if text looks like ABC-1234."""
    return bool(SKU_PATTERN.match(text))


class Product:
    """A stocked item with its reorder settings."""

    def __init__(self, sku, name, reorder_point=0, reorder_qty=0, pack_size=1):
        sku = normalize_sku(sku)
        if not is_valid_sku(sku):
            raise CatalogError(f"invalid SKU {sku!r}")
        if reorder_point < 0 or reorder_qty < 0:
            raise CatalogError("reorder settings must be non-negative")
        if pack_size < 1:
            raise CatalogError("pack size must be at least 1")
        self.sku = sku
        self.name = name
        self.reorder_point = reorder_point
        self.reorder_qty = reorder_qty
        self.pack_size = pack_size

    def __repr__(self):
        return f"Product({self.sku!r}, {self.name!r})"


class Catalog:
    """Products indexed by SKU."""

    def __init__(self, products=()):
        self._products = {}
        for product in products:
            self.add(product)

    def add(self, product):
        """Register a product; SKUs must be unique."""
        if product.sku in self._products:
            raise CatalogError(f"duplicate SKU {product.sku}")
        self._products[product.sku] = product
        return product

    def get(self, sku):
        """Product for a SKU (normalized before lookup)."""
        key = normalize_sku(sku)
        if key not in self._products:
            raise CatalogError(f"unknown SKU {key}")
        return self._products[key]

    def __contains__(self, sku):
        return normalize_sku(sku) in self._products

    def __len__(self):
        return len(self._products)

    def skus(self):
        """All SKUs in ascending order."""
        return sorted(self._products)

    def search(self, text):
        """SKUs whose product name contains text, case-insensitively, sorted."""
        needle = text.lower()
        return [sku for sku in self.skus() if needle in self._products[sku].name.lower()]
