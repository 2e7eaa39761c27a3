import pytest

from unitconv import (
    DimensionError,
    compound_dimension,
    compound_factor,
    convert_any,
    convert_compound,
    is_compound,
    speed,
    split_compound,
    travel_time,
)


def test_split_compound():
    assert split_compound("km / h") == ("km", "h")


@pytest.mark.parametrize("bad", ["km", "km/", "/h", "m/s/s"])
def test_split_compound_rejects_malformed(bad):
    with pytest.raises(ValueError):
        split_compound(bad)


def test_is_compound():
    assert is_compound("m/s") is True
    assert is_compound("m") is False
    assert is_compound("m/s/s") is False


def test_compound_factor_km_per_h():
    assert compound_factor("km/h") == pytest.approx(1000.0 / 3600.0)


def test_compound_factor_rejects_temperature():
    with pytest.raises(DimensionError):
        compound_factor("C/s")


def test_compound_dimension():
    assert compound_dimension("kg/min") == ("mass", "time")


def test_convert_km_per_h_to_m_per_s():
    assert convert_compound(36, "km/h", "m/s") == pytest.approx(10.0)


def test_convert_compound_incompatible():
    with pytest.raises(DimensionError):
        convert_compound(1, "m/s", "kg/s")


def test_speed_default_unit():
    assert speed(100, "m", 20, "s") == 5.0


def test_speed_in_km_per_h():
    assert speed(30, "km", 30, "min", "km/h") == pytest.approx(60.0)
    assert speed(1, "km", 0.5, "h", "km/h") == pytest.approx(2.0)


def test_speed_zero_duration_raises():
    with pytest.raises(ValueError):
        speed(10, "m", 0, "s")


def test_travel_time_hours():
    assert travel_time(150, "km", 60, "km/h") == pytest.approx(2.5)


def test_travel_time_slow_rate():
    assert travel_time(1, "km", 0.5, "km/h") == pytest.approx(2.0)


def test_travel_time_zero_rate_raises():
    with pytest.raises(ValueError):
        travel_time(1, "km", 0, "km/h")


def test_convert_any_simple_and_compound():
    assert convert_any(3, "km", "m") == 3000.0
    assert convert_any(72, "km/h", "m/s") == pytest.approx(20.0)


def test_convert_any_mixed_raises():
    with pytest.raises(DimensionError):
        convert_any(1, "m/s", "m")
