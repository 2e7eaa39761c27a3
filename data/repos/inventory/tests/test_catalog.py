import pytest

from inventory import CatalogError, Product, Catalog, normalize_sku, is_valid_sku


def test_normalize_sku():
    assert normalize_sku("  abc_1234 ") == "ABC-1234"
    assert normalize_sku("xyz 0001") == "XYZ-0001"


def test_is_valid_sku():
    assert is_valid_sku("ABC-1234") is True
    assert is_valid_sku("AB-1234") is False
    assert is_valid_sku("ABC-123") is False
    assert is_valid_sku("ABC-12345") is False
    assert is_valid_sku("abc-1234") is False


def test_product_normalizes_sku():
    product = Product("bol_0001", "Bolt")
    assert product.sku == "BOL-0001"
    assert repr(product) == "Product('BOL-0001', 'Bolt')"


def test_product_defaults():
    product = Product("BOL-0001", "Bolt")
    assert (product.reorder_point, product.reorder_qty, product.pack_size) == (0, 0, 1)


def test_product_validation():
    with pytest.raises(CatalogError):
        Product("BOLT", "Bolt")
    with pytest.raises(CatalogError):
        Product("BOL-0001", "Bolt", reorder_point=-1)
    with pytest.raises(CatalogError):
        Product("BOL-0001", "Bolt", reorder_qty=-5)
    with pytest.raises(CatalogError):
        Product("BOL-0001", "Bolt", pack_size=0)


def test_zero_reorder_settings_allowed():
    assert Product("BOL-0001", "Bolt", reorder_point=0, reorder_qty=0, pack_size=1).pack_size == 1


def test_catalog_add_get_contains():
    catalog = Catalog([Product("NUT-0002", "Hex nut")])
    bolt = Product("BOL-0001", "Bolt")
    assert catalog.add(bolt) is bolt
    assert catalog.get("nut-0002").name == "Hex nut"
    assert "nut_0002" in catalog
    assert "NUT-0003" not in catalog
    assert len(catalog) == 2


def test_catalog_duplicate_and_unknown():
    catalog = Catalog([Product("NUT-0002", "Hex nut")])
    with pytest.raises(CatalogError):
        catalog.add(Product("nut-0002", "Other nut"))
    with pytest.raises(CatalogError):
        catalog.get("NUT-0009")


def test_catalog_skus_sorted_and_search():
    catalog = Catalog([
        Product("WSH-0003", "Flat washer"),
        Product("BOL-0001", "Hex bolt"),
        Product("NUT-0002", "Hex nut"),
    ])
    assert catalog.skus() == ["BOL-0001", "NUT-0002", "WSH-0003"]
    assert catalog.search("HEX") == ["BOL-0001", "NUT-0002"]
    assert catalog.search("gear") == []
