from tinycsv import (
    QUOTE_ALL,
    QUOTE_NONNUMERIC,
    Dialect,
    format_field,
    format_row,
    needs_quotes,
    parse,
    quote,
    to_text,
    write,
)


def test_needs_quotes():
    assert needs_quotes("plain") is False
    assert needs_quotes("") is False
    assert needs_quotes("a,b") is True
    assert needs_quotes('say "x"') is True
    assert needs_quotes("two\nlines") is True
    assert needs_quotes(" padded") is True


def test_needs_quotes_custom_delimiter():
    assert needs_quotes("a,b", Dialect(delimiter=";")) is False
    assert needs_quotes("a;b", Dialect(delimiter=";")) is True


def test_quote_doubles_quotechar():
    assert quote('a"b') == '"a""b"'
    assert quote("it's", Dialect(quotechar="'")) == "'it''s'"


def test_to_text():
    assert to_text(None) == ""
    assert to_text(True) == "true"
    assert to_text(False) == "false"
    assert to_text(2.5) == "2.5"


def test_format_field_minimal():
    assert format_field("x,y") == '"x,y"'
    assert format_field(12) == "12"


def test_format_field_quote_all():
    assert format_field(12, quoting=QUOTE_ALL) == '"12"'


def test_format_field_nonnumeric():
    assert format_field("abc", quoting=QUOTE_NONNUMERIC) == '"abc"'
    assert format_field(3.5, quoting=QUOTE_NONNUMERIC) == "3.5"
    assert format_field(True, quoting=QUOTE_NONNUMERIC) == '"true"'
    assert format_field(None, quoting=QUOTE_NONNUMERIC) == ""


def test_format_row():
    assert format_row(["a", 1, None, "b c"]) == "a,1,,b c"


def test_write_rows():
    assert write([["a", "b"], [1, 2]]) == "a,b\n1,2\n"


def test_write_crlf():
    assert write([["x"]], newline="\r\n") == "x\r\n"


def test_round_trip():
    rows = [["name", "note"], ["Ann", 'said "hi", left'], ["Bob", "multi\nline"], ["", " sp "]]
    assert parse(write(rows)) == rows
