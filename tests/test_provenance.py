"""Atomic writes, digests, manifests and the code closure of a stage."""
import json
import subprocess
import sys

import pytest

from forgeline import provenance as prov


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError):
        with prov.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_no_final_file(tmp_path):
    """A process killed mid-write leaves at most a hidden temp file, never the final name."""
    target = tmp_path / "big.jsonl"
    code = ("import os, sys, time\nfrom forgeline import provenance as p\n"
            f"with p.atomic_path({str(target)!r}) as t:\n"
            "    f = open(t, 'w'); f.write('x' * 1000); f.flush()\n"
            "    os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == -9
    assert not target.exists()


def test_write_jsonl_is_canonical(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    prov.write_jsonl(a, [{"b": 1, "a": [1, 2]}])
    prov.write_jsonl(b, [{"a": [1, 2], "b": 1}])
    assert a.read_bytes() == b.read_bytes() == b'{"a":[1,2],"b":1}\n'


def test_tree_digest_ignores_caches_and_order(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    first = prov.tree_digest(tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert prov.tree_digest(tmp_path) == first
    (tmp_path / "pkg" / "m.py").write_text("x = 2\n")
    assert prov.tree_digest(tmp_path) != first


def test_manifest_records_inputs_outputs_code_and_versions(tmp_path):
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("in")
    m = prov.Manifest("demo", params={"k": 1}, seeds={"split": 7}, inputs=[inp],
                      code=prov.stage_sources("forgeline.provenance"))
    with m.timed("work"):
        out.write_text("out")
    record = m.write(tmp_path / "manifest.json", outputs=[out])
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == record
    assert record["outputs"][0]["sha256"] == prov.sha256_bytes(b"out")
    assert record["inputs"][0]["bytes"] == 2
    assert record["params"] == {"k": 1} and record["seeds"] == {"split": 7}
    assert record["code"]["forgeline"] and record["code"]["sources_sha256"]
    assert record["libraries"]["python"]
    assert "work" in record["timings"] and "wall_s" in record["timings"]


def test_manifest_refuses_missing_outputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="outputs missing"):
        prov.Manifest("demo").write(tmp_path / "m.json", outputs=[tmp_path / "nope"])


def test_stage_sources_follow_imports_only():
    files = {p.relative_to(prov.PACKAGE_ROOT).as_posix() for p in prov.stage_sources("forgeline.tasks.repos")}
    # its own module, what it imports (the sandbox interface), and the packages' __init__ files
    assert {"tasks/repos.py", "sandbox/base.py", "tasks/__init__.py", "__init__.py"} <= files
    # not other stages
    assert "tasks/split.py" not in files and "cli.py" not in files
