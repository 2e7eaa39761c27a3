"""Hostile records: every id, name and path that comes from a record is checked once, at the
edge (schema.normalize_instance, which ingest and validate both call), with a named rejection;
nothing a record says makes validation write outside its temp dirs or crash the batch."""
from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path

import pytest

from forgeline.provenance import write_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.tasks import ingest as ing
from forgeline.tasks import validate as V
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import InstanceError, instance_id, normalize_instance

SOURCE = "def add(a, b):\n    return a + b\n"
TESTS = "from beta import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
F2P = ["tests/test_beta.py::test_add"]

HOSTILE_PATHS = ["../beta/beta/__init__.py", "../../../../tmp/evil.py", "/etc/passwd",
                 "beta/../../x.py", "beta//x.py", "./beta/__init__.py", ".git/hooks/post-checkout",
                 "beta/\x00.py", "beta/a\\..\\b.py", "beta/" + "a" * 5000 + ".py", "beta/\r.py"]


def patch_for(path: str, old: str = "return a + b", new: str = "return a - b") -> str:
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,2 +1,2 @@\n"
            f" def add(a, b):\n-    {old}\n+    {new}\n")


@pytest.fixture
def beta(tmp_path) -> RepoSnapshot:
    repo = tmp_path / "repos" / "beta"
    (repo / "beta").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "beta" / "__init__.py").write_text(SOURCE)
    (repo / "tests" / "test_beta.py").write_text(TESTS)
    return RepoSnapshot.load(repo.parent, "beta")


def record(snap: RepoSnapshot, label: str, **fields) -> dict:
    rec = {"instance_id": instance_id(snap.repo_name, "func_pm_op_swap",
                                      hashlib.sha256(label.encode()).hexdigest()),
           "repo": snap.repo, "base_commit": snap.commit, "image_name": snap.image,
           "patch": patch_for("beta/__init__.py"), "FAIL_TO_PASS": F2P,
           "PASS_TO_PASS": ["tests/test_beta.py::test_zero"],
           "problem_statement": "`add(2, 3)` returns -1, I expected 5.\n"}
    rec.update(fields)
    return rec


def hostile(snap: RepoSnapshot) -> list[tuple[dict, str]]:
    """(record, the category it must be rejected with): generated, not hand-picked one by one."""
    out = []
    for i, path in enumerate(HOSTILE_PATHS):
        out.append((record(snap, f"p{i}", patch=patch_for(path)), "unsafe_patch"))
        # the same path hidden in the second file of a two-file patch, and as a rename target
        out.append((record(snap, f"q{i}", patch=patch_for("beta/__init__.py") + patch_for(path)),
                    "unsafe_patch"))
        rename = (f"diff --git a/beta/__init__.py b/{path}\nsimilarity index 100%\n"
                  f"rename from beta/__init__.py\nrename to {path}\n")
        out.append((record(snap, f"r{i}", patch=rename), "unsafe_patch"))
    link = ("diff --git a/beta/link.py b/beta/link.py\nnew file mode 120000\n--- /dev/null\n"
            "+++ b/beta/link.py\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n")
    out.append((record(snap, "link", patch=link), "unsafe_patch"))
    out.append((record(snap, "noheader", patch="@@ -1 +1 @@\n-a\n+b\n"), "unsafe_patch"))
    out.append((record(snap, "huge", patch="diff --git a/" + "b" * 100_000 + " b/x\n"), "unsafe_patch"))
    for i, iid in enumerate(["../../../../tmp/x__beta.e320739d.op__00000000", "/abs", "a/b", ".hidden",
                             "-rf", "x" * 300, "a\x00b", "a..b", "ok\nsecond"]):
        out.append((record(snap, f"i{i}", instance_id=iid), "unsafe_id"))
    for i, repo in enumerate(["../beta", "a/b/c", "swesmith/../../x", "", "/beta", "be ta"]):
        out.append((record(snap, f"repo{i}", repo=repo), "empty_field" if not repo else "unsafe_id"))
    out.append((record(snap, "image", image_name="img\nRUN rm -rf /"), "unsafe_id"))
    for i, test in enumerate(["-p evil", "--rootdir=/", "../../etc/x.py::t", "/abs.py::t",
                              "tests/t.py::t\x00", "tests/t.py::t\nx"]):
        out.append((record(snap, f"t{i}", FAIL_TO_PASS=[test]), "unsafe_test_id"))
    return out


def test_each_hostile_record_is_rejected_by_name(beta):
    for rec, category in hostile(beta):
        with pytest.raises(InstanceError) as err:
            normalize_instance(rec)
        assert err.value.category == category, (rec["instance_id"][:60], str(err.value))
    assert normalize_instance(record(beta, "good"))["FAIL_TO_PASS"] == F2P


def _tree(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


def test_hostile_records_through_ingest_and_validate_write_nothing_outside(beta, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    cases = hostile(beta)
    good = record(beta, "good")
    source = tmp_path / "in" / "records.jsonl"
    write_jsonl(source, [good] + [rec for rec, _ in cases])
    before = _tree(tmp_path)
    result = ing.ingest_files([source], 5_000_000)
    assert [r["instance_id"] for r in result.accepted] == [good["instance_id"]]
    assert len(result.rejections) == len(cases)
    # validate reads its input itself: the same checks hold there (a record that skipped ingest)
    res = V.validate_batch([good] + [rec for rec, _ in cases], beta, get_sandbox("process"),
                           V.Options(gold_runs=1, alignment=False, timeout_s=60), progress=False)
    assert [v["instance_id"] for v in res.validated] == [good["instance_id"]]
    assert all(r["check"] == "structure" for r in res.rejections)
    # a repo field that names another folder (a/b/c -> c) is another repository's record
    assert len(res.rejections) + res.report["skipped_other_repos"] == len(cases)
    after = _tree(tmp_path)
    assert after - before <= {str(p) for p in scratch.rglob("*")}, sorted(after - before)[:5]
    assert not any(scratch.iterdir())  # and the run's own temp dirs are gone
    assert not Path("/tmp/evil.py").exists()


def test_combinations_never_crash_normalize(beta):
    fields = ["instance_id", "repo", "image_name", "patch"]
    values = ["..", "/", "\x00", "a" * 70_000, "ok", "swesmith/forgeline__beta.00000000"]
    for field, value in itertools.product(fields, values):
        try:
            normalize_instance(record(beta, f"{field}{value[:3]}", **{field: value}))
        except InstanceError as exc:
            assert exc.category in {"unsafe_id", "unsafe_patch", "empty_field"}, (field, value, exc)
    assert os.path.isdir(beta.path)
