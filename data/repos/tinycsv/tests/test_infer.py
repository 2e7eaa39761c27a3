import pytest

from tinycsv import (
    column_kind,
    convert,
    convert_rows,
    infer_columns,
    infer_value,
    is_float,
    is_int,
    kind_of,
    kind_rank,
    widen,
)


def test_is_int():
    assert is_int("42") is True
    assert is_int("-7") is True
    assert is_int("+3") is True
    assert is_int("") is False
    assert is_int("-") is False
    assert is_int("4.0") is False


def test_is_float():
    assert is_float("3.14") is True
    assert is_float("1e3") is True
    assert is_float("-0.5") is True
    assert is_float("12") is False
    assert is_float("abc") is False
    assert is_float("nan") is False
    assert is_float("inf") is False


@pytest.mark.parametrize(
    "text, kind",
    [("", "null"), ("NA", "null"), (" null ", "null"), ("Yes", "bool"), ("false", "bool"),
     ("10", "int"), ("1.5", "float"), ("hello", "str"), ("1,5", "str")],
)
def test_kind_of(text, kind):
    assert kind_of(text) == kind


def test_convert_values():
    assert convert("12", "int") == 12
    assert convert(" 2.5 ", "float") == 2.5
    assert convert("YES", "bool") is True
    assert convert("no", "bool") is False
    assert convert("", "int") is None


def test_convert_str_keeps_text():
    assert convert(" raw ", "str") == " raw "
    assert convert("", "str") == ""


def test_infer_value():
    assert infer_value("7") == 7
    assert infer_value("none") is None
    assert infer_value("x1") == "x1"


def test_widen():
    assert widen("null", "int") == "int"
    assert widen("float", "null") == "float"
    assert widen("int", "int") == "int"
    assert widen("int", "float") == "float"
    assert widen("float", "int") == "float"
    assert widen("bool", "int") == "str"


def test_column_kind():
    assert column_kind(["1", "2", ""]) == "int"
    assert column_kind(["1", "2.5"]) == "float"
    assert column_kind(["1", "a"]) == "str"
    assert column_kind([]) == "null"


def test_infer_columns():
    rows = [["1", "a", "true"], ["2", "b", ""], ["3.5", "c", "no"]]
    assert infer_columns(rows) == ["float", "str", "bool"]


def test_infer_columns_ragged_rows():
    assert infer_columns([["1"], ["2", "x"], []]) == ["int", "str"]
    assert infer_columns([]) == []


def test_convert_rows():
    rows = [["1", "x"], ["", "2"]]
    assert convert_rows(rows) == [[1, "x"], [None, "2"]]


def test_kind_rank_order():
    assert [kind_rank(k) for k in ("null", "bool", "int", "float", "str")] == [0, 1, 2, 3, 4]
