import pytest

from inventory import FifoLayers, InsufficientStockError, round_half_up


def make_layers():
    layers = FifoLayers()
    layers.add(10, 100)
    layers.add(5, 130)
    layers.add(20, 90)
    return layers


def test_round_half_up():
    assert round_half_up(7, 2) == 4
    assert round_half_up(5, 2) == 3
    assert round_half_up(10, 4) == 3
    assert round_half_up(9, 4) == 2
    assert round_half_up(0, 3) == 0


def test_quantity_and_value():
    layers = make_layers()
    assert layers.quantity() == 35
    assert layers.value() == 10 * 100 + 5 * 130 + 20 * 90


def test_average_cost():
    assert make_layers().average_cost() == 99
    assert FifoLayers().average_cost() == 0


def test_add_validation():
    layers = FifoLayers()
    with pytest.raises(ValueError):
        layers.add(0, 100)
    with pytest.raises(ValueError):
        layers.add(1, -1)
    layers.add(1, 0)
    assert layers.value() == 0


def test_remove_within_first_layer():
    layers = make_layers()
    assert layers.remove(4) == 400
    assert layers.layers[0] == [6, 100]


def test_remove_exact_layer_drops_it():
    layers = make_layers()
    assert layers.remove(10) == 1000
    assert layers.layers == [[5, 130], [20, 90]]


def test_remove_spanning_layers():
    layers = make_layers()
    assert layers.remove(17) == 10 * 100 + 5 * 130 + 2 * 90
    assert layers.layers == [[18, 90]]
    assert layers.quantity() == 18


def test_remove_everything():
    layers = make_layers()
    assert layers.remove(35) == 3450
    assert layers.layers == []


def test_remove_too_much():
    layers = make_layers()
    with pytest.raises(InsufficientStockError):
        layers.remove(36)
    assert layers.quantity() == 35


def test_remove_non_positive():
    with pytest.raises(ValueError):
        make_layers().remove(0)


def test_take_returns_slices():
    assert make_layers().take(12) == [(10, 100), (2, 130)]
    assert make_layers().take(1) == [(1, 100)]


def test_peek_cost_does_not_consume():
    layers = make_layers()
    assert layers.peek_cost(11) == 1130
    assert layers.peek_cost(0) == 0
    assert layers.peek_cost(35) == 3450
    assert layers.quantity() == 35
    with pytest.raises(InsufficientStockError):
        layers.peek_cost(40)
