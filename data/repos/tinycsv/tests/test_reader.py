import pytest

from tinycsv import CSVError, Dialect, column_count, parse, parse_line, skip_blank


def test_parse_simple_rows():
    assert parse("a,b,c\n1,2,3\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_parse_without_trailing_newline():
    assert parse("a,b\n1,2") == [["a", "b"], ["1", "2"]]


def test_parse_empty_text():
    assert parse("") == []


def test_parse_crlf():
    assert parse("a,b\r\nc,d\r\n") == [["a", "b"], ["c", "d"]]


def test_parse_empty_fields():
    assert parse(",a,,\n") == [["", "a", "", ""]]


def test_parse_blank_line_is_single_empty_field():
    assert parse("a\n\nb\n") == [["a"], [""], ["b"]]


def test_parse_quoted_delimiter():
    assert parse('"x,y",z\n') == [["x,y", "z"]]


def test_parse_escaped_quotes():
    assert parse('"say ""hi""",1\n') == [['say "hi"', "1"]]


def test_parse_quoted_newline():
    assert parse('"line1\nline2",end\n') == [["line1\nline2", "end"]]


def test_parse_empty_quoted_field():
    assert parse('""') == [[""]]
    assert parse('a,""\n') == [["a", ""]]


def test_quote_inside_unquoted_field_is_literal():
    assert parse('ab"c,d') == [['ab"c', "d"]]


def test_unterminated_quote_raises():
    with pytest.raises(CSVError):
        parse('"abc,def\n')


def test_garbage_after_closing_quote_raises():
    with pytest.raises(CSVError):
        parse('"abc"x,1\n')
    with pytest.raises(CSVError):
        parse('"abc" ,1\n')


def test_custom_delimiter():
    assert parse("a;b;c\n", Dialect(delimiter=";")) == [["a", "b", "c"]]


def test_custom_quotechar():
    assert parse("'a|b'|c\n", Dialect(delimiter="|", quotechar="'")) == [["a|b", "c"]]


def test_strip_whitespace():
    assert parse(" a , b \n", Dialect(strip=True)) == [["a", "b"]]


def test_no_strip_by_default():
    assert parse(" a , b \n") == [[" a ", " b "]]


def test_strip_keeps_quoted_whitespace():
    assert parse('  " a " , b\n', Dialect(strip=True)) == [[" a ", "b"]]


@pytest.mark.parametrize("kwargs", [{"delimiter": ";;"}, {"quotechar": ""}, {"delimiter": '"'}])
def test_bad_dialect(kwargs):
    with pytest.raises(ValueError):
        Dialect(**kwargs)


def test_parse_line():
    assert parse_line('1,"two",3') == ["1", "two", "3"]
    assert parse_line("") == []


def test_parse_line_rejects_multiple_records():
    with pytest.raises(CSVError):
        parse_line("a\nb")


def test_skip_blank():
    assert skip_blank([["a"], [""], ["", ""], ["b"]]) == [["a"], ["", ""], ["b"]]


def test_column_count():
    assert column_count([["a"], ["a", "b", "c"], ["a", "b"]]) == 3
    assert column_count([]) == 0
