"""tinycsv: a hand-written CSV reader and writer with type inference."""

from .infer import column_kind, convert, convert_rows, infer_columns, infer_value, is_float, is_int
from .infer import kind_of, kind_rank, widen
from .reader import DEFAULT, CSVError, Dialect, column_count, parse, parse_line, skip_blank
from .records import check_header, column_values, read_dicts, row_to_dict, select_columns
from .records import write_dicts
from .writer import QUOTE_ALL, QUOTE_MINIMAL, QUOTE_NONNUMERIC, format_field, format_row
from .writer import needs_quotes, quote, to_text, write
