import pytest

from inventory import (
    Catalog, Product, Warehouse, needs_reorder, round_up_to_pack, suggested_order_qty,
    reorder_report, average_daily_usage, days_of_cover,
)

BOLT = Product("BOL-0001", "Hex bolt", reorder_point=20, reorder_qty=50, pack_size=25)


def test_needs_reorder_boundary():
    assert needs_reorder(BOLT, 21) is False
    assert needs_reorder(BOLT, 20) is True
    assert needs_reorder(BOLT, 0) is True


def test_round_up_to_pack():
    assert round_up_to_pack(1, 25) == 25
    assert round_up_to_pack(25, 25) == 25
    assert round_up_to_pack(26, 25) == 50
    assert round_up_to_pack(7, 1) == 7
    assert round_up_to_pack(0, 10) == 0
    with pytest.raises(ValueError):
        round_up_to_pack(5, 0)


def test_suggested_qty_not_needed():
    assert suggested_order_qty(BOLT, 21) == 0


def test_suggested_qty_fills_to_target():
    assert suggested_order_qty(BOLT, 20) == 50
    assert suggested_order_qty(BOLT, 5) == 75
    assert suggested_order_qty(BOLT, -10) == 100


def test_suggested_qty_minimum_is_reorder_qty():
    assert suggested_order_qty(BOLT, 10, target=30) == 50


def test_suggested_qty_custom_target():
    assert suggested_order_qty(BOLT, 10, target=140) == 150


def test_reorder_report():
    catalog = Catalog([
        Product("NUT-0002", "Hex nut", reorder_point=100, reorder_qty=200, pack_size=100),
        BOLT,
        Product("WSH-0003", "Washer", reorder_point=5, reorder_qty=10),
    ])
    wh = Warehouse(catalog)
    wh.receive("BOL-0001", 30, 10)
    wh.receive("NUT-0002", 150, 2)
    wh.receive("WSH-0003", 5, 1)
    wh.reserve("BOL-0001", 12)
    assert reorder_report(wh) == [
        ("BOL-0001", 18, 75),
        ("WSH-0003", 5, 10),
    ]


def test_average_daily_usage():
    assert average_daily_usage([10, 20, 30], 4) == 15.0
    assert average_daily_usage([], 7) == 0.0
    assert average_daily_usage([5], 1) == 5.0
    with pytest.raises(ValueError):
        average_daily_usage([1], 0)


def test_days_of_cover():
    assert days_of_cover(100, 7) == 14
    assert days_of_cover(100, 2.5) == 40
    assert days_of_cover(6, 7) == 0
    assert days_of_cover(10, 1) == 10
    assert days_of_cover(10, 0.5) == 20
    assert days_of_cover(100, 0) is None


def test_reorder_report_single_unit():
    catalog = Catalog([Product("PIN-0004", "Pin", reorder_point=0, reorder_qty=1)])
    assert reorder_report(Warehouse(catalog)) == [("PIN-0004", 0, 1)]
