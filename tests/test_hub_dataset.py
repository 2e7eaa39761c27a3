"""Upstream SWE-smith from the hub: Parquet shards at a pinned commit, ingested offline through
the hub's real on-disk cache layout (huggingface_hub's snapshot_download with HF_HUB_OFFLINE=1),
malformed shards and rows included. Every row is accepted or rejected by category, and what is
accepted equals what the JSONL path accepts for the same records."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from forgeline import cli
from forgeline.tasks import hub_dataset as hd
from forgeline.tasks import ingest as ing

ROOT = Path(__file__).resolve().parents[1]
MAX = 4096
REPO_ID = "SWE-bench/SWE-smith"
COMMIT = "3f1c2d4e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
PATCH = "diff --git a/{f}.py b/{f}.py\n--- a/{f}.py\n+++ b/{f}.py\n@@ -1 +1 @@\n-return a + b\n+return a - b\n"


def upstream(iid: str, name: str = "ledgerkit", owner: str = "forgeline", **over) -> dict:
    """A record as upstream publishes it: repo `swesmith/<owner>__<name>.<commit8>` (the owner
    `forgeline` maps to the snapshot folder <name>, any other to <owner>__<name>)."""
    rec = {"instance_id": f"{owner}__{name}.1a2b3c4d.func_pm_op_swap__{iid}",
           "repo": f"swesmith/{owner}__{name}.1a2b3c4d",
           "patch": PATCH.format(f=iid), "FAIL_TO_PASS": [f"tests/test_a.py::test_{iid}"],
           "PASS_TO_PASS": ["tests/test_a.py::test_ok"], "created_at": "2025-04-01T12:00:00",
           "image_name": f"swebench/swesmith.x86_64.{owner}_1776_{name}.1a2b3c4d",
           "base_commit": "1a2b3c4d" + "0" * 32, "problem_statement": f"Subtraction in {iid}."}
    rec.update(over)
    return rec


def shard_no(source: str) -> str:
    """`hf://.../data/train-00001-of-00005.parquet` -> "00001"."""
    return source.rsplit("-of-", 1)[0][-5:]


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=row_group_size)
    return sink.getvalue().to_pybytes()


def make_fake_dataset_cache(cache: Path, repo_id: str, commit: str, files: dict[str, bytes]) -> Path:
    """The hub's on-disk layout of one dataset snapshot: LFS blobs (the Parquet shards) named by
    their sha256, git blobs by their sha1, snapshots/<commit>/<path> as relative symlinks to
    them, refs/main holding the commit, and the commit's tree listing."""
    repo = cache / ("datasets--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    tree = {}
    for rel, data in sorted(files.items()):
        lfs = rel.endswith(".parquet")
        etag = hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data)
        (repo / "blobs" / etag).write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(*[".."] * (len(Path(rel).parts) + 1)) / "blobs" / etag)
        tree[rel] = {"size": len(data), "blob_id": _git_blob_sha1(data)}
        if lfs:
            tree[rel].update(lfs_sha256=etag, lfs_size=len(data))
    (repo / "trees").mkdir()
    (repo / "trees" / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": tree}))
    return snap


GOOD = [upstream("aa01"), upstream("aa02", FAIL_TO_PASS=["tests/test_a.py::test_x", "tests/test_a.py::test_y"]),
        upstream("bb01", name="semver"), upstream("cc01", name="elsewhere", owner="acme")]


def malformed_rows_shard() -> tuple[bytes, dict[int, str]]:
    """One shard whose rows go wrong one by one; row number -> expected category."""
    rows = [upstream("dd01"),                                            # 1 accepted
            upstream("dd02", FAIL_TO_PASS="not a list"),                 # 2 wrong_type
            upstream("dd03", image_name=None),                           # 3 wrong_type (null)
            upstream("dd04", problem_statement=""),                      # 4 empty_problem_statement
            upstream("dd05", patch=PATCH.format(f="x" * 5000)),          # 5 too_large (not converted)
            upstream("dd06", problem_statement="\"" * 1900),             # 6 too_large (JSON escapes)
            upstream("dd07"),                                            # 7 not_finite (score NaN)
            upstream("dd08"),                                            # 8 not_utf8 (bytes)
            upstream("aa01"),                                            # 9 duplicate of shard 0's
            upstream("dd10", FAIL_TO_PASS=[])]                           # 10 empty_fail_to_pass
    for rec in rows:  # SWE-bench stores test lists as JSON strings: accepted too
        rec["FAIL_TO_PASS"] = rec["FAIL_TO_PASS"] if isinstance(rec["FAIL_TO_PASS"], str) \
            else json.dumps(rec["FAIL_TO_PASS"])
        rec["PASS_TO_PASS"] = json.dumps(rec["PASS_TO_PASS"])
    table = pa.Table.from_pylist(rows)
    table = table.append_column("score", pa.array([1.0] * 6 + [float("nan")] + [1.0] * 3))
    # bytes that are not UTF-8 inside a string column (pyarrow writes what it is given)
    notes = pa.array([b"ok"] * 7 + [b"caf\xe9"] + [b"ok"] * 2, type=pa.binary()).view(pa.string())
    table = table.append_column("hints_text", notes)
    expected = {2: "wrong_type", 3: "wrong_type", 4: "empty_problem_statement", 5: "too_large",
                6: "too_large", 7: "not_finite", 8: "not_utf8", 9: "duplicate", 10: "empty_fail_to_pass"}
    return parquet_bytes(table, row_group_size=3), expected


def shards() -> tuple[dict[str, bytes], dict[tuple[str, int], str]]:
    good = parquet_bytes(pa.Table.from_pylist(GOOD), row_group_size=2)
    bad_rows, expected_rows = malformed_rows_shard()
    no_image = pa.Table.from_pylist([upstream("ee01"), upstream("ee02")]).drop_columns(["image_name"])
    int_tests = pa.Table.from_pylist([{**upstream("ff01"), "FAIL_TO_PASS": 3}])
    files = {
        "data/train-00000-of-00005.parquet": good,
        "data/train-00001-of-00005.parquet": bad_rows,
        "data/train-00002-of-00005.parquet": parquet_bytes(no_image),
        "data/train-00003-of-00005.parquet": parquet_bytes(int_tests),
        "data/train-00004-of-00005.parquet": good[: len(good) // 2],  # cut off mid-write
        "README.md": b"---\nlicense: mit\n---\n# SWE-smith\n",
    }
    expected = {("00001", row): cat for row, cat in expected_rows.items()}
    expected.update({("00002", 1): "missing_field", ("00002", 2): "missing_field",
                     ("00003", 1): "wrong_type", ("00004", 1): "bad_parquet_file"})
    return files, expected


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    files, _ = shards()
    cache = tmp_path / "hub"
    snap = make_fake_dataset_cache(cache, REPO_ID, COMMIT, files)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return snap


def test_resolve_offline_lists_only_the_configured_shards(hub_cache):
    folder = hd.resolve_dataset(REPO_ID, COMMIT)
    assert folder == hub_cache
    assert hd.parquet_files(folder) == [f"data/train-0000{i}-of-00005.parquet" for i in range(5)]
    assert hd.parquet_files(folder, ["data/train-00000-*.parquet"]) == ["data/train-00000-of-00005.parquet"]
    with pytest.raises(hd.HubError, match="not in"):  # a commit that is not cached
        hd.resolve_dataset(REPO_ID, "1" * 40)
    shard = hub_cache / "data/train-00000-of-00005.parquet"
    shard.resolve().write_bytes(shard.read_bytes()[:-1] + b"\0")  # a damaged download
    with pytest.raises(hd.HubError, match="corrupted"):
        hd.resolve_dataset(REPO_ID, COMMIT)


@pytest.mark.parametrize("revision", ["main", "v1.0", COMMIT[:12], COMMIT.upper(), None])
def test_non_commit_revisions_are_refused(revision):
    with pytest.raises(hd.RevisionError, match="commit") as info:
        hd.resolve_dataset(REPO_ID, revision)
    assert "huggingface.co/datasets/SWE-bench/SWE-smith/commits" in str(info.value)


def test_every_row_is_accepted_or_rejected_by_category(hub_cache):
    files, expected = shards()
    reads = hd.hub_reads(hub_cache, hd.parquet_files(hub_cache), REPO_ID, COMMIT, MAX)
    result = ing.ingest(reads)
    got = {(shard_no(r["source"]), r["line"]): r["category"] for r in result.rejections}
    assert got == expected
    assert all(r["source"].startswith(f"hf://datasets/{REPO_ID}@{COMMIT}/data/") for r in result.rejections)
    assert sorted(i["instance_id"][-4:] for i in result.accepted) == ["aa01", "aa02", "bb01", "cc01", "dd01"]
    by_row = {(shard_no(r["source"]), r["line"]): r for r in result.rejections}
    assert by_row[("00001", 8)]["reason"].startswith("hints_text: not UTF-8: byte 0xe9")
    assert by_row[("00001", 5)]["instance_id"].endswith("dd05")  # named without converting the row
    assert "train-00000-of-00005.parquet:1" in by_row[("00001", 9)]["reason"]
    assert "none of its records were ingested" in by_row[("00004", 1)]["reason"]
    sources = result.report["sources"]
    assert sources[hd.source_name(REPO_ID, COMMIT, "data/train-00001-of-00005.parquet")] == {
        "format": "parquet", "records": 10, "accepted": 1, "rejected": 9, "blank_lines": 0, "rows": 10}
    assert result.report["rejected_by_category"]["missing_field"] == 2
    # the string test lists of shard 1 were decoded to lists, the extra columns kept
    dd01 = next(i for i in result.accepted if i["instance_id"].endswith("dd01"))
    assert dd01["FAIL_TO_PASS"] == ["tests/test_a.py::test_dd01"] and dd01["score"] == 1.0


def test_accepted_rows_equal_the_jsonl_paths(hub_cache, tmp_path):
    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    from_jsonl = ing.ingest_files([jsonl], MAX)
    from_hub = ing.ingest(hd.hub_reads(hub_cache, ["data/train-00000-of-00005.parquet"], REPO_ID, COMMIT, MAX))
    assert from_hub.accepted == from_jsonl.accepted and len(from_hub.accepted) == len(GOOD)
    # a local Parquet file in extra_sources is read the same way
    local = ing.ingest_files([hub_cache / "data/train-00000-of-00005.parquet"], MAX)
    assert local.accepted == from_jsonl.accepted


def test_max_records_caps_rows_over_the_shards(hub_cache):
    files = hd.parquet_files(hub_cache)
    result = ing.ingest(hd.hub_reads(hub_cache, files, REPO_ID, COMMIT, MAX, max_records=6))
    rows = {shard_no(name): s["rows"] for name, s in result.report["sources"].items()}
    assert rows == {"00000": 4, "00001": 2}  # 4 + 2 rows, the later shards not opened
    assert result.report["records"] == 6


def _params(tmp_path: Path, hub: dict) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["tasks"]["ingest"].update(max_record_bytes=MAX, hub=hub)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_ingest_extra_reads_the_hub_dataset_and_shards_it(hub_cache, tmp_path, capsys):
    """The stage: upstream repos `swesmith/acme__<name>.<commit8>` land in <name>'s shard;
    rejections name hf:// files; a repository not configured is reported, not dropped."""
    params = _params(tmp_path, {"repo_id": REPO_ID, "revision": COMMIT,
                                "allow_patterns": ["data/*.parquet"], "max_records": None})
    out = tmp_path / "extra"
    argv = ["ingest-extra", "--config", str(params), "--out-dir", str(out),
            "--manifest", str(out / "manifest.json")]
    assert cli.main(argv) == 0
    read = lambda p: [json.loads(x) for x in p.read_text().splitlines()]  # noqa: E731
    assert [r["instance_id"][-4:] for r in read(out / "ledgerkit.jsonl")] == ["aa01", "aa02", "dd01"]
    assert [r["instance_id"][-4:] for r in read(out / "semver.jsonl")] == ["bb01"]
    unattributed = read(out / "unattributed.jsonl")
    assert ("acme__elsewhere", "unconfigured_repo") in {(u["repo"], u["category"]) for u in unattributed}
    report = json.loads((out / "report.json").read_text())
    assert report["hub"] == {"repo_id": REPO_ID, "revision": COMMIT, "rows": 17, "max_records": None,
                             "capped": False,
                             "files": [f"data/train-0000{i}-of-00005.parquet" for i in range(5)]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["notes"]["hub"]["revision"] == COMMIT and len(manifest["inputs"]) == 5
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "manifest.json"}
    assert cli.main(argv) == 0  # same inputs + params => byte-identical outputs
    assert first == {p.name: p.read_bytes() for p in out.iterdir() if p.name != "manifest.json"}

    for bad, message in (({"repo_id": REPO_ID, "revision": "main"},  # the schema, at parse time
                          "tasks.ingest.hub.revision: 'main' does not match"),
                         ({"repo_id": REPO_ID, "revision": None}, "not a full commit hash"),
                         ({"repo_id": REPO_ID, "revision": "2" * 40}, "not in"),
                         ({"repo_id": REPO_ID, "revision": COMMIT, "allow_patterns": ["x/*.parquet"]},
                          "no Parquet file")):
        capsys.readouterr()
        params = tmp_path / "bad.yaml"
        data = yaml.safe_load((tmp_path / "params.yaml").read_text())
        data["tasks"]["ingest"]["hub"].update(bad)  # key by key, as an overlay would
        params.write_text(yaml.safe_dump(data))
        code = cli.main(["ingest-extra", "--config", str(params), "--out-dir", str(tmp_path / "x"),
                         "--manifest", str(tmp_path / "x" / "m.json")])
        assert code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / "x").exists()


def test_a_shard_broken_part_way_is_one_rejection_and_none_of_its_rows_enter(tmp_path, monkeypatch):
    """The first row group reads, the second's page header is garbage: the rows already read
    are withdrawn (a broken file is not half-trusted), and the rejection says where it broke."""
    monkeypatch.setattr(ing, "PARQUET_BATCH_ROWS", 2)  # one batch per row group here
    rows = [upstream(f"gg{i:02d}") for i in range(4)]
    path = tmp_path / "broken.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2, compression="none")
    offset = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
    result = ing.ingest_files([path], MAX)
    assert result.accepted == []
    assert [(r["category"], r["line"]) for r in result.rejections] == [("bad_parquet_file", 3)]
    assert "after 2 rows" in result.rejections[0]["reason"]
    assert result.report["sources"][str(path)]["rows"] == 2
