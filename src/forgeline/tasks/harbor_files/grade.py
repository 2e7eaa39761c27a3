"""Grade one forgeline task the SWE-bench way (written by `forgeline harbor`; run by test.sh).

1. Tidy the repository: put back the test and test-configuration files shipped in original/
   (what the agent did to them does not count), remove what the agent added that could change
   how pytest runs (new test files, conftest.py, pytest.ini/tox.ini/setup.cfg/pyproject.toml,
   sitecustomize.py, *.pth, new top-level modules or packages, dot-directories, symlinks,
   __pycache__).
2. Run the FAIL_TO_PASS and PASS_TO_PASS tests with pytest, with a clean environment and a time
   limit. Inside a forgeline task image, as root: as the unprivileged sandbox user, and every
   process of that user (the agent's leftovers, anything the tests started) is killed before
   and after, so nothing can write a reward after the verdict.
3. Grade with forgeline.sandbox.grading (shipped beside this file, verbatim): the verdicts come
   from pytest's own reports (its RUNNER plugin), and resolved iff every FAIL_TO_PASS and
   PASS_TO_PASS test PASSED or XFAILed.

Writes the report (JSON) to --report; exit status 0 iff resolved, 1 if not, 2 on an error.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import forgeline_grading as grading  # noqa: E402

MARKER = Path("__MARKER__")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sandbox_user():
    """(uid, gid, home) to run the tests as: only as root inside a forgeline task image."""
    if os.geteuid() != 0 or not MARKER.is_file():
        return None
    info = json.loads(MARKER.read_text())
    return int(info["uid"]), int(info["gid"]), info["home"]


def kill_user(user):
    """SIGKILL every process of the sandbox user (kill(-1) from a process of that uid)."""
    if user is None:
        return
    code = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    pass\n"
    for _ in range(3):
        subprocess.run([sys.executable, "-c", code], user=user[0], group=user[1],
                       extra_groups=[], env={"PATH": PATH}, check=False)


def admissible_new(rel, tops, forbidden):
    """May a file the agent ADDED stay for the test run?"""
    parts = rel.split("/")
    return not (grading.is_test_path(rel) or parts[-1] in forbidden or rel.endswith(".pth")
                or parts[0] not in tops or any(p.startswith(".") for p in parts))


def tidy(testbed, cfg):
    """Restore original/ into testbed and remove inadmissible additions; returns what changed."""
    baseline = set(cfg["baseline_files"])
    restore = set(cfg["restore"])
    forbidden = set(cfg["forbidden_names"])
    tops = {rel.split("/")[0] for rel in baseline}
    base_dirs = {"/".join(rel.split("/")[:i]) for rel in baseline for i in range(1, rel.count("/") + 1)}
    removed = []
    for dirpath, dirnames, filenames in os.walk(testbed):
        rel_dir = os.path.relpath(dirpath, testbed).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for name in sorted(dirnames):
            rel, full = rel_dir + name, os.path.join(dirpath, name)
            if rel == ".git" and not os.path.islink(full):
                continue  # git metadata: pytest never reads it
            if os.path.islink(full):
                os.unlink(full)
            elif name == "__pycache__" or (rel not in base_dirs and (
                    name.startswith(".") or not rel_dir and name not in tops)):
                shutil.rmtree(full)
            else:
                keep.append(name)
                continue
            removed.append(rel + "/")
        dirnames[:] = keep
        for name in sorted(filenames):
            rel, full = rel_dir + name, os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                os.unlink(full)
                removed.append(rel)
            elif rel not in baseline and not admissible_new(rel, tops, forbidden):
                os.unlink(full)
                removed.append(rel)
    restored = []
    for rel in sorted(restore):
        target = Path(testbed, rel)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / "original" / rel, target)
        restored.append(rel)
    return sorted(removed), restored


def run_tests(testbed, tests, timeout_s, user):
    """(pytest output, per-test results, exit code, timed out) of the given tests, in a clean
    environment."""
    env = {"PATH": os.environ.get("PATH", PATH), "HOME": user[2] if user else os.environ.get("HOME", "/tmp"),
           "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUNBUFFERED": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    # __SRC_LAYOUT_ENV__ (a line harbor.py puts here for a src/ layout, or removes)
    extra = dict(user=user[0], group=user[1], extra_groups=[]) if user else {}
    scratch = tempfile.mkdtemp(prefix="forgeline-grade-")
    os.chmod(scratch, 0o777)  # the sandbox user writes the results there
    results = os.path.join(scratch, "results.jsonl")
    cmd = grading.pytest_command(tests, results, python=sys.executable)
    proc = subprocess.Popen(cmd, cwd=testbed, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, **extra)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    try:
        found = grading.parse_results(Path(results).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        found = grading.Results()
    shutil.rmtree(scratch, ignore_errors=True)
    return out.decode("utf-8", "replace"), found, proc.returncode, timed_out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testbed", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--report", required=True)
    args = parser.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text(encoding="utf-8"))
    user = sandbox_user()
    kill_user(user)
    t0 = time.monotonic()
    removed, restored = tidy(args.testbed, cfg)
    # __SRC_LAYOUT_TIDY__ (lines harbor.py adds for a src/ layout, or removes)
    f2p, p2p = cfg["fail_to_pass"], cfg["pass_to_pass"]
    tests = sorted(set(f2p) | set(p2p))
    log, found, code, timed_out = run_tests(args.testbed, tests, cfg["test_timeout_s"], user)
    kill_user(user)
    print(log)
    result = grading.grade(found.statuses, f2p, p2p)
    if timed_out:
        result["resolved"] = False
    report = {"instance_id": cfg["instance_id"], **result, "timed_out": timed_out,
              "pytest_exit_code": code, "removed": removed, "restored": restored,
              "sandbox_user": user is not None, "seconds": round(time.monotonic() - t0, 3)}
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("resolved", "fail_to_pass", "pass_to_pass", "failing")},
                     sort_keys=True))
    return 0 if report["resolved"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # no verdict: test.sh writes 0
        print(f"forgeline grade.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)
