"""Ingestion: read SWE-smith-format files; every record either enters or is rejected with a reason.

Input: JSONL files (one instance per line) or JSON arrays (told apart by the first
non-whitespace byte, after an optional UTF-8 BOM), or Parquet files (`*.parquet`, one instance
per row: how the hub publishes SWE-smith, see `forgeline.tasks.hub_dataset`; read batch by
batch, so a large file is never converted to Python whole). Output: the accepted instances, normalised by
`schema.normalize_instance` and sorted by instance_id (extra fields such as bug_type or mutation
are kept), plus one rejection record per record that did not enter:

    {"source": "path", "line": 12, "instance_id": "id or null", "category": "bad_json",
     "reason": "..."}

`line` is 1-based; for a JSON array it is the line where the record starts, for Parquet the
row. Blank lines are not records and are skipped. Nothing is dropped silently and malformed input
never crashes the stage. Rejection categories (stable keys, counted in the report):

    bad_json                 a line that is not JSON
    bad_json_file            a JSON array file that is itself broken (one rejection, the parser's
                             line/col; none of its records enter)
    bad_parquet_file         a Parquet file that cannot be read to its end (truncated, corrupt,
                             not Parquet): one rejection naming the file; none of its records enter
    truncated                the last line has no newline and does not parse (a cut-off write)
    not_utf8                 bytes that are not UTF-8
    not_finite               a NaN or infinite number (Parquet; in JSON text it is bad_json)
    too_large                a record over tasks.ingest.max_record_bytes (not parsed); for Parquet
                             the size of the record's canonical JSON
    wrong_type               not an object, or a field of the wrong type (for Parquet also a value
                             JSON cannot hold, such as a decimal)
    missing_field            a required field is absent
    empty_field              instance_id / repo / patch / image_name is blank
    empty_problem_statement  nothing to pose to an agent
    empty_fail_to_pass       no test shows the bug
    duplicate                an instance_id already accepted (the first accepted one wins)
    invalid                  the check itself failed unexpectedly (a schema bug; logged)

NaN/Infinity are rejected as bad_json: the outputs are strict canonical JSON. A Parquet row
becomes the object {column: value}, every column of the file present (a null cell is null);
timestamps and dates become ISO 8601 strings and binary cells UTF-8 strings.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

from forgeline.config import ConfigError, as_dict
from forgeline.provenance import (Manifest, canonical_json, gc_paused, write_json,
                                  write_jsonl)
from forgeline.tasks.schema import InstanceError, normalize_instance, repo_key

log = logging.getLogger(__name__)

BOM = b"\xef\xbb\xbf"
_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of non-UTF-8 bytes
_SKIP_CHUNK = 1 << 20  # bytes read at a time while skipping an over-long line
PARQUET_SUFFIX = ".parquet"
PARQUET_BATCH_ROWS = 1024  # rows converted to Python at a time


class _NotStrictJSON(ValueError):
    pass


def _no_nan(name: str) -> float:
    raise _NotStrictJSON(f"{name} is not valid JSON")


# Python's json accepts NaN/Infinity; the canonical outputs must stay strict JSON
_DECODER = json.JSONDecoder(parse_constant=_no_nan)




def rejection(source: str, line: int, category: str, reason: str,
              instance_id: str | None = None, repo: str | None = None) -> dict:
    """One rejection record (the format of rejections.jsonl)."""
    return {"source": source, "line": line, "instance_id": instance_id, "repo": repo,
            "category": category, "reason": reason}


def _known_id(record: object) -> str | None:
    if isinstance(record, dict) and isinstance(record.get("instance_id"), str):
        return record["instance_id"]
    return None


def _known_repo(record: object) -> str | None:
    if isinstance(record, dict) and isinstance(record.get("repo"), str) and record["repo"].strip():
        return repo_key(record["repo"])
    return None


# -- reading one source --------------------------------------------------------------------

@dataclass
class SourceRead:
    """What one source held: parsed records [(line, record)], rejections, and counts.

    `records` may be a generator (Parquet) that appends to `rejections` while it runs and sets
    `broken` (the one rejection that replaces all of the source's others) when the file turns
    out to be unreadable part-way; read both only after `records` is exhausted.
    """

    source: str
    format: str = "jsonl"
    records: Iterable[tuple[int, object]] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    blank_lines: int = 0
    broken: dict | None = None
    rows: int = 0  # Parquet: rows read (a cap, see read_parquet, stops it early)


def detect_format(head: bytes) -> str:
    """'json_array' when the first non-whitespace byte (after a BOM) is '[', else 'jsonl'."""
    head = head[len(BOM):] if head.startswith(BOM) else head
    stripped = head.lstrip(b" \t\r\n")
    return "json_array" if stripped.startswith(b"[") else "jsonl"


def iter_lines(stream: BinaryIO,
               max_record_bytes: int) -> Iterator[tuple[int, bytes | None, int, bool]]:
    """Yield (line number, content, size in bytes, ended with a newline) for each line.

    The content has its line ending (LF or CRLF) removed. A line longer than max_record_bytes
    is skipped in chunks and yielded with content None, so it never sits in memory whole.
    """
    limit = max_record_bytes + 2  # room for the CRLF of a line exactly at the limit
    lineno = 0
    while True:
        chunk = stream.readline(limit)
        if not chunk:
            return
        lineno += 1
        if chunk.endswith(b"\n") or len(chunk) < limit:
            terminated = chunk.endswith(b"\n")
            content = chunk[:-1] if terminated else chunk
            if content.endswith(b"\r"):
                content = content[:-1]
            if len(content) > max_record_bytes:
                yield lineno, None, len(content), terminated
            else:
                yield lineno, content, len(content), terminated
            continue
        size, terminated = len(chunk), False
        while True:  # over-long: skip to the end of the line without keeping it
            rest = stream.readline(min(limit, _SKIP_CHUNK))
            if not rest:
                break
            if rest.endswith(b"\n"):
                size += len(rest) - 1
                terminated = True
                break
            size += len(rest)
        yield lineno, None, size, terminated


def _utf8_error(exc: UnicodeDecodeError) -> str:
    bad = exc.object[exc.start:exc.start + 1].hex()
    return f"not UTF-8: byte 0x{bad} at column {exc.start + 1} ({exc.reason})"


def read_jsonl(source: str, stream: BinaryIO, max_record_bytes: int) -> SourceRead:
    """Parse a JSONL stream; each non-blank line becomes a record or a rejection."""
    out = SourceRead(source, "jsonl")
    for lineno, content, size, terminated in iter_lines(stream, max_record_bytes):
        if content is None:
            out.rejections.append(rejection(
                source, lineno, "too_large",
                f"record of {size:,} bytes exceeds tasks.ingest.max_record_bytes "
                f"({max_record_bytes:,}); not parsed"))
            continue
        if lineno == 1 and content.startswith(BOM):
            content = content[len(BOM):]
        if not content.strip():
            out.blank_lines += 1
            continue
        try:
            text = content.decode("utf-8")
            record = _DECODER.decode(text)
        except _NotStrictJSON as exc:
            out.rejections.append(rejection(source, lineno, "bad_json", f"not JSON: {exc}"))
            continue
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            detail = (_utf8_error(exc) if isinstance(exc, UnicodeDecodeError)
                      else f"not JSON: {exc.msg} at column {exc.colno}")
            if not terminated:  # the writer stopped mid-record
                out.rejections.append(rejection(
                    source, lineno, "truncated",
                    f"last line has no newline and does not parse ({detail}); "
                    f"the file looks cut off"))
            elif isinstance(exc, UnicodeDecodeError):
                out.rejections.append(rejection(source, lineno, "not_utf8", detail))
            else:
                out.rejections.append(rejection(source, lineno, "bad_json", detail))
            continue
        out.records.append((lineno, record))
    return out


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()


def read_json_array(source: str, data: bytes, max_record_bytes: int) -> SourceRead:
    """Parse a JSON array document; each element becomes a record (at its starting line).

    A document that is not a valid JSON array is one `bad_json_file` rejection at the parser's
    line/column, and none of its elements enter (a broken file is not half-trusted).
    Non-UTF-8 bytes inside one element reject that element only (`not_utf8`).
    """
    out = SourceRead(source, "json_array")
    if data.startswith(BOM):
        data = data[len(BOM):]
    text = data.decode("utf-8", "surrogateescape")
    decoder = _DECODER
    spans: list[tuple[int, int, object]] = []
    try:
        pos = _skip_ws(text, 0)
        if text[pos:pos + 1] != "[":
            raise json.JSONDecodeError("Expecting '['", text, pos)
        pos = _skip_ws(text, pos + 1)
        if text[pos:pos + 1] == "]":
            pos += 1
        else:
            while True:
                if pos >= len(text):
                    raise json.JSONDecodeError("Unterminated array (file cut off?)", text, pos)
                value, end = decoder.raw_decode(text, pos)
                spans.append((pos, end, value))
                pos = _skip_ws(text, end)
                sep = text[pos:pos + 1]
                if sep == ",":
                    pos = _skip_ws(text, pos + 1)
                elif sep == "]":
                    pos += 1
                    break
                elif not sep:
                    raise json.JSONDecodeError("Unterminated array (file cut off?)", text, pos)
                else:
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _skip_ws(text, pos)
        if pos != len(text):
            raise json.JSONDecodeError("Extra data after the array", text, pos)
    except _NotStrictJSON as exc:
        line = text.count("\n", 0, pos) + 1
        out.rejections.append(rejection(
            source, line, "bad_json_file",
            f"JSON array file is not valid JSON: {exc} in the record at line {line}; none of "
            f"its records were ingested"))
        return out
    except json.JSONDecodeError as exc:
        out.rejections.append(rejection(
            source, exc.lineno, "bad_json_file",
            f"JSON array file is not valid JSON: {exc.msg} at line {exc.lineno} column "
            f"{exc.colno}; none of its records were ingested"))
        return out
    line, last = 1, 0
    for start, end, value in spans:
        line += text.count("\n", last, start)
        last = start
        size = end - start
        if size * 4 > max_record_bytes:  # chars <= bytes <= 4 * chars: only then count bytes
            size = len(text[start:end].encode("utf-8", "surrogateescape"))
        if size > max_record_bytes:
            out.rejections.append(rejection(
                source, line, "too_large",
                f"record of {size:,} bytes exceeds tasks.ingest.max_record_bytes "
                f"({max_record_bytes:,})", _known_id(value)))
        elif _SURROGATE.search(text, start, end):
            bad = _SURROGATE.search(text, start, end)
            col = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
            out.rejections.append(rejection(
                source, line, "not_utf8",
                f"not UTF-8: byte 0x{ord(bad.group()) - 0xdc00:02x} at line "
                f"{line + text.count(chr(10), start, bad.start())} column {col}",
                _known_id(value)))
        else:
            out.records.append((line, value))
    return out


def _first_byte(stream: BinaryIO) -> bytes:
    """The first byte that is not whitespace (after a BOM), b"" if none; the stream is rewound."""
    start = stream.tell()
    first, at_start = b"", True
    while chunk := stream.read(1 << 16):
        if at_start and chunk.startswith(BOM):
            chunk = chunk[len(BOM):]
        at_start = False
        stripped = chunk.lstrip(b" \t\r\n")
        if stripped:
            first = stripped[:1]
            break
    stream.seek(start)
    return first


def read_source(source: str, stream: BinaryIO, max_record_bytes: int) -> SourceRead:
    """Read one source from a seekable binary stream, JSONL or JSON array (`detect_format`)."""
    if detect_format(_first_byte(stream)) == "json_array":
        return read_json_array(source, stream.read(), max_record_bytes)
    return read_jsonl(source, stream, max_record_bytes)


# -- Parquet -------------------------------------------------------------------------------

class _BadValue(ValueError):
    def __init__(self, category: str, reason: str):
        super().__init__(reason)
        self.category = category


def _json_value(value: Any, where: str) -> Any:
    """`value` (a cell as pyarrow gives it) as a strict JSON value, or _BadValue."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _BadValue("not_finite", f"{where}: {value!r} is not a finite number")
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _BadValue("not_utf8", f"{where}: not UTF-8: byte 0x{value[exc.start:exc.start + 1].hex()} "
                                        f"at byte {exc.start + 1} ({exc.reason})") from None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _json_value(v, f"{where}.{k}") for k, v in value.items()}
    raise _BadValue("wrong_type", f"{where}: a {type(value).__name__} value has no JSON form")


def _plain_type(typ) -> bool:
    """True for Arrow types whose Python values are already strict JSON (no walk needed)."""
    import pyarrow.types as pat

    if pat.is_list(typ) or pat.is_large_list(typ):
        return _plain_type(typ.value_type)
    return (pat.is_string(typ) or pat.is_large_string(typ) or pat.is_integer(typ)
            or pat.is_boolean(typ) or pat.is_null(typ))


def _text_bytes(batch) -> list[int]:
    """Per row, the bytes of its string/binary cells (top level and in lists): a lower bound
    of its JSON size, known before any cell is converted to Python."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.types as pat

    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        typ, parents = column.type, None
        if pat.is_list(typ) or pat.is_large_list(typ):
            parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
            column, typ = pc.list_flatten(column), typ.value_type
        if not (pat.is_string(typ) or pat.is_large_string(typ) or pat.is_binary(typ)
                or pat.is_large_binary(typ)) or not len(column):
            continue
        lengths = pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False)
        if parents is None:
            sizes += lengths.astype(np.int64)
        else:
            sizes += np.bincount(parents, weights=lengths, minlength=batch.num_rows).astype(np.int64)
    return sizes.tolist()


def _cell_text(batch, name: str, row: int) -> str | None:
    """One short string cell (an id in a rejection), None when absent or not a string."""
    import pyarrow.types as pat

    index = batch.schema.get_field_index(name)
    if index < 0 or not (pat.is_string(batch.schema.types[index])
                         or pat.is_large_string(batch.schema.types[index])):
        return None
    try:
        value = batch.column(index)[row].as_py()
    except UnicodeDecodeError:
        return None
    return value if isinstance(value, str) and len(value) <= 1024 else None


def _batch_rows(batch) -> list[dict | _BadValue]:
    """The batch's rows as dicts; a row that cannot be converted (bytes that are not UTF-8 in a
    string column) becomes a _BadValue naming the column, the other rows are kept."""
    try:
        return batch.to_pylist()
    except (UnicodeDecodeError, ValueError, TypeError, OverflowError):
        pass
    rows: list[dict | _BadValue] = []
    names = batch.schema.names
    for i in range(batch.num_rows):
        row: dict | _BadValue = {}
        for name, column in zip(names, batch.columns):
            try:
                row[name] = column[i].as_py()
            except UnicodeDecodeError as exc:
                row = _BadValue("not_utf8", f"{name}: not UTF-8: byte "
                                            f"0x{exc.object[exc.start:exc.start + 1].hex()} at byte "
                                            f"{exc.start + 1} ({exc.reason})")
                break
            except (ValueError, TypeError, OverflowError) as exc:
                row = _BadValue("wrong_type", f"{name}: cannot be converted ({exc})")
                break
        rows.append(row)
    return rows


def read_parquet(source: str, path: str | Path, max_record_bytes: int,
                 max_rows: int | None = None) -> SourceRead:
    """Read a Parquet file lazily: its `records` is a generator of (row, record) that converts
    PARQUET_BATCH_ROWS rows at a time, so the file never sits in memory as Python objects whole.

    A row too large (its string bytes already over max_record_bytes: not converted; else its
    canonical JSON), with a NaN/infinite number, non-UTF-8 bytes or a value JSON cannot hold is
    rejected alone. A file that cannot be opened or read to its end sets `broken`: one
    `bad_parquet_file` rejection, and none of its rows enter. `max_rows` stops after that many
    rows (the hub's max_records); `rows` counts the rows read.
    """
    out = SourceRead(source, "parquet")

    def rows() -> Iterator[tuple[int, object]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        row = 0
        try:
            with pq.ParquetFile(path) as pf:
                for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, use_threads=False):
                    if max_rows is not None and row >= max_rows:
                        break
                    if max_rows is not None and row + batch.num_rows > max_rows:
                        batch = batch.slice(0, max_rows - row)
                    walk = [name for name, typ in zip(batch.schema.names, batch.schema.types)
                            if not _plain_type(typ)]
                    sizes = _text_bytes(batch)
                    big = [i for i, n in enumerate(sizes) if n > max_record_bytes]
                    small = batch.filter(pa.array([n <= max_record_bytes for n in sizes])) if big else batch
                    converted = iter(_batch_rows(small))
                    for i in range(batch.num_rows):
                        row += 1
                        if sizes[i] > max_record_bytes:
                            out.rejections.append(rejection(
                                source, row, "too_large",
                                f"record of more than {sizes[i]:,} bytes exceeds "
                                f"tasks.ingest.max_record_bytes ({max_record_bytes:,}); not converted",
                                _cell_text(batch, "instance_id", i),
                                _known_repo({"repo": _cell_text(batch, "repo", i)})))
                            continue
                        record = next(converted)
                        try:
                            if isinstance(record, _BadValue):
                                raise record
                            for name in walk:
                                record[name] = _json_value(record[name], name)
                            size = len(canonical_json(record).encode("utf-8"))
                        except _BadValue as exc:
                            out.rejections.append(rejection(source, row, exc.category, str(exc),
                                                            _known_id(record), _known_repo(record)))
                            continue
                        if size > max_record_bytes:
                            out.rejections.append(rejection(
                                source, row, "too_large",
                                f"record of {size:,} bytes exceeds tasks.ingest.max_record_bytes "
                                f"({max_record_bytes:,})", _known_id(record), _known_repo(record)))
                            continue
                        yield row, record
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...: any is a bad file
            out.broken = rejection(  # at the first row not read
                source, row + 1, "bad_parquet_file",
                f"Parquet file cannot be read ({type(exc).__name__}: {exc})"
                + (f" after {row:,} rows" if row else "") + "; none of its records were ingested")
        finally:
            out.rows = row

    out.records = rows()
    return out


def read_path(path: str | Path, max_record_bytes: int, name: str | None = None) -> SourceRead:
    """Read one file, named `name` (default: the path as given) in the rejections: Parquet by
    its suffix, else JSONL or a JSON array. A Parquet file is read lazily (`read_parquet`)."""
    name = str(path) if name is None else name
    if str(path).endswith(PARQUET_SUFFIX):
        return read_parquet(name, path, max_record_bytes)
    with open(path, "rb") as f:
        return read_source(name, f, max_record_bytes)


# -- from records to instances -------------------------------------------------------------

@dataclass
class IngestResult:
    """accepted: instances sorted by instance_id; rejections: in source order, then line."""

    accepted: list[dict]
    rejections: list[dict]
    report: dict


def ingest(reads: Iterable[SourceRead]) -> IngestResult:
    """Check every parsed record with `normalize_instance`, drop duplicates, build the report.

    Sources are taken in the order given; for a duplicated instance_id the first *accepted*
    record wins and each later one is rejected naming the first's source:line (a record that
    was itself rejected claims no id).
    """
    accepted: dict[str, tuple[str, int, dict]] = {}
    rejections: list[dict] = []
    per_source: dict[str, dict] = {}
    for read in reads:
        found: list[dict] = []
        mine: dict[str, tuple[str, int, dict]] = {}  # this source's, kept only if it reads to its end
        for line, record in read.records:
            try:
                inst = normalize_instance(record)
            except InstanceError as exc:
                found.append(rejection(read.source, line, exc.category, str(exc),
                                       _known_id(record), _known_repo(record)))
                continue
            except Exception as exc:  # a schema bug must not crash ingestion nor drop the record
                log.warning("%s:%d: normalize_instance raised %r", read.source, line, exc)
                found.append(rejection(read.source, line, "invalid",
                                       f"could not check the record: {type(exc).__name__}: {exc}",
                                       _known_id(record), _known_repo(record)))
                continue
            iid = inst["instance_id"]
            first = accepted.get(iid) or mine.get(iid)
            if first is not None:
                first_src, first_line, first_inst = first
                same = "same" if first_inst == inst else "different"
                found.append(rejection(
                    read.source, line, "duplicate",
                    f"duplicate instance_id; first seen at {first_src}:{first_line} "
                    f"({same} content); the first wins", iid, repo_key(inst["repo"])))
                continue
            mine[iid] = (read.source, line, inst)
        if read.broken is not None:  # a file unreadable part-way is not half-trusted
            found, mine = [read.broken], {}
        else:
            found = read.rejections + found
        accepted.update(mine)
        found.sort(key=lambda r: r["line"])
        stats = {"format": read.format, "records": len(mine) + len(found), "accepted": len(mine),
                 "rejected": len(found), "blank_lines": read.blank_lines}
        if read.format == "parquet":
            stats["rows"] = read.rows
        per_source[read.source] = stats
        rejections.extend(found)
    by_category = Counter(r["category"] for r in rejections)
    report = {
        "sources": per_source,
        "records": sum(s["records"] for s in per_source.values()),
        "accepted": len(accepted),
        "rejected": len(rejections),
        "rejected_by_category": dict(sorted(by_category.items())),
        "repos": len({inst["repo"] for _, _, inst in accepted.values()}),
    }
    return IngestResult([accepted[k][2] for k in sorted(accepted)], rejections, report)


def ingest_files(paths: Iterable[str | Path], max_record_bytes: int,
                 more: Iterable[SourceRead] = ()) -> IngestResult:
    """`ingest` over files on disk (JSONL, JSON array or Parquet), each named in the rejections
    by the path as given, then over `more` (e.g. `hub_dataset.hub_reads`)."""
    def reads() -> Iterator[SourceRead]:
        for path in paths:
            yield read_path(path, max_record_bytes)
        yield from more
    with gc_paused():
        return ingest(reads())


def summary_line(report: dict) -> str:
    cats = ", ".join(f"{k} {v}" for k, v in report["rejected_by_category"].items())
    return (f"ingest: {report['accepted']:,} accepted, {report['rejected']:,} rejected"
            + (f" ({cats})" if cats else "")
            + f" from {len(report['sources'])} source(s), {report['repos']} repositories")


# -- the stage -----------------------------------------------------------------------------

def for_repo(result: IngestResult, repo: str) -> IngestResult:
    """What one repository's job keeps: its accepted instances, and every rejection (its sources
    are its own generated candidates and its shard of the external files)."""
    accepted = [inst for inst in result.accepted if repo_key(inst["repo"]) == repo]
    wrong = [rejection("", 0, "wrong_repo", f"instance of repository {repo_key(inst['repo'])!r} "
                       f"in {repo!r}'s sources", inst["instance_id"], repo_key(inst["repo"]))
             for inst in result.accepted if repo_key(inst["repo"]) != repo]
    rejections = result.rejections + wrong
    report = {
        "repo": repo,
        "sources": result.report["sources"],
        "accepted": len(accepted),
        "rejected": len(rejections),
        "rejected_by_category": dict(sorted(Counter(r["category"] for r in rejections).items())),
    }
    return IngestResult(accepted, rejections, report)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="the repository whose tasks this job keeps")
    parser.add_argument("--sources", nargs="+", metavar="FILE",
                        help="this repository's SWE-smith-format files (JSONL or JSON array): its "
                             "generated candidates and its shard of tasks.ingest.extra_sources")
    parser.add_argument("--out", required=True, help="accepted instances (JSONL)")
    parser.add_argument("--rejections", required=True, help="one rejection record per line")
    parser.add_argument("--report", required=True, help="counts per source and per category")
    parser.add_argument("--manifest", required=True)


def run(cfg, args: argparse.Namespace) -> None:
    section = cfg.tasks.ingest
    missing = [s for s in args.sources if not Path(s).is_file()]
    if missing:
        raise ConfigError(f"ingest: source file(s) not found: {', '.join(missing)}")
    manifest = Manifest(stage="ingest", params={"repo": args.repo, "tasks.ingest": as_dict(section)},
                        inputs=args.sources, code=__name__)
    with manifest.timed("ingest"):
        result = for_repo(ingest_files(args.sources, int(section.max_record_bytes)), args.repo)
    with manifest.timed("write"), gc_paused():
        write_jsonl(args.out, result.accepted)
        write_jsonl(args.rejections, result.rejections)
        write_json(args.report, result.report)
    manifest.notes = {k: result.report[k] for k in ("accepted", "rejected", "rejected_by_category")}
    manifest.write(args.manifest, outputs=[args.out, args.rejections, args.report])
    log.info("%s: %s", args.repo, summary_line({**result.report, "repos": 1}))
