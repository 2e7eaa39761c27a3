"""Ingestion: every malformed record is rejected with its category and line; nothing crashes."""
from __future__ import annotations

import gc
import io
import json
from pathlib import Path

import pytest
import yaml

from forgeline import cli
from forgeline.tasks import ingest as ing

ROOT = Path(__file__).resolve().parents[1]
MAX = 4096  # max_record_bytes in these tests (the schema's minimum is 1024)


def inst(iid: str, repo: str = "ledgerkit", **over) -> dict:
    rec = {"instance_id": iid, "repo": repo, "patch": f"diff --git a/{iid}.py b/{iid}.py\n",
           "FAIL_TO_PASS": [f"tests/test_a.py::test_{iid}"],
           "PASS_TO_PASS": ["tests/test_a.py::test_ok"],
           "problem_statement": f"Bug in {iid}.", "image_name": f"forgeline/{repo}:00000000",
           "base_commit": "0" * 40}
    rec.update(over)
    return rec


def line(rec) -> bytes:
    return json.dumps(rec).encode() + b"\n"


def by_line(result, source: str) -> dict[int, dict]:
    return {r["line"]: r for r in result.rejections if r["source"] == source}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """One JSONL file with a malformed record of every kind; line numbers noted per case."""
    string_lists = inst("b-strings", FAIL_TO_PASS=json.dumps(["tests/t.py::test_b"]),
                        PASS_TO_PASS=json.dumps(["tests/t.py::test_c", "tests/t.py::test_d"]))
    missing = inst("d-missing")
    del missing["patch"]
    rows = [
        line(inst("a-good")),                                            # 1
        line(string_lists),                                              # 2
        b'{"instance_id": "c-badjson", "repo": \n',                      # 3 bad_json
        line(missing),                                                   # 4 missing_field
        line(inst("e-wrongtype", repo=5)),                               # 5 wrong_type
        b"\n",                                                           # 6 blank
        b"   \t \n",                                                     # 7 blank
        line(inst("a-good", patch="diff --git a/other.py b/other.py\n")),  # 8 duplicate of 1
        line(inst("f-emptyps", problem_statement="  \n ")),              # 9 empty problem stmt
        line(inst("g-emptyf2p", FAIL_TO_PASS=[])),                       # 10 empty FAIL_TO_PASS
        line(inst("h-latin1")).replace(b"Bug in", b"Bug \xe9 in"),       # 11 not_utf8
        line(inst("i-huge", patch="x" * (3 * MAX))),                     # 12 too_large
        line(inst("j-extras", bug_type="op_swap", mutation={"line": 3})),  # 13 extras kept
        b"[1, 2, 3]\n",                                                  # 14 wrong_type
        line(inst("k-badlist", PASS_TO_PASS="not a list")),              # 15 wrong_type
        line(inst("l-emptyid", instance_id=" ")),                        # 16 empty_field
        line(inst("n-nullrepo", repo=None)),                             # 17 wrong_type
        b'{"instance_id": "o-nan", "x": NaN}\n',                          # 18 bad_json
        line(inst("m-cut"))[:60],                                        # 19 truncated (no \n)
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(rows))
    return path


def test_malformed_corpus_every_case_has_category_and_line(corpus: Path):
    result = ing.ingest_files([corpus], MAX)
    assert gc.isenabled()  # paused while loading, restored after
    src = str(corpus)
    rej = by_line(result, src)
    expected = {3: "bad_json", 4: "missing_field", 5: "wrong_type", 8: "duplicate",
                9: "empty_problem_statement", 10: "empty_fail_to_pass", 11: "not_utf8",
                12: "too_large", 14: "wrong_type", 15: "wrong_type", 16: "empty_field",
                17: "wrong_type", 18: "bad_json", 19: "truncated"}
    assert {ln: r["category"] for ln, r in rej.items()} == expected
    assert [r["instance_id"] for r in result.accepted] and \
        [r["instance_id"] for r in result.accepted] == ["a-good", "b-strings", "j-extras"]
    # reasons say what is wrong, and name what is known
    assert "patch" in rej[4]["reason"] and rej[4]["instance_id"] == "d-missing"
    assert f"{src}:1" in rej[8]["reason"] and rej[8]["instance_id"] == "a-good"
    assert "different content" in rej[8]["reason"]
    assert "0xe9" in rej[11]["reason"]
    assert "max_record_bytes" in rej[12]["reason"] and rej[12]["instance_id"] is None
    assert "column" in rej[3]["reason"]
    assert "got null" in rej[17]["reason"] and "NaN" in rej[18]["reason"]
    assert "no newline" in rej[19]["reason"]
    assert set(rej[3]) == {"source", "line", "instance_id", "repo", "category", "reason"}
    # the report counts everything: 17 records (2 blank lines are not records)
    rep = result.report
    assert rep["sources"][src] == {"format": "jsonl", "records": 17, "accepted": 3,
                                   "rejected": 14, "blank_lines": 2}
    assert rep["rejected_by_category"]["wrong_type"] == 4
    assert rep["accepted"] + rep["rejected"] == rep["records"] == 17
    # normalised and extras kept
    acc = {r["instance_id"]: r for r in result.accepted}
    assert acc["b-strings"]["PASS_TO_PASS"] == ["tests/t.py::test_c", "tests/t.py::test_d"]
    assert acc["j-extras"]["bug_type"] == "op_swap" and acc["j-extras"]["mutation"] == {"line": 3}


def test_bom_crlf_and_missing_final_newline_are_accepted(tmp_path: Path):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + line(inst("bom-1")) + line(inst("bom-2")))
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(line(inst("crlf-1"))[:-1] + b"\r\n\r\n" + line(inst("crlf-2"))[:-1] + b"\r\n")
    nonl = tmp_path / "nonl.jsonl"
    nonl.write_bytes(line(inst("nonl-1")) + line(inst("nonl-2"))[:-1])
    result = ing.ingest_files([bom, crlf, nonl], MAX)
    assert result.rejections == []
    assert [r["instance_id"] for r in result.accepted] == [
        "bom-1", "bom-2", "crlf-1", "crlf-2", "nonl-1", "nonl-2"]
    assert result.report["sources"][str(crlf)]["blank_lines"] == 1


def test_json_array_records_start_lines(tmp_path: Path):
    bad = inst("arr-bad")
    del bad["repo"]
    text = ("\ufeff  [\n"
            + json.dumps(inst("arr-2"), indent=2) + ",\n"           # starts line 2
            + json.dumps(bad, indent=2) + ",\n"
            + json.dumps(inst("arr-1")) + "\n]\n")
    path = tmp_path / "array.json"
    path.write_bytes(text.encode("utf-8"))
    bad_line = 2 + json.dumps(inst("arr-2"), indent=2).count("\n") + 1
    result = ing.ingest_files([path], MAX)
    assert [r["instance_id"] for r in result.accepted] == ["arr-1", "arr-2"]
    assert [(r["line"], r["category"], r["instance_id"]) for r in result.rejections] == [
        (bad_line, "missing_field", "arr-bad")]
    assert result.report["sources"][str(path)]["format"] == "json_array"
    assert "repo" in result.rejections[0]["reason"]


def test_json_array_duplicate_names_first_location_across_files(tmp_path: Path):
    first = tmp_path / "first.jsonl"
    first.write_bytes(line(inst("x")) + line(inst("dup")))
    second = tmp_path / "second.json"
    second.write_text(json.dumps([inst("y"), inst("dup")], indent=1))
    result = ing.ingest_files([first, second], MAX)
    [r] = result.rejections
    assert (r["source"], r["category"], r["instance_id"]) == (str(second), "duplicate", "dup")
    assert f"{first}:2" in r["reason"] and "same content" in r["reason"]
    assert r["line"] == 1 + json.dumps([inst("y")], indent=1).count("\n")


@pytest.mark.parametrize("text, line_no", [
    ('[\n{"a": 1},\n{"a": 2}\n{"a": 3}\n]', 4),        # missing comma
    ('[\n{"a": 1},\n{"a": ', 3),                       # cut off
    ('[\n{"a": 1},\n]\n', 3),                          # trailing comma
    ('[{"a": 1}] trailing', 1),                        # extra data
    ('[\n{"a": 1},\n{"a": Infinity}\n]', 3),             # not strict JSON
])
def test_broken_json_array_file_is_one_rejection(tmp_path: Path, text: str, line_no: int):
    path = tmp_path / "broken.json"
    path.write_text(text)
    result = ing.ingest_files([path], MAX)
    assert result.accepted == []
    [r] = result.rejections
    assert (r["category"], r["line"]) == ("bad_json_file", line_no)
    assert f"line {line_no}" in r["reason"] and "none of its records" in r["reason"]


def test_json_array_non_utf8_element_rejected_alone(tmp_path: Path):
    good = json.dumps(inst("ok")).encode()
    bad = json.dumps(inst("bad")).encode().replace(b"Bug in", b"Bug \xff in")
    path = tmp_path / "a.json"
    path.write_bytes(b"[\n" + good + b",\n" + bad + b"\n]\n")
    result = ing.ingest_files([path], MAX)
    assert [r["instance_id"] for r in result.accepted] == ["ok"]
    [r] = result.rejections
    assert (r["line"], r["category"], r["instance_id"]) == (3, "not_utf8", "bad")
    assert "0xff" in r["reason"]


def test_huge_line_is_skipped_in_chunks_not_read_whole():
    huge = b'{"x": "' + b"y" * (5 * MAX) + b'"}\n'

    class Spy(io.BytesIO):
        biggest = 0

        def readline(self, size=-1):
            chunk = super().readline(size)
            Spy.biggest = max(Spy.biggest, len(chunk))
            return chunk

    stream = Spy(line(inst("before")) + huge + line(inst("after")))
    read = ing.read_source("s", stream, MAX)
    assert [ln for ln, _ in read.records] == [1, 3]
    [r] = read.rejections
    assert (r["line"], r["category"]) == (2, "too_large")
    assert f"{len(huge) - 1:,} bytes" in r["reason"]
    assert Spy.biggest <= MAX + 2


def test_empty_and_whitespace_files(tmp_path: Path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    ws = tmp_path / "ws.json"
    ws.write_bytes(b"\xef\xbb\xbf \n\n  \n")
    result = ing.ingest_files([empty, ws], MAX)
    assert result.accepted == [] and result.rejections == []
    assert result.report["sources"][str(ws)]["blank_lines"] == 3


def test_detect_format():
    assert ing.detect_format(b"\xef\xbb\xbf \n [") == "json_array"
    assert ing.detect_format(b'{"a": 1}') == "jsonl"
    assert ing.detect_format(b"") == "jsonl"


def _params(tmp_path: Path, **ingest) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["tasks"]["ingest"].update(ingest)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_end_to_end(tmp_path: Path, corpus: Path, capsys):
    """External files are sharded once by repository; each repository's job ingests its
    candidates + its shard and reports every rejection of its sources."""
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps([inst("z-extra", repo="semver"), inst("y-elsewhere", repo="nowhere"),
                                 inst("x-ledger", repo="owner/ledgerkit")]))
    params = _params(tmp_path, extra_sources=[str(extra)], max_record_bytes=MAX)
    shards = tmp_path / "extra"
    assert cli.main(["ingest-extra", "--config", str(params), "--out-dir", str(shards),
                     "--manifest", str(shards / "manifest.json")]) == 0
    read = lambda p: [json.loads(x) for x in p.read_text().splitlines()]  # noqa: E731
    assert [r["instance_id"] for r in read(shards / "semver.jsonl")] == ["z-extra"]
    assert [r["instance_id"] for r in read(shards / "ledgerkit.jsonl")] == ["x-ledger"]
    unattributed = read(shards / "unattributed.jsonl")
    assert [(u["instance_id"], u["category"]) for u in unattributed] == [
        ("y-elsewhere", "unconfigured_repo")]
    assert json.loads((shards / "report.json").read_text())["unattributed"] == 1

    out = tmp_path / "out"
    argv = ["ingest", "--config", str(params), "--repo", "ledgerkit",
            "--sources", str(corpus), str(shards / "ledgerkit.jsonl"),
            "--out", str(out / "ingested.jsonl"), "--rejections", str(out / "rejections.jsonl"),
            "--report", str(out / "report.json"), "--manifest", str(out / "manifest.json")]
    assert cli.main(argv) == 0
    accepted = read(out / "ingested.jsonl")
    assert [r["instance_id"] for r in accepted] == ["a-good", "b-strings", "j-extras", "x-ledger"]
    rejections = read(out / "rejections.jsonl")
    assert len(rejections) == 14 and all(r["source"] == str(corpus) for r in rejections)
    report = json.loads((out / "report.json").read_text())
    assert report["accepted"] == 4 and report["rejected"] == 14
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "ingest" and len(manifest["outputs"]) == 3
    assert {i["path"] for i in manifest["inputs"]} == {str(corpus), str(shards / "ledgerkit.jsonl")}
    assert "ingest: 4 accepted, 14 rejected" in capsys.readouterr().err
    # same inputs + params => byte-identical outputs
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "manifest.json"}
    assert cli.main(argv) == 0
    assert first == {p.name: p.read_bytes() for p in out.iterdir() if p.name != "manifest.json"}


def test_cli_missing_source_is_a_clear_error(tmp_path: Path, capsys):
    params = _params(tmp_path, extra_sources=[str(tmp_path / "nope.jsonl")])
    assert cli.main(["ingest-extra", "--config", str(params), "--out-dir", str(tmp_path / "x"),
                     "--manifest", str(tmp_path / "x" / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "nope.jsonl" in err and "extra_sources" in err
    assert not (tmp_path / "x").exists()
