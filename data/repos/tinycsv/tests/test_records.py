import pytest

from tinycsv import (
    CSVError,
    Dialect,
    check_header,
    column_values,
    read_dicts,
    row_to_dict,
    select_columns,
    write_dicts,
)


def test_check_header_duplicate():
    with pytest.raises(CSVError):
        check_header(["a", "b", "a"])


def test_check_header_empty_name():
    with pytest.raises(CSVError):
        check_header(["a", " "])


def test_row_to_dict_pads_short_rows():
    assert row_to_dict(["a", "b", "c"], ["1"], fill="-") == {"a": "1", "b": "-", "c": "-"}


def test_row_to_dict_long_row_raises():
    with pytest.raises(CSVError):
        row_to_dict(["a"], ["1", "2"])


def test_row_to_dict_strict_short_row_raises():
    with pytest.raises(CSVError):
        row_to_dict(["a", "b"], ["1"], strict=True)


def test_read_dicts():
    text = "name,age\nAnn,31\nBob,27\n"
    assert read_dicts(text) == [{"name": "Ann", "age": "31"}, {"name": "Bob", "age": "27"}]
    assert read_dicts(text, strict=True) == read_dicts(text)


def test_read_dicts_skips_blank_lines():
    assert read_dicts("a\n\n1\n\n") == [{"a": "1"}]


def test_read_dicts_empty():
    assert read_dicts("") == []
    assert read_dicts("a,b\n") == []


def test_read_dicts_infer_types():
    text = "id;price;ok\n1;2.50;yes\n2;3;no\n3;;\n"
    records = read_dicts(text, Dialect(delimiter=";"), infer=True)
    assert records == [
        {"id": 1, "price": 2.5, "ok": True},
        {"id": 2, "price": 3.0, "ok": False},
        {"id": 3, "price": None, "ok": None},
    ]


def test_read_dicts_infer_with_short_row():
    records = read_dicts("a,b\n1,2\n3\n", infer=True)
    assert records == [{"a": 1, "b": 2}, {"a": 3, "b": None}]


def test_write_dicts_sorted_fields():
    records = [{"b": 1, "a": 2}, {"c": 3}]
    assert write_dicts(records) == "a,b,c\n2,1,\n,,3\n"


def test_write_dicts_explicit_fields_and_missing():
    records = [{"x": "1,5", "y": None}]
    assert write_dicts(records, fields=["y", "x", "z"], missing="?") == 'y,x,z\n,"1,5",?\n'


def test_write_then_read_round_trip():
    records = [{"k": "a", "v": "x,y"}, {"k": "b", "v": 'q"q'}]
    assert read_dicts(write_dicts(records)) == records


def test_select_columns_and_values():
    records = [{"a": 1, "b": 2, "c": 3}, {"a": 4, "b": 5, "c": 6}]
    assert select_columns(records, ["c", "a"]) == [{"c": 3, "a": 1}, {"c": 6, "a": 4}]
    assert column_values(records, "b") == [2, 5]
