"""The docker sandbox: sessions, fresh test runs, hostile commands, cleanup on every path, and a
verifier that nothing but the package's source can sway. Pure diff-filter tests need no engine."""
from __future__ import annotations

import subprocess
import shlex
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, TINY_NAME
from forgeline.agent.tools import normalize_pytest
from forgeline.sandbox.base import PatchError, SandboxError, TaskEnv
from forgeline.sandbox.grading import pytest_shell
from forgeline.sandbox.process import ProcessSandbox
from forgeline.sandbox.verify import filter_agent_diff, package_layout, verify

# The task: the bug turns add into a subtraction; test_add fails with it.
BUG = textwrap.dedent(f"""\
    diff --git a/{TINY_NAME}/ops.py b/{TINY_NAME}/ops.py
    --- a/{TINY_NAME}/ops.py
    +++ b/{TINY_NAME}/ops.py
    @@ -1,5 +1,5 @@
     def add(a, b):
    -    return a + b
    +    return a - b
     
     
     def sub(a, b):
    """)
FIX = BUG.replace("-    return a + b\n+    return a - b", "-    return a - b\n+    return a + b")
F2P = ["tests/test_ops.py::test_add"]
P2P = ["tests/test_ops.py::test_mul", "tests/test_ops.py::test_sub"]


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


# Attacks on the verdict: each would make the buggy code "pass" if it reached grading.
CHEAT_TEST = textwrap.dedent("""\
    diff --git a/tests/test_ops.py b/tests/test_ops.py
    --- a/tests/test_ops.py
    +++ b/tests/test_ops.py
    @@ -2,7 +2,7 @@ from fltiny import add, mul, sub
     
     
     def test_add():
    -    assert add(2, 3) == 5
    +    assert add(2, 3) == -1
     
     
     def test_sub():
    """)
CHEAT_CONFTEST = new_file("conftest.py", textwrap.dedent("""\
    import pytest
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        rep = outcome.get_result()
        rep.outcome = "passed"
    """))
CHEAT_SHADOW_PYTEST = new_file("pytest.py", "print('tests/test_ops.py::test_add PASSED')\n")
CHEAT_OTHERS = (new_file(f"{TINY_NAME}/conftest.py", "import os\n")
                + new_file("sitecustomize.py", "import os\n")
                + new_file(f"{TINY_NAME}/x.pth", "import os")
                + new_file("reward.txt", "1")
                + new_file("pytest.ini", "[pytest]")
                + new_file(".hidden/mod.py", "x = 1"))
# a plain ---/+++ pair after a complete hunk: `git apply` would take it as one more file
SMUGGLED = FIX + ("--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n@@ -5 +5 @@\n"
                  "-    assert add(2, 3) == 5\n+    assert add(2, 3) == -1\n")
SYMLINK = (f"diff --git a/{TINY_NAME}/link.py b/{TINY_NAME}/link.py\nnew file mode 120000\n"
           f"--- /dev/null\n+++ b/{TINY_NAME}/link.py\n@@ -0,0 +1 @@\n+../tests/test_ops.py\n"
           "\\ No newline at end of file\n")


# -- the diff filter (no engine needed) ----------------------------------------------------

def test_filter_keeps_source_and_strips_everything_else(tiny_snapshot):
    kept, stripped = filter_agent_diff(FIX, tiny_snapshot.path)
    assert kept == FIX and stripped == []
    new_module = new_file(f"{TINY_NAME}/helpers.py", "def two():\n    return 2\n")
    kept, stripped = filter_agent_diff(CHEAT_TEST + new_module + CHEAT_CONFTEST + CHEAT_SHADOW_PYTEST
                                       + CHEAT_OTHERS + SYMLINK, tiny_snapshot.path)
    assert kept == new_module
    reasons = {s["path"]: s["reason"] for s in stripped}
    assert set(reasons) == {"tests/test_ops.py", "conftest.py", "pytest.py", f"{TINY_NAME}/conftest.py",
                            "sitecustomize.py", f"{TINY_NAME}/x.pth", "reward.txt", "pytest.ini",
                            ".hidden/mod.py", f"{TINY_NAME}/link.py"}
    assert "shadow" in reasons["pytest.py"] and "symbolic link" in reasons[f"{TINY_NAME}/link.py"]
    kept, stripped = filter_agent_diff(SMUGGLED, tiny_snapshot.path)
    assert kept == "" and stripped[0]["reason"] == "unexpected line after a hunk"
    kept, stripped = filter_agent_diff("garbage\n" + FIX, tiny_snapshot.path)
    assert kept == FIX and stripped[0]["reason"] == "unreadable diff header"


# -- sessions ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sandbox(docker_client):
    from forgeline.sandbox.docker import DockerSandbox
    sb = DockerSandbox(client=docker_client, scratch_mb=64, warm=1)
    yield sb
    sb.shutdown()
    assert no_containers_left(sb) == []


@pytest.fixture(scope="module")
def env(tiny_snapshot, tiny_image) -> TaskEnv:
    return tiny_snapshot.env()


def no_containers_left(sandbox) -> list:
    """Containers this test process made that still exist, after the sandbox's close()."""
    from forgeline.sandbox.docker import LABEL_OWNER, _OWNER
    sandbox.close()  # removes warm spares, waits for background removals
    return sandbox.client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={_OWNER}"})


@pytest.mark.docker
def test_no_more_warm_spares_than_the_caller_still_needs(docker_client, env):
    """With `expect(env, n)` the sandbox keeps at most as many started spares as it will still
    be asked for: a spare nobody takes is a container started and removed for nothing."""
    from forgeline.sandbox.docker import LABEL_OWNER, _OWNER, DockerSandbox
    sb = DockerSandbox(client=docker_client, scratch_mb=64, warm=2)

    def started() -> int:
        """Containers of this process, once the spares asked for have started."""
        for f in list(sb._spares.get(env, [])):
            f.result()
        sb._reaper.submit(lambda: None).result()  # finished test runs are removed in the background
        return len(docker_client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={_OWNER}"}))

    try:
        with sb.session(env):  # not told: `warm` spares
            assert started() == 1 + 2
        sb.close()
        sb.expect(env, 2)
        assert started() == 2  # told: the spares start at once
        with sb.session(env):
            assert started() == 1 + 1  # one more to come: one spare
        assert sb.run_tests(env).exit_code == 0 and started() == 0  # none to come: none
        sb.expect(env, 5)
        assert started() == 2
        with sb.session(env):
            assert started() == 1 + 2
        sb.expect(env, 1)
        sb.close()  # a later caller starts untold: `warm` spares again, not the count said before
        with sb.session(env):
            assert started() == 1 + 2
    finally:
        sb.shutdown()
    assert no_containers_left(sb) == []


@pytest.mark.docker
def test_session_is_locked_down_and_diffs(sandbox, env):
    with sandbox.session(env, [BUG]) as s:
        who = s.exec("id -u; touch /testbed/ok && echo writable; ls /sys/class/net; "
                     "cat /proc/self/status | grep CapEff; git log --format=%s; git status --porcelain",
                     10)
        assert who.exit_code == 0 and not who.timed_out
        uid, writable, net, caps, log, *status = who.output.splitlines()
        assert (uid, writable, net) == ("1000", "writable", "lo")
        assert caps.split()[-1] == "0" * 16 and log == "baseline"
        assert status == ["?? ok"]  # the bug patch is part of the baseline, invisible to git
        # the pristine snapshot and the history of the patches stay out of reach
        assert s.exec("ls /opt/forgeline", 5).exit_code != 0
        assert s.exec("git log --oneline | wc -l", 5).output.strip() == "1"
        assert s.exec("echo hi > /etc/x", 5).exit_code != 0  # read-only root
        fixed = s.exec("sed -i '2s/a - b/a + b/' fltiny/ops.py && mkdir -p fltiny/sub && "
                       "echo 'X = 1' > fltiny/sub/new.py", 5)
        assert fixed.exit_code == 0
        diff = s.diff()
    assert "+    return a + b" in diff and "b/fltiny/sub/new.py" in diff and "b/ok" in diff
    # the diff applies on top of the bug in a fresh environment, and the tests agree
    run = sandbox.run_tests(env, [BUG, diff])
    assert run.statuses == {t: "PASSED" for t in F2P + P2P}
    with pytest.raises(PatchError) as err:
        sandbox.session(env, [BUG, BUG])
    assert err.value.index == 1
    assert no_containers_left(sandbox) == []


@pytest.mark.docker
def test_commands_go_through_init_as_docker_exec_ran_them(sandbox, env):
    """What a command sees is what a `docker exec` of it saw; the engine never runs an exec."""
    with sandbox.session(env) as s:
        res = s.exec("echo $HOME $PYTHONHASHSEED $(id -un) $(pwd); cut -d' ' -f6 /proc/$$/stat; echo $$; "
                     "cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs)'", 10)
        home, seed, user, cwd, sid, pid, *status = res.output.split()
        assert (home, seed, user, cwd) == ("/home/forgeline", "0", "forgeline", "/testbed")
        assert sid == pid  # a session of its own, as runc made it
        assert status == ["CapEff:", "0" * 16, "NoNewPrivs:", "1"]
        # stdin, stdout and stderr in one stream, in order; the exit status as the shell saw it
        both = s._run(["bash", "-c", "cat; echo err >&2; exit 3"], 10, stdin=b"in\n")
        assert (both.exit_code, both.output) == (3, "in\nerr\n")
        assert s.exec("kill -TERM $$", 10).exit_code == 128 + 15
        assert s.exec("yes | head -2", 10).output == "y\ny\n"  # SIGPIPE ends `yes`, as on a shell
        # what a command leaves running does not hold its answer (docker exec held it ~2 s)
        t0 = time.perf_counter()
        res = s.exec("sleep 30 & echo started", 10)
        assert res.output == "started\n" and not res.timed_out and time.perf_counter() - t0 < 5
        assert s.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '", 10).output.count("sleep 30") == 1
        s.container.reload()
        assert not s.container.attrs.get("ExecIDs")


def busy(cpu_s: float) -> str:
    """A command that computes for `cpu_s` seconds of its own CPU time, then says done."""
    return "python3 -c " + shlex.quote(f"import time\nt = time.process_time()\n"
                                       f"while time.process_time() - t < {cpu_s}:\n    pass\nprint('done')")


@pytest.mark.docker
def test_a_limit_in_cpu_time_is_the_same_on_a_busy_machine(docker_client, env):
    """With cpu_time, timeout_s counts the container's CPU seconds: in a container held to a
    quarter of a core, 0.4 s of CPU (~1.6 s of wall time) finish within a 1 s limit that wall
    time cuts."""
    from forgeline.sandbox.docker import DockerSandbox
    sb = DockerSandbox(client=docker_client, scratch_mb=64, warm=0, cpus=0.25)
    try:
        with sb.session(env) as s:
            assert s._cpu() is not None, "this host cannot read the container's cgroup"
            slow = s.exec(busy(0.4), 1.0, cpu_time=True)
            assert (slow.exit_code, slow.output, slow.timed_out) == (0, "done\n", False)
            assert slow.duration_s > 1.0
            cut = s.exec(busy(0.4), 1.0)
            assert cut.timed_out and cut.exit_code == -9
    finally:
        sb.shutdown()


@pytest.mark.docker
def test_a_limit_in_cpu_time_stops_a_loop_at_it_and_one_that_waits_later(sandbox, env):
    """A loop is stopped once the container has used its limit of CPU (the session goes on); a
    command that sleeps past its limit finishes, one that sleeps on is stopped at 4x in wall time."""
    from forgeline.sandbox.base import WALL_BACKSTOP
    with sandbox.session(env) as s:
        clock = s._cpu()
        before = clock()
        loop = s.exec("while :; do :; done", 0.5, cpu_time=True)
        assert loop.timed_out and loop.exit_code == -9 and loop.duration_s < 0.5 * WALL_BACKSTOP
        assert 0.5 <= clock() - before < 1.0
        assert s.exec("echo alive", 5, cpu_time=True).output == "alive\n"
        waits = s.exec("sleep 30", 0.5, cpu_time=True)
        assert waits.timed_out and waits.exit_code == -9 and waits.duration_s >= 0.5 * WALL_BACKSTOP
        slept = s.exec("sleep 1; echo slept", 0.5, cpu_time=True)
        assert (slept.output, slept.timed_out) == ("slept\n", False)


# one line per process of the container; the patterns' [.] keeps the grep from matching itself
PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
ZYGOTES = PROCESSES + " | grep -c 'pytest_zygote[.]py --serve'"


@pytest.mark.docker
def test_python3_m_pytest_runs_in_a_zygote_and_says_what_pytest_says(sandbox, env):
    """The agent's `python3 -m pytest`: the same output and exit status as without the zygote,
    from one zygote per container; whatever it cannot serve exactly runs the plain way; every
    other start of python3 is the interpreter's own (session 23's shim was not: `usage:` named
    /usr/bin/python3)."""
    run = "python3 -m pytest -q -p no:cacheprovider"
    plain = "FORGELINE_PYTEST_ZYGOTE=0 " + run
    with sandbox.session(env, [BUG]) as s:
        assert s.exec(ZYGOTES, 10).output.strip() == "0"
        first, again, direct = s.exec(run, 30), s.exec(run, 30), s.exec(plain, 30)
        assert first.exit_code == again.exit_code == direct.exit_code == 1
        assert normalize_pytest(first.output) == normalize_pytest(again.output) == normalize_pytest(direct.output)
        assert "1 failed, 2 passed" in first.output
        assert s.exec(ZYGOTES, 10).output.strip() == "1"  # started once, then reused
        # the interpreter's own messages and names, with and without -m pytest
        for probe in ("python3 -A", "python3 -c 'import sys; print(sys.executable, sys.argv, sys.orig_argv)'",
                      "python3 -m pytest --version", "python3 -m pytest --no-such-option"):
            ours, theirs = s.exec(probe, 30), s.exec("FORGELINE_PYTEST_ZYGOTE=0 " + probe, 30)
            assert (ours.exit_code, ours.output) == (theirs.exit_code, theirs.output), probe
        assert "usage: python3" in s.exec("python3 -A", 10).output
        # stdin and stdout pipes, arguments, the exit status of `-k` selecting nothing (5)
        picked = s.exec(f"echo | {run} -k test_mul | tail -1; echo ${{PIPESTATUS[1]}}", 30)
        assert "1 passed, 2 deselected" in picked.output and picked.output.split()[-1] == "0", picked
        assert s.exec(f"{run} -k nothing_matches", 30).exit_code == 5
        # another environment, a shadowing module in the directory: served the plain way, and
        # the hook's own imports (json, socket, ...) do not stay to shadow the directory's
        other_env = s.exec(f"PYTHONPATH=/nowhere {run}", 30)
        assert normalize_pytest(other_env.output) == normalize_pytest(direct.output)
        s.exec("echo 'raise SystemExit(\"shadow imported\")' > json.py", 10)
        shadow, shadow_plain = s.exec(run, 30), s.exec(plain, 30)
        assert (shadow.exit_code, shadow.output) == (shadow_plain.exit_code, shadow_plain.output)
        s.exec("rm json.py", 10)
        # a signal reaches the run: `timeout` ends it, nothing of it is left
        s.exec("cat > tests/test_slow.py <<'EOF'\nimport time\ndef test_slow():\n    time.sleep(60)\nEOF", 10)
        t0 = time.perf_counter()
        stopped = s.exec(f"timeout 2 {run} tests/test_slow.py; echo status $?", 30)
        assert stopped.output.split()[-2:] == ["status", "124"] and time.perf_counter() - t0 < 20
        assert s.exec(PROCESSES + " | grep -c 'test_slow[.]py'", 10).output.strip() == "0"
        # a command killed at its time limit takes the zygote with it; the next run starts one
        assert s.exec(f"{run} tests/test_slow.py", 2).timed_out
        assert s.exec(ZYGOTES, 10).output.strip() == "0"
        s.exec("rm tests/test_slow.py", 10)
        assert normalize_pytest(s.exec(run, 30).output) == normalize_pytest(direct.output)
        assert s.exec(ZYGOTES, 10).output.strip() == "1"


@pytest.mark.docker
def test_run_tests_agrees_with_the_process_backend(sandbox, env):
    docker_run = sandbox.run_tests(env, [BUG], timeout_s=60)
    process_run = ProcessSandbox(python=sys.executable).run_tests(env, [BUG], timeout_s=60)
    assert docker_run.statuses == process_run.statuses == {
        "tests/test_ops.py::test_add": "FAILED", "tests/test_ops.py::test_mul": "PASSED",
        "tests/test_ops.py::test_sub": "PASSED"}
    only = sandbox.run_tests(env, [BUG], tests=F2P)
    assert only.statuses == {F2P[0]: "FAILED"} and only.exit_code == 1
    slow = sandbox.run_tests(env, [new_file("tests/test_slow.py", "import time\n"
                                            "def test_slow():\n    time.sleep(60)\n")], timeout_s=2)
    assert slow.timed_out and slow.exit_code == -9


@pytest.mark.docker
def test_missing_image_names_the_command(sandbox, tiny_snapshot):
    ghost = TaskEnv("ghostrepo", tiny_snapshot.path, "0" * 40, "forgeline/ghostrepo:00000000")
    with pytest.raises(SandboxError, match="forgeline image --repo ghostrepo"):
        sandbox.run_tests(ghost)


# Each is contained and reported: an ExecResult, then the same session still answers.
HOSTILE = {
    # the classic one dies out against the pids limit; the second keeps the table full
    "fork_bomb": ("bomb() { bomb | bomb & }; bomb; sleep 600", {"timed_out": None}),
    "fork_bomb_forever": ("python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'",
                          {"timed_out": True}),
    # filling the memory limit can take longer than 3 s on a loaded machine: it must end by the
    # OOM killer, not by the time limit
    "memory_hog": ("python3 -c 'x = []\nwhile True: x.append(bytearray(50 << 20))'",
                   {"killed": True, "timeout_s": 20}),
    "infinite_loop": ("while :; do :; done", {"timed_out": True}),
    "disk_filler": ("cat /dev/zero > /testbed/fill; cat /dev/zero > /tmp/fill; "
                    "cat /dev/zero > ~/fill; echo x > /fill; df -m /testbed /tmp | tail -2",
                    {"output": "No space left on device"}),
    "network": ("python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=3)\"",
                {"output": "Network is unreachable"}),
    # a network namespace of its own (NetworkDisabled): loopback and nothing else to reach out by
    "interfaces": ("echo with $(ls /sys/class/net) only", {"output": "with lo only"}),
    "kill_init": ("kill -9 1; kill -USR1 1; echo still-here", {"output": "still-here"}),
    "kill_everything": ("sleep 600 & sleep 600 & kill -9 -1; wait; echo survived",
                        {"output": "survived"}),
    # processes with much memory take a while to die after SIGKILL: the next command must not
    # find them (CI once found 106 of the fork bomb's)
    "slow_to_die": ("for i in $(seq 12); do python3 -c 'import time; "
                    "x = [bytearray(8 << 20) for _ in range(6)]; time.sleep(600)' & done; sleep 600",
                    {"timed_out": True, "timeout_s": 4}),
    "escaped_daemon": ("setsid bash -c 'while :; do sleep 1; done' & disown; sleep 600",
                       {"timed_out": True}),
    "output_flood": ("yes hostile", {"timed_out": True, "output": "[... output truncated ...]"}),
}


def gone(client, container_id: str) -> bool:
    from docker.errors import NotFound
    try:
        client.containers.get(container_id)
    except NotFound:
        return True
    return False


@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_command_is_contained(sandbox, env, name):
    command, expect = HOSTILE[name]
    t0 = time.perf_counter()
    with sandbox.session(env) as s:
        cid = s.container.id
        res = s.exec(command, timeout_s=expect.get("timeout_s", 3))
        assert time.perf_counter() - t0 < 45
        if expect.get("timed_out", False) is not None:
            assert res.timed_out == expect.get("timed_out", False), res
        if expect.get("killed"):
            assert res.exit_code in (137, -9), res
        if "output" in expect:
            assert expect["output"] in res.output, res.output[-500:]
        assert len(res.output) <= sandbox.options["output_limit"] + 100
        # the session survives: nothing of the command is left, the next command runs
        after = s.exec("ls /proc | grep -c '^[0-9]'; echo alive", 10)
        assert after.exit_code == 0 and after.output.split()[-1] == "alive", after
        assert int(after.output.split()[0]) <= 4  # init, bash, ls, grep
    assert gone(sandbox.client, cid)
    with sandbox.session(env) as s:  # and the next session is fine
        assert s.exec("echo fine", 10).output == "fine\n"


# -- cleanup on every path -----------------------------------------------------------------

@pytest.mark.docker
def test_containers_are_removed_on_exceptions_and_interrupts(sandbox, env):
    for exc in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(exc):
            with sandbox.session(env) as s:
                s.exec("true", 5)
                raise exc("boom")
        assert no_containers_left(sandbox) == []


CHILD = textwrap.dedent("""\
    import sys, time
    from forgeline.sandbox.docker import DockerSandbox
    from forgeline.sandbox.base import TaskEnv
    from pathlib import Path
    sb = DockerSandbox(warm=1)
    s = sb.session(TaskEnv(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
    print("ready", flush=True)
    s.exec("sleep 600", 600)
    """)


@pytest.mark.docker
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_no_leftovers_when_the_owner_dies(docker_client, env, how):
    import os
    import signal
    from forgeline.sandbox.docker import LABEL_OWNER, remove_leftovers
    # ^C as a terminal sends it: a child started from a non-interactive shell's background job
    # (how CI runs) inherits SIGINT ignored, and Python then keeps ignoring it, rightly
    proc = subprocess.Popen([sys.executable, "-c", CHILD, env.repo, str(env.source), env.commit,
                             env.image], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def owned() -> set[str]:
        label = f"{LABEL_OWNER}={os.uname().nodename}:{proc.pid}"
        return {c.id for c in docker_client.containers.list(all=True, filters={"label": label})}

    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(100):  # the warm spare starts in the background
            if len(mine := owned()) == 2:
                break
            time.sleep(0.1)
        assert len(mine) == 2  # the session and a warm spare
        proc.send_signal(getattr(signal, how))
        # the owner waits for its warm spare's start and both removals; each docker API call
        # may take its full 60 s client timeout on a loaded machine (seen in full runs), so
        # 3 x 60 s is the budget, plus slack
        proc.wait(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    if how == "SIGKILL":  # nothing runs in a SIGKILLed process: whoever comes next cleans up
        assert mine <= set(remove_leftovers(docker_client))
    assert owned() == set()


# -- the verifier --------------------------------------------------------------------------

@pytest.mark.docker
def test_verifier_cannot_be_swayed(sandbox, env):
    def check(diff):
        return verify(sandbox, env, BUG, diff, F2P, P2P, timeout_s=60)

    assert check(FIX)["resolved"] and check(FIX)["stripped"] == []
    nothing = check("")
    assert not nothing["resolved"] and nothing["failing"] == F2P
    # every attack alone fails; the conftest one WOULD pass if it reached the tests
    assert sandbox.run_tests(env, [BUG, CHEAT_CONFTEST], tests=F2P + P2P).statuses[F2P[0]] == "PASSED"
    for attack in (CHEAT_TEST, CHEAT_CONFTEST, CHEAT_SHADOW_PYTEST, CHEAT_OTHERS, SMUGGLED, SYMLINK):
        result = check(attack)
        assert not result["resolved"] and result["stripped"], attack
    # a real fix next to cheats still counts, with the cheats reported
    mixed = check(FIX + CHEAT_TEST + CHEAT_CONFTEST)
    assert mixed["resolved"] and {s["path"] for s in mixed["stripped"]} == {"tests/test_ops.py",
                                                                           "conftest.py"}
    # a kept diff that does not apply is unresolved, not an error
    stale = check(FIX.replace("a - b", "a * b"))
    assert not stale["resolved"] and not stale["applied"]
    # the verifier is backend-neutral
    assert verify(ProcessSandbox(python=sys.executable), env, BUG, FIX + CHEAT_CONFTEST, F2P, P2P)["resolved"]
    assert no_containers_left(sandbox) == []


def test_pytest_command_is_shared():
    # the docker backend runs exactly the process backend's command line (with the image's python3)
    argv = shlex.split(pytest_shell(None, "/tmp/r.jsonl"))
    assert argv[:2] == ["python3", "-c"] and argv[3:6] == ["/tmp/r.jsonl", "-v", "-rA"]


SECRETS = {"HF_TOKEN": "hf_planted", "AWS_SECRET_ACCESS_KEY": "aws_planted", "FORGELINE_X": "fx",
           "SNAKEMAKE_PROFILE": "sp", "GITHUB_TOKEN": "gh_planted"}


def test_sandboxed_code_sees_no_secrets(sandbox, env, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    for backend in (sandbox, ProcessSandbox(python=sys.executable)):
        with backend.session(env) as s:
            res = s.exec("env; cat /proc/self/environ | tr '\\0' '\\n'", 30)
        assert res.exit_code == 0, res.output
        for value in SECRETS.values():
            assert value not in res.output, (backend.name, value)
        # and the test process, where the package's own code runs
        probe = "import os\n\ndef test_env():\n    print(sorted(os.environ))\n    assert not [k for k in os.environ if 'TOKEN' in k or k.startswith(('AWS', 'FORGELINE', 'SNAKEMAKE'))]\n"
        patch = ("diff --git a/tests/test_env.py b/tests/test_env.py\nnew file mode 100644\n--- /dev/null\n"
                 "+++ b/tests/test_env.py\n@@ -0,0 +1,5 @@\n" + "".join("+" + line + "\n" for line in probe.splitlines()))
        run = backend.run_tests(env, [patch], ["tests/test_env.py::test_env"], timeout_s=60)
        assert run.statuses == {"tests/test_env.py::test_env": "PASSED"}, (backend.name, run.log[-800:])


# -- the sandbox verifier's diff filter: packages at an import root, flat or under src/ ----------

SHADOW = "new module outside the package (could shadow an import)"


def added(path: str, text: str = "x = 1\n") -> str:
    """A git diff part that adds `path` with `text`."""
    lines = text.splitlines()
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))


def src_or_flat_snapshot(root: Path, package: str) -> Path:
    """A repository snapshot: package `package` (`sigma` or `src/sigma`) and a test of it."""
    for rel, text in {f"{package}/__init__.py": "def mean(xs):\n    return sum(xs) // len(xs)\n",
                      "tests/test_sigma.py": "from sigma import mean\n", "README.md": "sigma\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def stripped_reasons(diff: str, root: Path) -> tuple[str, dict[str, str]]:
    kept, stripped = filter_agent_diff(diff, root)
    return kept, {s["path"]: s["reason"] for s in stripped}


# the fix a src/-layout agent may write: a module new inside the package, imported by the package
FIX_IN_PACKAGE = ("diff --git a/src/sigma/__init__.py b/src/sigma/__init__.py\n"
                  "--- a/src/sigma/__init__.py\n+++ b/src/sigma/__init__.py\n@@ -1,2 +1 @@\n"
                  "-def mean(xs):\n-    return sum(xs) // len(xs)\n+from sigma._mean import mean\n"
                  + added("src/sigma/_mean.py", "def mean(xs):\n    return sum(xs) / len(xs)\n")
                  + added("src/sigma/stats/spread.py"))


def test_a_src_layouts_package_is_under_src(tmp_path):
    root = src_or_flat_snapshot(tmp_path, "src/sigma")
    assert package_layout(root)[0] == {"src/sigma"}
    kept, reasons = stripped_reasons(FIX_IN_PACKAGE, root)
    assert kept == FIX_IN_PACKAGE and reasons == {}


def test_new_top_level_names_under_src_are_stripped(tmp_path):
    """src/ is an import root (PYTHONPATH=/testbed/src): a new name there could shadow pytest."""
    root = src_or_flat_snapshot(tmp_path, "src/sigma")
    cheats = ["src/pytest.py", "src/_pytest/__init__.py", "src/newpkg/__init__.py", "src/newpkg/mod.py",
              "src/__init__.py", "sigma/__init__.py"]
    kept, reasons = stripped_reasons("".join(added(path) for path in cheats) + FIX_IN_PACKAGE, root)
    assert kept == FIX_IN_PACKAGE and reasons == {path: SHADOW for path in cheats}


def test_a_flat_layout_is_filtered_as_before(tmp_path):
    """A snapshot without src/: its packages are at the root, and nothing under src/ is one."""
    root = src_or_flat_snapshot(tmp_path, "sigma")
    assert package_layout(root)[0] == {"sigma"}
    inside = added("sigma/_mean.py") + added("sigma/stats/spread.py")
    cheats = ["pytest.py", "_pytest/__init__.py", "src/sigma/_mean.py", "src/pytest.py"]
    kept, reasons = stripped_reasons("".join(added(path) for path in cheats) + inside, root)
    assert kept == inside and reasons == {path: SHADOW for path in cheats}
