"""forgeline validate: real pytest runs through the process sandbox on a tiny repo made here."""
from __future__ import annotations

import difflib
import hashlib
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from embedded import PARAMS
from forgeline import cli, config
from forgeline.config import ConfigError
from forgeline.provenance import read_jsonl, write_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.tasks import checks, validate as V
from forgeline.sandbox.snapshot import image_name
from forgeline.tasks.repos import RepoSnapshot, swesmith_repo
from forgeline.tasks.schema import instance_id

PROJECT = Path(__file__).resolve().parents[1]

OPS = '''\
def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def scale(x, k):
    return x * k


def broken():
    return 1
'''

TEST_OPS = '''\
from tiny.ops import add, broken, scale, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2


def test_scale():
    assert scale(2, 3) == 6


def test_broken():
    assert broken() == 2
'''

# Fails on every other run (a shared counter, locked): any two gold runs disagree.
TEST_FLAKY = '''\
import fcntl

COUNTER = {counter!r}


def test_sometimes():
    with open(COUNTER, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        seen = len(f.read())
        f.write("x")
    assert seen % 2 == 0
'''

# Passes in the whole suite, fails alone: the gold runs (whole suite) pass it, the verifier's run
# (only the listed tests) does not.
TEST_STATE = '''\
STATE = []


def test_a_sets_state():
    STATE.append(1)


def test_b_needs_state():
    assert STATE
'''

# Ids the SWE-bench/SWE-smith log parsers cut at the first space.
TEST_RANGE = '''\
import pytest


@pytest.mark.parametrize("spec", ["1.2.3 - 2.0.0", "a b", "plain"])
def test_range(spec):
    assert spec
'''
NEEDS_STATE = "tests/test_state.py::test_b_needs_state"
SPACED = "tests/test_range.py::test_range[1.2.3 - 2.0.0]"

ADD, SUB, SCALE, BROKEN = (f"tests/test_ops.py::test_{n}" for n in ("add", "sub", "scale", "broken"))
FLAKY = "tests/test_flaky.py::test_sometimes"


def make_repo(root: Path) -> Path:
    repo = root / "repos" / "tiny"
    (repo / "tiny").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tiny" / "__init__.py").write_text("")
    (repo / "tiny" / "ops.py").write_text(OPS)
    (repo / "tests" / "test_ops.py").write_text(TEST_OPS)
    (repo / "tests" / "test_flaky.py").write_text(TEST_FLAKY.format(counter=str(root / "flaky.count")))
    (repo / "tests" / "test_state.py").write_text(TEST_STATE)
    (repo / "tests" / "test_range.py").write_text(TEST_RANGE)
    return repo


def make_patch(repo: Path, rel: str, old: str, new: str) -> str:
    before = (repo / rel).read_text()
    assert old in before
    after = before.replace(old, new, 1)
    diff = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}")
    return f"diff --git a/{rel} b/{rel}\n" + "".join(diff)


def make_instance(repo: Path, label: str, patch: str, f2p, p2p, statement: str,
                  commit: str | None = None) -> dict:
    snap_commit = RepoSnapshot.load(repo.parent, repo.name).commit
    commit = commit or snap_commit
    return {
        "instance_id": instance_id(f"forgeline__tiny.{commit[:8]}", "func_pm_op_swap",
                                   hashlib.sha256(label.encode()).hexdigest()),
        "repo": swesmith_repo("forgeline", "tiny", commit), "base_commit": commit, "patch": patch,
        "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "problem_statement": statement,
        "image_name": image_name("forgeline", "tiny", commit), "label": label,
    }


GOOD_STATEMENT = "Calling `add(2, 3)` gives the wrong sum."


def instances(repo: Path) -> dict[str, dict]:
    bug = make_patch(repo, "tiny/ops.py", "return a + b", "return a - b")
    sub_bug = make_patch(repo, "tiny/ops.py", "return a - b", "return a + b")
    stale = "0123456789abcdef" * 2 + "01234567"
    cases = [
        ("good", bug, [ADD], [SUB, SCALE], GOOD_STATEMENT, None),
        ("bad_patch", bug.replace("-    return a + b", "-    return a ** b"), [ADD], [SUB],
         GOOD_STATEMENT, None),
        ("nop", sub_bug, [ADD], [SCALE], GOOD_STATEMENT, None),
        ("oracle", bug, [ADD], [SUB, BROKEN], GOOD_STATEMENT, None),
        ("flaky", bug, [ADD], [SUB, FLAKY], GOOD_STATEMENT, None),
        ("test_file", make_patch(repo, "tests/test_ops.py", "== 5", "== 6"), [ADD], [SUB],
         GOOD_STATEMENT, None),
        ("stale", bug, [ADD], [SUB], GOOD_STATEMENT, stale),
        ("unknown_test", bug, ["tests/test_ops.py::test_missing"], [SUB], GOOD_STATEMENT, None),
        ("overlap", bug, [ADD], [ADD, SUB], GOOD_STATEMENT, None),
        ("leak", bug, [ADD], [SUB], "add() is off: it does `return a - b` now.", None),
        ("unaligned", bug, [ADD], [SUB], "The library misbehaves on some inputs.", None),
        ("suite_order", bug, [ADD], [SUB, NEEDS_STATE], GOOD_STATEMENT, None),
        ("spaced_id", bug, [ADD], [SUB, SPACED], GOOD_STATEMENT, None),
        ("upstream", bug, [ADD], [SUB], GOOD_STATEMENT, None),
    ]
    out = {label: make_instance(repo, label, patch, f2p, p2p, st, commit)
           for label, patch, f2p, p2p, st, commit in cases}
    del out["upstream"]["base_commit"]  # SWE-smith's records name the commit in repo and id only
    return out


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    repo = make_repo(root)
    insts = instances(repo)
    other = dict(insts["good"], repo="otherrepo", instance_id="otherrepo.deadbeef.x__00000000")
    snap = RepoSnapshot.load(repo.parent, "tiny")
    res = V.validate_batch([*insts.values(), other], snap, get_sandbox("process"),
                           V.Options(gold_runs=2, alignment=True, timeout_s=60), threads=2,
                           progress=False)
    by_label = {i["instance_id"]: label for label, i in insts.items()}
    rejected = {by_label[r["instance_id"]]: r for r in res.rejections}
    return res, insts, rejected, snap


# -- the batch, end to end through the sandbox ----------------------------------------------

def test_good_instance_passes_every_check(batch):
    res, insts, _, _ = batch
    assert sorted(v["label"] for v in res.validated) == ["good", "upstream"]
    v = next(v for v in res.validated if v["label"] == "good")
    assert v["validation"] == {"checks": ["structure", "patch_applies", "flaky", "nop", "oracle",
                                          "verifier", "alignment"],
                               "gold_runs": 2, "sandbox": "process", "nop": {"FAILED": 1},
                               "alignment": {"identifiers": ["add"]}}
    assert {k: v[k] for k in insts["good"]} == insts["good"]  # fields unchanged


@pytest.mark.parametrize("label,check,needle", [
    ("bad_patch", "patch_applies", "does not apply"),
    ("nop", "nop", f"{ADD} (PASSED)"),
    ("oracle", "oracle", f"{BROKEN} (FAILED)"),
    ("flaky", "flaky", FLAKY),
    ("test_file", "structure", "tests/test_ops.py"),
    ("unknown_test", "structure", "not in the clean suite"),
    ("overlap", "structure", "both FAIL_TO_PASS and PASS_TO_PASS"),
    ("leak", "alignment", "'return a - b'"),
    ("suite_order", "verifier", f"{NEEDS_STATE} do not pass"),
    ("spaced_id", "structure", SPACED),
    ("unaligned", "alignment", "names none of the identifiers"),
])
def test_rejected_at_the_right_check(batch, label, check, needle):
    _, _, rejected, _ = batch
    assert rejected[label]["check"] == check, rejected[label]
    assert needle in rejected[label]["reason"]


def test_stale_base_commit_names_both_hashes(batch):
    _, insts, rejected, snap = batch
    r = rejected["stale"]
    assert r["check"] == "structure"
    assert insts["stale"]["base_commit"] in r["reason"] and snap.commit in r["reason"]


def test_stale_batch_runs_nothing(tmp_path):
    repo = make_repo(tmp_path)
    stale = instances(repo)["stale"]
    res = V.validate_batch([stale], RepoSnapshot.load(repo.parent, "tiny"), get_sandbox("process"),
                           V.Options(), progress=False)
    assert [r["check"] for r in res.rejections] == ["structure"]
    assert res.report["clean_suite"] is None and res.notes["gold_run_durations_s"] == []


def test_report_counts_every_check(batch):
    res, insts, _, snap = batch
    rep = res.report
    assert rep["input"] == len(insts) and rep["skipped_other_repos"] == 1
    assert rep["validated"] == 2
    assert rep["rejected"] == {"structure": 5, "patch_applies": 1, "flaky": 1, "nop": 1,
                               "oracle": 1, "verifier": 1, "alignment": 2}
    assert rep["flaky_tests"] == [FLAKY] and rep["gold_runs"] == 2
    assert rep["clean_suite"] == {"tests": 10, "stable": {"FAILED": 1, "PASSED": 8}, "flaky": 1}
    assert rep["commit"] == snap.commit
    assert [r["instance_id"] for r in res.rejections] == sorted(r["instance_id"] for r in res.rejections)
    assert res.notes["nop_runs"] == 8 and len(res.notes["gold_run_durations_s"]) == 2


# -- pure parts ------------------------------------------------------------------------------

def test_patch_parsing_reads_hunks_by_count():
    patch = textwrap.dedent("""\
        diff --git a/pkg/m.py b/pkg/m.py
        --- a/pkg/m.py
        +++ b/pkg/m.py
        @@ -1,3 +1,3 @@
         def f(x):
        ---- decrement marker
        +    return x - 1
         # end
        diff --git a/pkg/new.py b/pkg/new.py
        --- /dev/null
        +++ b/pkg/new.py
        @@ -0,0 +1 @@
        +VALUE = 1
        """)
    assert checks.patch_files(patch) == ["pkg/m.py", "pkg/new.py"]
    # the removed line "--- decrement marker" is code, not a file header
    assert checks.patch_code_lines(patch) == ["--- decrement marker", "VALUE = 1", "return x - 1"]


def test_identifiers_of_test_methods_bases_and_aliases():
    src = textwrap.dedent("""\
        from pkg.ledger import Ledger as L

        class Base:
            def test_post(self, ledger):
                entry = L().post_entry(amount=3)
                assert entry.balance == 3

        class TestChild(Base):
            pass
        """)
    ids = checks.identifiers_of_test(src, "tests/t.py::TestChild::test_post[x-1]")
    assert ids == {"ledger", "post_entry", "balance"}  # 'L' -> Ledger; fixture arg dropped
    assert checks.identifiers_of_test(src, "tests/t.py::TestChild::test_nothing") is None


def test_alignment_heuristic():
    patch = make_patch_text("return a + b", "return a - b")
    sources = {"tests/t.py": "from m import total_of\n\ndef test_t():\n    assert total_of([1]) == 1\n"}
    ok, shared = checks.check_alignment("total_of() is wrong for one item", patch, sources, ["tests/t.py::test_t"])
    assert ok is None and shared == ["total_of"]
    leak, _ = checks.check_alignment("it does return  a - b", patch, sources, ["tests/t.py::test_t"])
    assert "quotes a code line" in leak  # whitespace is collapsed before comparing
    miss, _ = checks.check_alignment("The function returns the wrong value", patch, sources,
                                ["tests/t.py::test_t"])
    assert "names none" in miss
    unread, _ = checks.check_alignment("total_of", patch, {"tests/t.py": None}, ["tests/t.py::test_t"])
    assert "cannot read" in unread


# A test module that reaches dunder methods only through syntax (as cachetools' and semver's do).
DUNDER_TESTS = textwrap.dedent("""\
    import copy

    from cachetools import Cache, FIFOCache
    from semver import Version


    def test_del(cache):
        cache["a"] = 1
        del cache["a"]
        assert "a" not in cache


    class TestFifo:
        def test_evicts(self):
            fifo = FIFOCache(maxsize=1)
            fifo[1] = 1
            assert len(fifo) == 1


    def test_index():
        v = Version.parse("1.2.3")
        assert v[0] == 1 and str(v) == "1.2.3"


    def test_version_made():
        assert Version(1, 2, 3).major == 1


    def test_with_and_call(tmp_path):
        with Cache(maxsize=2) as c:
            c(3)
        assert copy.copy(c) == c


    def test_unrelated():
        assert sum([1, 2]) == 3 and [1, 2][0] == 1
    """)


@pytest.mark.parametrize("statement, tests, reached", [
    # the operator's syntax on the class or an instance named after it
    ("`Cache.__delitem__` misbehaves", ["test_del"], ["cache.__delitem__"]),
    ("`Cache.__setitem__` misbehaves", ["test_del"], ["cache.__setitem__"]),
    ("`Cache.__contains__` misbehaves", ["test_del"], ["cache.__contains__"]),
    ("`cachetools.Cache.__delitem__` misbehaves", ["test_del"], ["cache.__delitem__"]),
    ("`FIFOCache.__len__` is off by one", ["TestFifo::test_evicts"], ["fifocache.__len__"]),
    ("`Cache.__setitem__` misbehaves", ["TestFifo::test_evicts"], ["cache.__setitem__"]),  # FIFOCache
    # `Version` is a stopword, so only the dunder rule can match it
    ("`Version.__getitem__` crashes with `IndexError`", ["test_index"], ["version.__getitem__"]),
    ("`Version.__str__` does not do what it should", ["test_index"], ["version.__str__"]),
    ("`Version.__eq__` is wrong", ["test_index"], ["version.__eq__"]),
    ("`Version.__init__` is wrong", ["test_version_made"], ["version.__init__"]),
    ("`Cache.__enter__` leaks", ["test_with_and_call"], ["cache.__enter__"]),
    ("`Cache.__call__` is wrong", ["test_with_and_call"], ["cache.__call__"]),
    ("`Cache.__copy__` is wrong", ["test_with_and_call"], ["cache.__copy__"]),
])
def test_alignment_accepts_a_dunder_reached_by_syntax(statement, tests, reached):
    patch = make_patch_text("return a + b", "return a - b")
    f2p = [f"tests/t.py::{t}" for t in tests]
    reason, shared = checks.check_alignment(statement, patch, {"tests/t.py": DUNDER_TESTS}, f2p)
    assert reason is None and set(reached) <= set(shared), (reason, shared)


@pytest.mark.parametrize("statement, tests", [
    ("`Cache.__delitem__` misbehaves", ["test_unrelated"]),       # the syntax, but no cache in it
    ("`Cache.__delitem__` misbehaves", ["TestFifo::test_evicts"]),  # a cache, but nothing deleted
    ("`Version.__getitem__` crashes", ["test_version_made"]),      # Version, never subscripted
    ("`Version.__init__` is wrong", ["test_index"]),               # Version, never constructed
    ("`Cache.__call__` is wrong", ["test_del"]),                   # the cache is never called
    ("`Cachet.__delitem__` misbehaves", ["test_del"]),             # a name that only starts alike
    ("`__delitem__` misbehaves", ["test_del"]),                    # no class named
    ("`Ledger.__add__` is wrong", ["test_del", "test_index"]),      # another class entirely
])
def test_alignment_still_rejects_dunders_the_tests_do_not_reach(statement, tests):
    patch = make_patch_text("return a + b", "return a - b")
    f2p = [f"tests/t.py::{t}" for t in tests]
    reason, shared = checks.check_alignment(statement, patch, {"tests/t.py": DUNDER_TESTS}, f2p)
    assert reason is not None and "names none" in reason and shared == []


def test_dunders_of_test_and_names_class():
    dunders, names, called = checks.dunders_of_test(DUNDER_TESTS, "tests/t.py::test_del")
    assert {"__setitem__", "__delitem__", "__contains__"} <= dunders and "__call__" not in dunders
    assert "cache" in names and called == set()
    assert checks.dunders_of_test(DUNDER_TESTS, "tests/t.py::test_missing") is None
    assert checks.statement_dunders("`a.b.Cache.__delitem__` and `__len__`, Cache.__x__y") == \
        {("Cache", "__delitem__")}
    for name in ("cache", "Cache", "FIFOCache", "lru_cache", "cache2"):
        assert checks.names_class("Cache", [name]), name
    for name in ("cached", "cachetools", "Cachet", ""):
        assert not checks.names_class("Cache", [name]), name
    assert checks.names_class("LRUCache", ["LRUCache"]) and not checks.names_class("LRUCache", ["cache"])


def make_patch_text(old: str, new: str) -> str:
    return (f"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f(a, b):\n"
            f"-    {old}\n+    {new}\n")


def test_verdict_helpers():
    assert checks.flaky_tests([{"a": "PASSED", "b": "PASSED"}, {"a": "FAILED", "b": "PASSED", "c": "PASSED"}]) \
        == ["a", "c"]
    assert checks.check_nop({"t": "ERROR"}, ["t"]) is None
    assert "(not run)" in checks.check_nop({}, ["t"])
    assert "timed out" in checks.check_nop({}, ["t"], timed_out=True, timeout_s=5)
    # every listed test PASSED clean: SKIPPED fails both lists, XFAIL passes (docs/grading.md)
    assert "p (SKIPPED)" in checks.check_oracle([{"f": "PASSED", "p": "SKIPPED"}], ["f"], ["p"])
    assert "f (SKIPPED)" in checks.check_oracle([{"f": "SKIPPED"}], ["f"], [])
    assert checks.check_oracle([{"f": "XFAIL", "p": "PASSED"}], ["f"], ["p"]) is None


def test_reverse_restores(tmp_path):
    repo = make_repo(tmp_path)
    assert V.reverse_restores(repo, make_patch(repo, "tiny/ops.py", "x * k", "x * k + 1")) is None
    new_file = "diff --git a/tiny/extra.py b/tiny/extra.py\nnew file mode 100644\n--- /dev/null\n+++ b/tiny/extra.py\n" \
               "@@ -0,0 +1 @@\n+EXTRA = 1\n"
    assert V.reverse_restores(repo, new_file) is None


def test_strong_model_fails_clearly():
    with pytest.raises(ConfigError, match="strong_model.*agent and a model endpoint"):
        V.check_options(config.merged(PARAMS.tasks.validate, {"strong_model": True}), 60)


# -- the CLI ---------------------------------------------------------------------------------

def write_params(tmp_path: Path, **validate) -> Path:
    params = yaml.safe_load((PROJECT / "params.yaml").read_text())
    params["repos"]["root"] = str(tmp_path / "repos")
    params["sandbox"]["backend"] = "process"
    params["tasks"]["validate"].update(validate)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def cli_args(tmp_path: Path, params: Path) -> tuple[list[str], dict[str, Path]]:
    out = tmp_path / "results" / "validated"
    paths = {"out": out / "tiny.jsonl", "rejections": out / "tiny.rejections.jsonl",
             "report": out / "tiny.report.json", "manifest": out / "tiny.manifest.json"}
    argv = ["validate", "--config", str(params), "--repo", "tiny",
            "--tasks", str(tmp_path / "ingested.jsonl"), "--threads", "2"]
    for key, path in paths.items():
        argv += [f"--{key}", str(path)]
    return argv, paths


def test_cli_end_to_end_is_byte_identical(tmp_path):
    repo = make_repo(tmp_path)
    insts = instances(repo)
    chosen = [insts[k] for k in ("good", "flaky", "test_file")]
    write_jsonl(tmp_path / "ingested.jsonl", chosen)
    argv, paths = cli_args(tmp_path, write_params(tmp_path, gold_runs=2))
    assert cli.main(argv) == 0
    first = {k: paths[k].read_bytes() for k in ("out", "rejections", "report")}
    manifest = json.loads(paths["manifest"].read_text())
    assert manifest["stage"] == "validate" and manifest["seeds"] == {}
    assert [Path(o["path"]).name for o in manifest["outputs"]] == \
        ["tiny.jsonl", "tiny.rejections.jsonl", "tiny.report.json"]
    assert manifest["timings"]["gold_runs"] > 0 and manifest["notes"]["nop_runs"] == 2
    assert [r["label"] for r in read_jsonl(paths["out"])] == ["good"]
    assert sorted(r["check"] for r in read_jsonl(paths["rejections"])) == ["flaky", "structure"]
    assert str(tmp_path) not in b"".join(first.values()).decode()  # no temp paths in artifacts
    assert cli.main(argv) == 0
    assert {k: paths[k].read_bytes() for k in first} == first


def test_cli_strong_model_fails_before_any_work(tmp_path):
    make_repo(tmp_path)
    (tmp_path / "ingested.jsonl").write_text("")
    argv, paths = cli_args(tmp_path, write_params(tmp_path, strong_model=True))
    assert cli.main(argv) == 2
    assert not any(p.exists() for p in paths.values())
