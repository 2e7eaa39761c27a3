"""Ingestion: read SWE-smith-format files; every record either enters or is rejected with a reason.

Input: JSONL files (one instance per line) or JSON arrays (told apart by the first
non-whitespace byte, after an optional UTF-8 BOM). Output: the accepted instances, normalised by
`schema.normalize_instance` and sorted by instance_id (extra fields such as bug_type or mutation
are kept), plus one rejection record per record that did not enter:

    {"source": "path", "line": 12, "instance_id": "id or null", "category": "bad_json",
     "reason": "..."}

`line` is 1-based; for a JSON array it is the line where the record starts. Blank lines are not
records and are skipped. Nothing is dropped silently and malformed input never crashes the stage.
Rejection categories (stable keys, counted in the report):

    bad_json                 a line that is not JSON
    bad_json_file            a JSON array file that is itself broken (one rejection, the parser's
                             line/col; none of its records enter)
    truncated                the last line has no newline and does not parse (a cut-off write)
    not_utf8                 bytes that are not UTF-8
    too_large                a record over tasks.ingest.max_record_bytes (not parsed)
    wrong_type               not an object, or a field of the wrong type
    missing_field            a required field is absent
    empty_field              instance_id / repo / patch / image_name is blank
    empty_problem_statement  nothing to pose to an agent
    empty_fail_to_pass       no test shows the bug
    duplicate                an instance_id already accepted (the first accepted one wins)
    invalid                  the check itself failed unexpectedly (a schema bug; logged)

NaN/Infinity are rejected as bad_json: the outputs are strict canonical JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from forgeline.config import ConfigError
from forgeline.provenance import Manifest, gc_paused, stage_sources, write_json, write_jsonl
from forgeline.tasks.schema import InstanceError, normalize_instance, repo_key

log = logging.getLogger(__name__)

BOM = b"\xef\xbb\xbf"
_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of non-UTF-8 bytes
_SKIP_CHUNK = 1 << 20  # bytes read at a time while skipping an over-long line


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
    """What one source held: parsed records [(line, record)], rejections, and counts."""

    source: str
    format: str = "jsonl"
    records: list[tuple[int, object]] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    blank_lines: int = 0


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
        stats = {"format": read.format, "records": 0, "accepted": 0, "rejected": 0,
                 "blank_lines": read.blank_lines}
        per_source[read.source] = stats
        found = list(read.rejections)
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
            if iid in accepted:
                first_src, first_line, first = accepted[iid]
                same = "same" if first == inst else "different"
                found.append(rejection(
                    read.source, line, "duplicate",
                    f"duplicate instance_id; first seen at {first_src}:{first_line} "
                    f"({same} content); the first wins", iid, repo_key(inst["repo"])))
                continue
            accepted[iid] = (read.source, line, inst)
            stats["accepted"] += 1
        found.sort(key=lambda r: r["line"])
        stats["rejected"] = len(found)
        stats["records"] = stats["accepted"] + stats["rejected"]
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


def ingest_files(paths: Iterable[str | Path], max_record_bytes: int) -> IngestResult:
    """`ingest` over files on disk, each named in the rejections by the path as given."""
    def reads() -> Iterator[SourceRead]:
        for path in paths:
            with open(path, "rb") as f:
                yield read_source(str(path), f, max_record_bytes)
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
    section = cfg.section("tasks.ingest")
    missing = [s for s in args.sources if not Path(s).is_file()]
    if missing:
        raise ConfigError(f"ingest: source file(s) not found: {', '.join(missing)}")
    manifest = Manifest(stage="ingest", params={"repo": args.repo, "tasks.ingest": section},
                        inputs=args.sources, code=stage_sources(__name__))
    with manifest.timed("ingest"):
        result = for_repo(ingest_files(args.sources, int(section["max_record_bytes"])), args.repo)
    with manifest.timed("write"), gc_paused():
        write_jsonl(args.out, result.accepted)
        write_jsonl(args.rejections, result.rejections)
        write_json(args.report, result.report)
    manifest.notes = {k: result.report[k] for k in ("accepted", "rejected", "rejected_by_category")}
    manifest.write(args.manifest, outputs=[args.out, args.rejections, args.report])
    log.info("%s: %s", args.repo, summary_line({**result.report, "repos": 1}))
