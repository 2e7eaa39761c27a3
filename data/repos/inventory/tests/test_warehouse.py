import pytest

from inventory import Catalog, CatalogError, InsufficientStockError, Product, Warehouse


def make_warehouse():
    catalog = Catalog([
        Product("BOL-0001", "Hex bolt", reorder_point=20, reorder_qty=50, pack_size=25),
        Product("NUT-0002", "Hex nut", reorder_point=100, reorder_qty=200, pack_size=100),
    ])
    wh = Warehouse(catalog)
    wh.receive("BOL-0001", 30, 10)
    wh.receive("BOL-0001", 20, 12)
    wh.receive("NUT-0002", 50, 2, location="B2")
    return wh


def test_receive_records_move():
    wh = make_warehouse()
    move = wh.receive("bol-0001", 5, 11, location="A1")
    assert move.as_tuple() == ("receive", "BOL-0001", 5, "A1", 55)


def test_receive_unknown_sku():
    with pytest.raises(CatalogError):
        make_warehouse().receive("ZZZ-9999", 1, 1)


def test_on_hand_total_and_by_location():
    wh = make_warehouse()
    assert wh.on_hand("BOL-0001") == 50
    assert wh.on_hand("NUT-0002") == 50
    assert wh.on_hand("NUT-0002", "B2") == 50
    assert wh.on_hand("NUT-0002", "MAIN") == 0


def test_issue_fifo_cost():
    wh = make_warehouse()
    assert wh.issue("BOL-0001", 35) == 30 * 10 + 5 * 12
    assert wh.on_hand("BOL-0001") == 15
    assert wh.value("BOL-0001") == 15 * 12


def test_issue_more_than_available():
    wh = make_warehouse()
    with pytest.raises(InsufficientStockError):
        wh.issue("BOL-0001", 51)
    assert wh.on_hand("BOL-0001") == 50


def test_issue_all_stock():
    wh = make_warehouse()
    assert wh.issue("BOL-0001", 50) == 540
    assert wh.on_hand("BOL-0001") == 0


def test_issue_from_wrong_location():
    wh = make_warehouse()
    with pytest.raises(InsufficientStockError):
        wh.issue("NUT-0002", 10, location="MAIN")


def test_reserve_reduces_available():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 40)
    assert wh.reserved("BOL-0001") == 40
    assert wh.available("BOL-0001") == 10
    assert wh.on_hand("BOL-0001") == 50


def test_reserve_limits():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 50)
    with pytest.raises(InsufficientStockError):
        wh.reserve("BOL-0001", 1)
    with pytest.raises(ValueError):
        wh.reserve("NUT-0002", 0)


def test_unreserved_issue_cannot_take_reserved_stock():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 45)
    with pytest.raises(InsufficientStockError):
        wh.issue("BOL-0001", 6)
    assert wh.issue("BOL-0001", 5) == 50


def test_issue_against_reservation():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 45)
    assert wh.issue("BOL-0001", 45, reserved=True) == 30 * 10 + 15 * 12
    assert wh.reserved("BOL-0001") == 0
    assert wh.available("BOL-0001") == 5


def test_issue_exceeding_reservation():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 10)
    with pytest.raises(InsufficientStockError):
        wh.issue("BOL-0001", 11, reserved=True)
    assert wh.reserved("BOL-0001") == 10


def test_release():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 10)
    wh.release("BOL-0001", 4)
    assert wh.reserved("BOL-0001") == 6
    wh.release("BOL-0001", 6)
    assert wh.reserved("BOL-0001") == 0
    with pytest.raises(ValueError):
        wh.release("BOL-0001", 1)


def test_release_requires_positive_quantity():
    wh = make_warehouse()
    wh.reserve("BOL-0001", 10)
    with pytest.raises(ValueError):
        wh.release("BOL-0001", 0)
    wh.release("BOL-0001", 1)
    assert wh.reserved("BOL-0001") == 9


def test_transfer_keeps_fifo_costs():
    wh = make_warehouse()
    assert wh.transfer("BOL-0001", 35, "MAIN", "A1") == 360
    assert wh.on_hand("BOL-0001", "MAIN") == 15
    assert wh.on_hand("BOL-0001", "A1") == 35
    assert wh.on_hand("BOL-0001") == 50
    assert wh.history("BOL-0001", kind="transfer") == [("transfer", "BOL-0001", 35, "MAIN>A1", 360)]
    assert wh.issue("BOL-0001", 31, location="A1") == 30 * 10 + 12
    assert wh.value("BOL-0001") == 15 * 12 + 4 * 12


def test_transfer_errors():
    wh = make_warehouse()
    with pytest.raises(ValueError):
        wh.transfer("BOL-0001", 5, "MAIN", "MAIN")
    with pytest.raises(InsufficientStockError):
        wh.transfer("BOL-0001", 51, "MAIN", "A1")


def test_adjust_up_and_down():
    wh = make_warehouse()
    assert wh.adjust("BOL-0001", 55, unit_cost=11) == 5
    assert wh.on_hand("BOL-0001") == 55
    assert wh.adjust("BOL-0001", 25) == -30
    assert wh.on_hand("BOL-0001") == 25
    assert wh.value("BOL-0001") == 20 * 12 + 5 * 11


def test_adjust_records_cost():
    wh = make_warehouse()
    assert wh.adjust("BOL-0001", 51, unit_cost=7) == 1
    assert wh.history("BOL-0001", kind="adjust") == [("adjust", "BOL-0001", 1, "MAIN", 7)]


def test_adjust_default_cost_zero_and_to_empty():
    wh = make_warehouse()
    assert wh.adjust("NUT-0002", 60, location="B2") == 10
    assert wh.value("NUT-0002") == 100
    assert wh.adjust("BOL-0001", 0) == -50
    assert wh.on_hand("BOL-0001") == 0


def test_adjust_no_change_and_negative():
    wh = make_warehouse()
    assert wh.adjust("BOL-0001", 50) == 0
    assert len(wh.history("BOL-0001", kind="adjust")) == 0
    with pytest.raises(ValueError, match="non-negative"):
        wh.adjust("BOL-0001", -1)


def test_value_total():
    wh = make_warehouse()
    assert wh.value() == 300 + 240 + 100
    assert wh.value("NUT-0002") == 100


def test_locations_sorted_and_non_empty():
    wh = make_warehouse()
    wh.transfer("BOL-0001", 5, "MAIN", "C3")
    wh.transfer("BOL-0001", 1, "MAIN", "A1")
    wh.issue("BOL-0001", 5, location="C3")
    assert wh.locations("BOL-0001") == ["A1", "MAIN"]


def test_history():
    wh = make_warehouse()
    wh.issue("BOL-0001", 5)
    wh.adjust("BOL-0001", 40)
    assert wh.history("BOL-0001") == [
        ("receive", "BOL-0001", 30, "MAIN", 300),
        ("receive", "BOL-0001", 20, "MAIN", 240),
        ("issue", "BOL-0001", 5, "MAIN", 50),
        ("adjust", "BOL-0001", -5, "MAIN", -50),
    ]
    assert len(wh.history("BOL-0001", kind="receive")) == 2


def test_operations_normalize_sku():
    wh = make_warehouse()
    assert wh.on_hand("bol_0001") == 50
    wh.reserve("bol-0001", 10)
    wh.release("bol 0001", 2)
    assert wh.reserved("BOL-0001") == 8
    assert wh.issue("bol-0001", 8, reserved=True) == 80
    wh.transfer("bol-0001", 2, "MAIN", "A1")
    assert wh.adjust("bol-0001", 3, location="A1", unit_cost=10) == 1
    assert wh.locations("bol-0001") == ["A1", "MAIN"]
    assert len(wh.history("bol-0001")) == 5
