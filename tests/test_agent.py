"""The agent: episodes, oracle trajectories, rewards, rollouts, mini-swe-agent export.

Everything runs for real on tiny sizes: two tiny repositories with a real bug each (tmp_path),
the process sandbox, the verifier, a tokenizer trained on one small repository and a Qwen3 of
~50k parameters generating through HFEngine. Scripted policies are Engines that replay texts.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline.agent import (episode as ep_mod, oracle, oracle_script, rewards, rollout as ro, tools,  # noqa: E402
                             trajectory)
from forgeline import config  # noqa: E402
from forgeline.agent.episode import run_episode  # noqa: E402
from forgeline.agent.oracle import ScriptedEngine  # noqa: E402
from forgeline.policy.chat import format_tool_call, render_ids  # noqa: E402
from forgeline.policy.engine import HFEngine  # noqa: E402
from forgeline.sandbox.process import ProcessSandbox  # noqa: E402
from forgeline.sandbox.verify import Verdicts  # noqa: E402
from forgeline.tasks.generate import make_patch  # noqa: E402
from forgeline.tasks.repos import RepoSnapshot  # noqa: E402

from embedded import PARAMS  # noqa: E402
from tiny_models import direct_python, tiny_lm, tok  # noqa: E402
from tiny_project import TINY_REPOS, write_repo  # noqa: E402

__all__ = ["direct_python", "tok"]  # fixtures from tiny_models: pytest finds them by these names

torch.set_num_threads(1)
# the embedded agent at test size, sampling at T=1, checking ids, the oracle's fix right after its grep
CFG = config.merged(PARAMS.agent, {"context_limit": 2048, "max_new_tokens": 48, "max_steps": 6,
                                   "command_timeout_s": 20, "max_invalid_calls": 3, "temperature": 1.0,
                                   "alignment": "ids", "oracle": {"max_lines": 30, "max_guesses": 0}})
CONFIG_TOOLS = PARAMS.agent.tools
REWARD = PARAMS.agent.reward


def call(name: str, **args) -> str:
    return format_tool_call(name, args)


@pytest.fixture(scope="module")
def lm(tok):
    return tiny_lm(tok)


@pytest.fixture(scope="module")
def sandbox():
    return ProcessSandbox()


def _task(name: str, old: str, new: str, f2p: list[str], statement: str, function: str) -> dict:
    source, tests = TINY_REPOS[name]
    assert old in source
    ids = [line.split("(")[0][4:] for line in tests.splitlines() if line.startswith("def test_")]
    p2p = [f"tests/test_{name}.py::{t}" for t in ids if f"tests/test_{name}.py::{t}" not in f2p]
    return {"instance_id": f"{name}.0000.op__{function}", "repo": name,
            "patch": make_patch(f"{name}/__init__.py", source, source.replace(old, new)),
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "problem_statement": statement,
            "image_name": f"forgeline/{name}:0", "mutation": {"file": f"{name}/__init__.py",
                                                                "function": function, "kind": "op"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("repos")
    for name in ("alpha", "beta"):
        write_repo(root, name, *TINY_REPOS[name])
    alpha = _task("alpha", "return a + b", "return a - b",
                  ["tests/test_alpha.py::test_add", "tests/test_alpha.py::test_add_zero"],
                  "`alpha.add` returns a wrong result: add(2, 3) gives -1, expected 5.", "add")
    beta = _task("beta", "if x > t:", "if x >= t:", ["tests/test_beta.py::test_count_above_edge"],
                 "`beta.count_above` counts items equal to t: count_above([4, 4], 4) gives 2, expected 0.",
                 "count_above")
    envs = {n: RepoSnapshot.load(root, n).env() for n in ("alpha", "beta")}
    return {"root": root, "alpha": alpha, "beta": beta, "envs": envs}


def solve_script(task: dict) -> list[str]:
    """A correct solution of a world task, by hand (not the oracle)."""
    if task["repo"] == "alpha":
        edit = call("edit", path="alpha/__init__.py", old="return a - b", new="return a + b")
    else:
        edit = call("edit", path="beta/__init__.py", old="x >= t", new="x > t")
    return ["Let me look.\n" + call("bash", command="grep -n def " + task["repo"] + "/__init__.py"), edit,
            call("bash", command="python3 -m pytest -q " + " ".join(task["FAIL_TO_PASS"])),
            call("submit")]


def strip_volatile(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in ("timing", "rollout_key")}


# -- oracle -------------------------------------------------------------------------------

def test_oracle_trajectory_resolves_is_aligned_and_exports(world, tok, sandbox, tmp_path):
    task = world["alpha"]
    rec = oracle.oracle_episode(task, sandbox, tok, config.merged(CFG, {"max_new_tokens": 128}),
                                env=world["envs"]["alpha"])
    assert rec["outcome"] == "resolved" and rec["exit_status"] == "submitted" and rec["source"] == "oracle"
    assert rec["oracle_actions"] == ["bash", "edit", "bash", "submit"]
    assert rec["verdict"]["resolved"] and rec["verdict"]["fail_to_pass"] == {"passed": 2, "total": 2}
    assert "+    return a + b" in rec["submission"]
    # token alignment: prefix-consistent with the chat template, ids and text
    assert rec["alignment_valid"] and rec["alignment"]["ids_match"] and rec["alignment"]["text_match"]
    assert rec["alignment"]["drift_turns"] == [] and rec["ppo_valid"]
    assert len(rec["tokens"]) == len(rec["action_mask"]) == len(rec["logprobs"])
    assert set(rec["logprobs"]) == {0.0} and sum(rec["action_mask"]) == rec["stats"]["output_tokens"]
    for turn in rec["turns"]:
        a, b = turn["span"]
        assert rec["tokens"][a:b] == turn["token_ids"] and turn["labels"]["well_formed_call"]
    # real tool outputs: the grep found the function, the tests ran and passed
    outputs = [m["content"] for m in rec["messages"] if m["role"] == "tool"]
    assert "./alpha/__init__.py:1:def add(a, b):\n" in outputs[0] and "./alpha/__init__.py-3-    return a - b" in outputs[0]
    assert outputs[1] == "edited ./alpha/__init__.py"
    assert outputs[2].startswith("exit code: 0") and " passed" in outputs[2] and " in 0." not in outputs[2]
    assert rec["turns"][2]["labels"]["tests_improved"] is True
    json.dumps(rec)
    # mini-swe-agent export
    paths = trajectory.export_trajectories([rec], tmp_path)
    traj = json.loads((tmp_path / task["instance_id"] / f"{task['instance_id']}.traj.json").read_text())
    assert traj["info"]["exit_status"] == "submitted" and traj["info"]["submission"] == rec["submission"]
    assert traj["info"]["model_stats"]["api_calls"] == 4 == traj["info"]["model_stats"]["steps"]
    assert traj["info"]["model_stats"]["input_tokens"] == rec["stats"]["input_tokens"]
    assert [m["role"] for m in traj["messages"]][:4] == ["system", "user", "assistant", "user"]
    preds = json.loads((tmp_path / "preds.json").read_text())
    assert preds[task["instance_id"]]["model_patch"] == rec["submission"] and len(paths) == 2


def test_oracle_edit_for_a_removed_statement_and_patch_round_trip():
    clean = "def f(xs):\n    out = list(xs)\n    out.sort()\n    return out\n\n\ndef g():\n    out = []\n    return out\n"
    buggy = clean.replace("    out.sort()\n", "")
    patch = make_patch("pkg/m.py", clean, buggy)
    hunks = oracle_script.parse_patch(patch)["pkg/m.py"]
    assert oracle_script.apply_hunks(clean, hunks) == buggy
    old, new = oracle_script.fix_edit(hunks[0], buggy)
    assert buggy.count(old) == 1 and buggy.replace(old, new) == clean
    assert old == "    out = list(xs)" and oracle_script.enclosing_function(buggy, 3) == ("f", 1, 3)



def test_oracle_scan_tests_each_candidate_takes_it_back_then_fixes(world, tok, sandbox):
    task = world["beta"]
    cfg = config.merged(CFG, {"max_new_tokens": 128, "oracle": {"max_guesses": 12}})
    rec = oracle.oracle_episode(task, sandbox, tok, cfg, env=world["envs"]["beta"])
    assert rec["oracle_guesses"] >= 2 and oracle.usable_oracle_episode(rec)
    n = rec["oracle_guesses"]
    assert rec["oracle_actions"] == ["bash"] + ["edit", "bash"] * (n + 1) + ["submit"]
    edits = [t["tool_calls"][0]["arguments"] for t in rec["turns"] if t["tool_calls"][0]["name"] == "edit"]
    assert [e["line"] for e in edits] == sorted(e["line"] for e in edits)  # top to bottom
    outputs = [m["content"] for m in rec["messages"] if m["role"] == "tool"]
    # each wrong edit really broke the suite and `git checkout .` really took it back
    for g in range(n):
        run = outputs[2 + 2 * g]
        assert run.startswith("exit code: 0") and " failed" in run and run.rstrip().endswith(oracle_script.REVERTED)
    assert " failed" not in outputs[-1] and oracle_script.REVERTED not in outputs[-1] and rec["outcome"] == "resolved"
    added = [ln for ln in rec["submission"].splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert added == ["+        if x > t:"]  # only the fix is left in the diff
    assert oracle.oracle_episode(task, sandbox, tok, cfg, env=world["envs"]["beta"])["messages"] == rec["messages"]
    # a scan that may not try that many wrong edits first gives no episode
    fewer = config.merged(cfg, {"oracle": {"max_guesses": n - 1}})
    assert oracle.oracle_episode(task, sandbox, tok, fewer, env=world["envs"]["beta"]) is None


def test_fix_arguments_line_scoped_where_one_line_changed():
    clean = "def f(a, b):\n    if a <= b and b < 9:\n        return a - b\n    return b\n"
    # `<` occurs twice in the buggy line: the span grows until `old` is unique there
    buggy = clean.replace("    if a <= b and b < 9:\n", "    if a < b and b < 9:\n")
    hunk = oracle_script.parse_patch(make_patch("p/m.py", clean, buggy))["p/m.py"][0]
    line, old, new = oracle_script.line_fix(hunk)
    assert line == 2 and buggy.splitlines()[1].count(old) == 1 and len(old) < 8
    assert tools.apply_edit(buggy, old, new, line) == clean
    buggy = clean.replace("a - b", "a + b")
    hunk = oracle_script.parse_patch(make_patch("p/m.py", clean, buggy))["p/m.py"][0]
    assert oracle_script.line_fix(hunk) == (3, "+", "-")
    # the edit a policy writes: grep's line number and the changed token, nothing copied
    assert oracle_script.fix_arguments("p/m.py", hunk, buggy) == {"path": "p/m.py", "line": 3, "old": "+", "new": "-"}
    # a removed statement has no '+' line: the file-level form is kept
    removed = clean.replace("        return a - b\n", "")
    hunk = oracle_script.parse_patch(make_patch("p/m.py", clean, removed))["p/m.py"][0]
    assert oracle_script.line_fix(hunk) is None and "line" not in oracle_script.fix_arguments("p/m.py", hunk, removed)
    # with `line`, the nearest line that holds `old` once (the earlier of two as near)
    assert tools.apply_edit(clean, "a", "c", 9) is None          # no line 9
    assert tools.apply_edit(clean, "zz", "c", 2) is None         # in no line
    assert tools.apply_edit(clean, "b", "c", 2) == clean.replace("f(a, b)", "f(a, c)")  # twice in line 2
    assert tools.apply_edit(clean, "<=", "<", 3) == clean.replace("<=", "<")
    assert tools.apply_edit(clean, "return", "yield", 3) == clean.replace("return a", "yield a")
    assert tools.apply_edit(clean, "    ", "  ", 1) == clean.replace("    if", "  if")  # lines 2, 3 ...


def test_grep_after_prints_what_gnu_grep_prints(tmp_path):
    """The synthetic SFT conversations write grep's output themselves: it must be real grep's,
    byte for byte (matches, context lines, group separators, a last line without newline)."""
    import subprocess

    text = ("def f(a):\n    return a\n\n\n\n\n\ndef f(b):\n    def f(c):\n        return c\n"
            "    return b\n" + "x = 1\n" * 5 + "def f(d): return d")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(text)
    for after in (0, 2, 4):
        real = subprocess.run(["grep", "-rn", "-A", str(after), "def f(", "pkg"], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout
        assert oracle_script.grep_after(text.splitlines(True), "pkg/m.py", "def f(", after) == real
    assert oracle_script.find_function_command("f", 20) == 'grep -rn -A 19 "def f(" .'
    real = subprocess.run(["grep", "-rn", "-A", "2", "def f(", "."], cwd=tmp_path,
                          capture_output=True, text=True, check=True).stdout
    assert oracle_script.grep_after(text.splitlines(True), oracle_script.shown_path("pkg/m.py"), "def f(", 2) == real


def test_scan_edits_are_the_generators_edits_of_the_window_in_source_order():
    clean = ("def f(a, b):\n    if a <= b and b > 9:\n        return a - b * 2\n    return b\n"
             "\n\ndef g(x):\n    return x + 1\n")
    buggy = clean.replace("a - b", "a + b")
    scan = list(oracle_script.scan_edits(buggy, "p/m.py", range(1, 5)))
    assert len(scan) >= 4
    made = []
    for e in scan:
        assert set(e) == {"path", "line", "old", "new"} and 2 <= e["line"] <= 4
        out = tools.apply_edit(buggy, e["old"], e["new"], e["line"])
        assert out is not None and out != buggy and out not in made
        made.append(out)
        assert out.endswith("return x + 1\n")  # g() lies outside the window
    assert [e["line"] for e in scan] == sorted(e["line"] for e in scan)
    assert clean in made  # the fix is one of them
    to_fix = oracle_script.scan_to_fix(buggy, clean, "p/m.py", range(1, 5), 12)
    assert to_fix == scan[:made.index(clean) + 1]
    assert oracle_script.scan_to_fix(buggy, clean, "p/m.py", range(1, 5), made.index(clean) - 1) is None
    assert oracle_script.scan_to_fix(buggy, clean, "p/m.py", range(1, 2), 12) is None  # not on line 1


def test_scan_reaches_a_negated_condition_whose_fix_leaves_the_parentheses():
    # invert_if negates a compound test as `not (...)`; the scan's drop-not leaves `(...)`: the
    # same program as the clean file, so it is the fix
    clean = "def f(a, b):\n    if a < b:\n        return a\n    return b\n"
    buggy = clean.replace("if a < b:", "if not (a < b):")
    scan = oracle_script.scan_to_fix(buggy, clean, "p/m.py", range(1, 5), 12)
    assert scan is not None and scan[-1]["new"] == "" and scan[-1]["old"].startswith("not")
    assert tools.apply_edit(buggy, scan[-1]["old"], "", scan[-1]["line"]) == clean.replace("a < b", "(a < b)")
    assert oracle_script.same_program("x = (a < b)\n", "x = a < b\n")
    assert not oracle_script.same_program("x = (a or b) and c\n", "x = a or b and c\n")
    assert not oracle_script.same_program(None, "x = 1\n") and not oracle_script.same_program("x = (\n", "x = 1\n")


# -- episodes -----------------------------------------------------------------------------

def test_random_tiny_policy_episode_records_aligned_tokens_and_true_logprobs(world, tok, lm, sandbox):
    engine = HFEngine(lm, tok)
    rec = run_episode(world["alpha"], 3, engine, sandbox, config.merged(CFG, {"max_steps": 3, "temperature": 1.0}),
                      env=world["envs"]["alpha"], policy="init")
    assert rec["outcome"] in rewards.OUTCOMES and rec["outcome"] != "resolved"
    assert rec["stats"]["steps"] == len(rec["turns"]) >= 1
    tokens, mask, lps = rec["tokens"], rec["action_mask"], rec["logprobs"]
    assert len(tokens) == len(mask) == len(lps)
    assert sum(mask) == rec["stats"]["output_tokens"] == sum(len(t["token_ids"]) for t in rec["turns"])
    assert rec["alignment"]["template_prefix_ok"]
    # the text matches the template unless a turn ended on <|endoftext|> (the template says <|im_end|>)
    assert rec["alignment"]["text_match"] == (not rec["alignment"]["foreign_eos_turns"])
    assert rec["alignment_valid"] == rec["alignment"]["ids_match"]  # the default check: ids
    for turn in rec["turns"]:
        a, b = turn["span"]
        assert tokens[a:b] == turn["token_ids"] and lps[a:b] == turn["logprobs"] and set(mask[a:b]) == {1}
    with torch.no_grad():
        logits = lm(torch.tensor([tokens])).logits[0]
    ref = torch.log_softmax(logits[:-1].float(), -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
    gen = torch.tensor(mask[1:], dtype=torch.bool)
    assert torch.allclose(ref[gen], torch.tensor(lps[1:])[gen], atol=1e-4)
    assert all(x == 0.0 for x, m in zip(lps, mask) if not m)
    json.dumps(rec)


@pytest.mark.parametrize("case", ["solve", "edit_tests", "malformed", "loop", "context"])
def test_scripted_policies(case, world, tok, sandbox):
    task = world["alpha"]
    scripts = {
        "solve": solve_script(task),
        "edit_tests": [call("edit", path="tests/test_alpha.py", old="assert add(2, 3) == 5", new="assert True"),
                       call("edit", path="tests/test_alpha.py", old="assert add(0, 4) == 4", new="assert True"),
                       call("bash", command="python3 -m pytest -q tests/test_alpha.py"), call("submit")],
        "malformed": ["<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"\n</tool_call>",
                      "I think the bug is in add.", call("bash", cmd="ls")],
        "loop": [call("bash", command="ls alpha")],
        "context": [call("bash", command="cat tests/test_alpha.py")],
    }[case]
    engine = ScriptedEngine.replay(tok, {task["problem_statement"]: scripts})
    limits = {"max_new_tokens": 128, "max_steps": 5}
    if case == "context":
        first = [{"role": "system", "content": tools.system_prompt(task)},
                 {"role": "user", "content": tools.user_prompt(task)}]
        limits["context_limit"] = len(render_ids(tok, first, tools.tool_schemas(CONFIG_TOOLS))) + 128 + 120
    rec = run_episode(task, 0, engine, sandbox, config.merged(CFG, limits),
                      env=world["envs"]["alpha"], tokenizer=tok, policy="scripted")
    labels = [t["labels"] for t in rec["turns"]]
    assert rec["alignment"]["ids_match"]  # replayed texts are the tokenizer's own ids
    if case == "solve":
        assert rec["outcome"] == "resolved" and rec["exit_status"] == "submitted"
        assert labels[1]["command_ran"] and labels[2]["tests_improved"] is True
        assert rec["turns"][0]["tool_calls"][0]["arguments"] == {"command": "grep -n def alpha/__init__.py"}
    elif case == "edit_tests":
        # the agent's run shows the (edited) tests passing; the verifier restores them
        assert "5 passed" in rec["messages"][-2]["content"]
        assert rec["outcome"] == "failed" and not rec["verdict"]["resolved"]
        assert [s["path"] for s in rec["verdict"]["stripped"]] == ["tests/test_alpha.py"]
    elif case == "malformed":
        assert rec["outcome"] == "invalid" and rec["exit_status"] == "invalid_calls"
        assert [t["tool_calls"][0]["error"] if t["tool_calls"] else None for t in rec["turns"]] == \
            ["invalid_json", None, "missing_argument"]
        assert not any(lab["well_formed_call"] for lab in labels)
        assert all(t["process_reward"] < 0 for t in rec["turns"])
        assert rec["messages"][5] == {"role": "user", "content": tools.NO_CALL_MESSAGE}
    elif case == "context":
        assert rec["outcome"] == "context_exceeded" and 1 <= rec["stats"]["steps"] < 5
        last_prompt = rec["turns"][-1]["prompt_tokens"]
        assert last_prompt + 128 <= rec["stats"]["sequence_tokens"] and last_prompt + 128 <= 2048
    else:
        assert rec["outcome"] == "step_limit" and rec["stats"]["steps"] == 5
        assert all(lab == {"well_formed_call": True, "command_ran": True, "no_error": True,
                           "tests_improved": None} for lab in labels)


@pytest.mark.parametrize("cap", [0, 3])
def test_malformed_turns_in_all_end_the_episode(cap, world, tok, sandbox):
    """Broken calls between good ones never make 3 in a row; max_malformed_turns counts them all."""
    task = world["alpha"]
    bad = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"\n</tool_call>"
    engine = ScriptedEngine.replay(tok, {task["problem_statement"]: [bad, call("bash", command="ls")] * 4})
    cfg = config.merged(CFG, {"max_new_tokens": 128, "max_steps": 8, "max_malformed_turns": cap})
    rec = run_episode(task, 0, engine, sandbox, cfg, env=world["envs"]["alpha"], tokenizer=tok,
                      policy="scripted")
    formed = [t["labels"]["well_formed_call"] for t in rec["turns"]]
    if cap:
        assert (rec["outcome"], rec["exit_status"]) == ("invalid", "invalid_calls")
        assert formed == [False, True, False, True, False]  # ends at the 3rd broken turn
    else:
        assert rec["outcome"] == "step_limit" and formed == [False, True] * 4
    assert rec["stats"]["malformed_turns"] == formed.count(False)


def test_edit_tool_in_the_sandbox_takes_any_text(world, sandbox):
    new = 'x = "$HOME `id` \'q\' \\n ü"\n    """Sum."""'
    with sandbox.session(world["envs"]["alpha"], []) as s:
        res = s.exec(tools.edit_command("alpha/__init__.py", '    """Sum."""', "    " + new), 20)
        assert (res.exit_code, res.output) == (0, "edited alpha/__init__.py\n")
        text = s.exec("cat alpha/__init__.py", 20).output
        assert text.startswith("def add(a, b):\n    " + new + "\n    return a + b\n")
        twice = s.exec(tools.edit_command("alpha/__init__.py", "return", "yield"), 20)
        assert twice.exit_code == 1 and "occurs 4 times" in twice.output
        missing = s.exec(tools.edit_command("nope.py", "a", "b"), 20)
        assert missing.exit_code == 1 and "cannot read nope.py" in missing.output
        assert "x = " in s.diff() and "nope" not in s.diff()
        # a path without its folder, where one file of the repository has that name
        moved = s.exec(tools.edit_command("./test_alpha.py", "add(2, 3) == 5", "add(3, 2) == 5"), 20)
        assert (moved.exit_code, moved.output) == (0, "edited ./tests/test_alpha.py\n")
        assert "add(3, 2) == 5" in s.exec("cat tests/test_alpha.py", 20).output
        s.exec("cp alpha/__init__.py alpha/copy.py && cp alpha/__init__.py copy.py", 20)
        s.exec("mkdir -p other && cp alpha/__init__.py other/copy.py", 20)
        two = s.exec(tools.edit_command("./x/copy.py", "a", "b"), 20)
        assert two.exit_code == 1 and "cannot read ./x/copy.py" in two.output
        # an edit to the same text is done without touching the file: git's answer cannot
        # depend on the clock (a rewrite within the index's second reads as unchanged)
        before = s.exec("stat -c %Y.%y alpha/copy.py", 20).output
        same = s.exec(tools.edit_command("alpha/copy.py", "return a + b", "return a + b"), 20)
        assert same.output == "edited alpha/copy.py\n" and s.exec("stat -c %Y.%y alpha/copy.py", 20).output == before

    # with `line`: the script does what its pure twin does, and says where it edited
    source = TINY_REPOS["alpha"][0]
    for line, old, new_text, said in [(3, "+", "-", "edited alpha/__init__.py"),
                                      (5, "+", "-", "edited alpha/__init__.py at line 3"),
                                      (9, "x", "y", "edited alpha/__init__.py at line 8"),
                                      (2, "zz", "y", "edit failed: no line of alpha/__init__.py holds old")]:
        with sandbox.session(world["envs"]["alpha"], []) as s:
            res = s.exec(tools.edit_command("alpha/__init__.py", old, new_text, line), 20)
            assert res.output.startswith(said)
            expected = tools.apply_edit(source, old, new_text, line)
            assert s.exec("cat alpha/__init__.py", 20).output == (expected if expected is not None else source)


def test_outcome_mapping(world, tok, sandbox):
    ep = ep_mod.Episode(world["alpha"], 0, tok, sandbox, world["envs"]["alpha"], CFG)
    expect = {"submitted": ("resolved", "failed"), "wall_time": ("timeout", "timeout"),
              "step_limit": ("step_limit", "step_limit"), "token_limit": ("step_limit", "step_limit"),
              "context_exceeded": ("context_exceeded", "context_exceeded"),
              "invalid_calls": ("invalid", "invalid")}
    for status, (if_resolved, if_not) in expect.items():
        ep.exit_status = status
        assert (ep.outcome({"resolved": True}), ep.outcome({"resolved": False})) == (if_resolved, if_not)
    ep.cfg = replace(ep.cfg, credit_unsubmitted=True)
    ep.exit_status = "step_limit"
    assert ep.outcome({"resolved": True}) == "resolved"


def test_tool_helpers():
    assert tools.normalize_pytest("..    [100%]\n=== 1 failed, 2 passed in 0.31s ===\n3 passed in 12.00s (0:00:12)") == \
        ".. [100%]\n=== 1 failed, 2 passed ===\n3 passed"
    assert tools.truncate("a" * 50 + "b" * 50, 20) == "a" * 10 + "\n[... 80 characters cut ...]\n" + "b" * 10
    assert tools.looks_like_error("Traceback (most recent call last):\n  x\nValueError: no")
    assert tools.looks_like_error("bash: line 1: foo: command not found")
    assert not tools.looks_like_error("    raise ValueError(x)\nerror_count = 0\nE   assert 1 == 2")
    f2p = ["tests/test_a.py::test_x", "tests/test_a.py::test_y"]
    assert tools.f2p_passing("ls", "2 passed", f2p) is None
    assert tools.f2p_passing("python3 -m pytest -q tests/test_a.py", "..\n2 passed\n", f2p) == 2
    assert tools.f2p_passing("pytest -q", "F.\nFAILED tests/test_a.py::test_x - assert 0\n1 failed, 1 passed\n", f2p) == 1
    assert tools.f2p_passing("pytest -q -x", "F\nFAILED tests/test_a.py::test_x - assert 0\n1 failed\n", f2p) == 0
    # -rN: failures without their names, so which F2P tests pass is unknown; all passing is known
    assert tools.f2p_passing("python3 -m pytest -q --tb=no -rN", "F. [100%]\n1 failed, 1 passed\n", f2p) is None
    assert tools.f2p_passing("python3 -m pytest -q --tb=no -rN", ".. [100%]\n2 passed\n", f2p) == len(f2p)
    assert tools.f2p_passing("pytest tests/test_b.py", "3 passed\n", f2p) == 0
    with pytest.raises(config.ConfigError, match="unknown key 'max_stepz' .did you mean 'max_steps'"):
        config.merged(CFG, {"max_stepz": 3})


# -- rewards ------------------------------------------------------------------------------

def _ep(outcome: str, steps: int, labels=()) -> dict:
    return {"instance_id": "x", "outcome": outcome, "stats": {"steps": steps},
            "turns": [{"labels": lab, "span": [2 * i, 2 * i + 1]} for i, lab in enumerate(labels)],
            "tokens": [0] * (2 * len(labels))}


def test_rewards_terminal_shaped_cap_and_process():
    shaped = config.merged(REWARD, {"kind": "shaped", "process_weight": 0.0})
    expect = {"resolved": 1.0, "failed": -0.2, "timeout": -0.5, "context_exceeded": -0.5,
              "invalid": -0.2, "step_limit": -0.2}
    for outcome, base in expect.items():
        assert rewards.terminal_reward(_ep(outcome, 10)) == (1.0 if outcome == "resolved" else 0.0)
        assert rewards.shaped_reward(_ep(outcome, 10), shaped) == pytest.approx(base - 0.1)
        assert rewards.outcome_reward(_ep(outcome, 10), config.merged(REWARD, {"kind": "terminal"})) == \
            rewards.terminal_reward(_ep(outcome, 10))
    assert rewards.shaped_reward(_ep("resolved", 500), REWARD) == pytest.approx(0.7)  # cap 0.3
    assert rewards.shaped_reward(_ep("failed", 30), REWARD) == pytest.approx(-0.5)
    assert rewards.step_penalty(29, REWARD) == pytest.approx(0.29)
    assert rewards.step_penalty(31, REWARD) == pytest.approx(0.3)
    good = {"well_formed_call": True, "command_ran": True, "no_error": True, "tests_improved": True}
    bad = {"well_formed_call": False, "command_ran": False, "no_error": None, "tests_improved": None}
    assert rewards.process_reward(good, REWARD.process_weights) == pytest.approx(0.09)
    assert rewards.process_reward(bad, REWARD.process_weights) == pytest.approx(-0.03)
    ep = _ep("resolved", 2, [bad, good])
    assert rewards.step_rewards(ep, REWARD) == pytest.approx([-0.03, 0.09 + 1.0 - 0.02])
    assert rewards.episode_return(ep, REWARD) == pytest.approx(1.04)
    assert rewards.token_rewards(ep, REWARD) == pytest.approx([-0.03, 0.0, 1.07, 0.0])
    assert rewards.step_rewards(ep, config.merged(REWARD, {"process_weight": 0.0})) == pytest.approx([0.0, 0.98])
    with pytest.raises(ValueError):
        rewards.shaped_reward(_ep("crashed", 1), REWARD)
    assert rewards.summarize([ep, _ep("failed", 1)], REWARD)["outcomes"]["failed"] == 1


# -- rollouts -----------------------------------------------------------------------------

def test_rollout_concurrent_resumable_and_sorted(world, tok, sandbox, tmp_path):
    tasks = [world["beta"], world["alpha"]]
    pairs = [(t, s) for t in tasks for s in (1, 0)]
    scripts = {t["problem_statement"]: solve_script(t)[1::2] for t in tasks}  # edit, submit
    cfg = config.merged(CFG, {"max_new_tokens": 128, "rollout": {"concurrency": 4}})
    record = tmp_path / "episodes.partial"
    engine = ScriptedEngine.replay(tok, scripts)
    first = ro.rollout(pairs, engine, sandbox, cfg, envs=world["envs"], record_path=record,
                       tokenizer=tok, policy="scripted", progress=False)
    assert [(r["instance_id"], r["seed"]) for r in first] == sorted((t["instance_id"], s) for t, s in pairs)
    assert all(r["outcome"] == "resolved" for r in first)
    assert engine.calls == 2 and engine.prompts == 8  # step-synchronous: 2 rounds of 4 prompts
    assert len(ro.load_records(record)) == 4
    # "killed" after one episode, mid-way through writing the second
    lines = record.read_text().splitlines()
    record.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    survivor = json.loads(lines[0])
    engine2 = ScriptedEngine.replay(tok, scripts)
    again = ro.rollout(pairs, engine2, sandbox, cfg, envs=world["envs"], record_path=record,
                       tokenizer=tok, policy="scripted", progress=False)
    assert engine2.prompts == 6  # only the 3 unfinished episodes ran
    assert [strip_volatile(r) for r in again] == [strip_volatile(r) for r in first]
    assert next(r for r in again if ro.episode_key(r) == ro.episode_key(survivor)) == survivor
    assert len(ro.load_records(record)) == 4
    # a call for some of the pairs (a screen's first round, resumed) leaves the others' records in
    engine3 = ScriptedEngine.replay(tok, scripts)
    part = ro.rollout(pairs[:2], engine3, sandbox, cfg, envs=world["envs"], record_path=record,
                      tokenizer=tok, policy="scripted", progress=False)
    assert engine3.prompts == 0 and len(part) == 2 and len(ro.load_records(record)) == 4
    with pytest.raises(ValueError, match="another policy"):
        ro.rollout(pairs, engine2, sandbox, cfg, envs=world["envs"], record_path=record,
                   tokenizer=tok, policy="other", progress=False)


class CountingSandbox(ProcessSandbox):
    """The process sandbox, counting the sessions it opens and the test runs it makes."""

    def __init__(self):
        super().__init__()
        self.sessions = self.test_runs = 0

    def session(self, env, patches=()):
        self.sessions += 1
        return super().session(env, patches)

    def run_tests(self, *args, **kwargs):
        self.test_runs += 1
        return super().run_tests(*args, **kwargs)


def test_rollout_opens_sessions_at_the_first_call_and_grades_equal_answers_once(world, tok):
    """Two seeds that only ever write malformed calls open no session and share the empty diff's
    run; two that submit the same fix share its run; the verdicts are those of separate runs."""
    sandbox = CountingSandbox()
    alpha, beta = world["alpha"], world["beta"]
    bad = "<tool_call>\n{\"name\": \"bash\"\n</tool_call>"
    scripts = {alpha["problem_statement"]: [bad] * 4, beta["problem_statement"]: solve_script(beta)[1::2]}
    cfg = config.merged(CFG, {"max_new_tokens": 128, "max_malformed_turns": 2, "rollout": {"concurrency": 4}})
    pairs = [(t, s) for t in (alpha, beta) for s in (0, 1)]
    recs = ro.rollout(pairs, ScriptedEngine.replay(tok, scripts), sandbox, cfg, envs=world["envs"],
                      tokenizer=tok, policy="scripted", progress=False)
    assert [(r["instance_id"], r["outcome"]) for r in recs] == \
        [(alpha["instance_id"], "invalid")] * 2 + [(beta["instance_id"], "resolved")] * 2
    assert sandbox.sessions == 2  # beta's two episodes: alpha's never ran a command
    assert sandbox.test_runs == 2  # one for alpha's empty diff, one for beta's fix
    assert sorted(r["timing"]["verify_cached"] for r in recs) == [False, False, True, True]
    alone = [run_episode(t, s, ScriptedEngine.replay(tok, scripts), ProcessSandbox(), cfg, env=world["envs"][t["repo"]],
                         tokenizer=tok, policy="scripted") for t, s in pairs]
    assert [strip_volatile(r) for r in alone] == [strip_volatile(r) for r in recs]
    assert not any(r["timing"]["verify_cached"] for r in alone)


def test_calls_that_share_verdicts_grade_a_fix_found_again_once(world, tok):
    """An RL run's steps share their test runs: the fix a later step submits again is not rerun,
    and its verdict is the one a run gives."""
    beta = world["beta"]
    scripts = {beta["problem_statement"]: solve_script(beta)[1::2]}
    cfg = config.merged(CFG, {"max_new_tokens": 128})
    shared, sandbox = Verdicts(), CountingSandbox()
    steps = [ro.rollout([(beta, seed)], ScriptedEngine.replay(tok, scripts), sandbox, cfg, envs=world["envs"],
                        tokenizer=tok, policy="scripted", progress=False, verdicts=shared)[0]
             for seed in (0, 1)]
    assert sandbox.test_runs == 1
    assert [r["timing"]["verify_cached"] for r in steps] == [False, True]
    assert [r["outcome"] for r in steps] == ["resolved"] * 2 and steps[0]["verdict"] == steps[1]["verdict"]


def test_rollout_hf_engine_same_seeds_same_episodes(world, tok, lm, sandbox):
    engine = HFEngine(lm, tok)
    cfg = config.merged(CFG, {"max_steps": 1, "max_new_tokens": 24})
    pairs = [(world["alpha"], 0), (world["alpha"], 1)]
    runs = [ro.rollout(pairs, engine, sandbox, cfg, envs=world["envs"], tokenizer=tok, progress=False)
            for _ in range(2)]
    assert [strip_volatile(r) for r in runs[0]] == [strip_volatile(r) for r in runs[1]]
    assert runs[0][0]["turns"][0]["token_ids"] != runs[0][1]["turns"][0]["token_ids"]
    for rec in runs[0]:  # sampled in a left-padded batch; a plain forward pass agrees
        tokens, mask = rec["tokens"], torch.tensor(rec["action_mask"][1:], dtype=torch.bool)
        with torch.no_grad():
            logits = lm(torch.tensor([tokens])).logits[0, :-1]
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
        assert torch.allclose(ref[mask], torch.tensor(rec["logprobs"][1:])[mask], atol=1e-4)
    # seeding: episode -> an episode does not depend on its batch, and equals run_episode's: the
    # same tokens; the log-probs up to the float rounding of batched arithmetic
    per = config.merged(cfg, {"rollout": {"seeding": "episode"}})
    batch = ro.rollout([(world["alpha"], 7), (world["beta"], 7)], engine, sandbox, per,
                       envs=world["envs"], tokenizer=tok, progress=False)
    alone = run_episode(world["alpha"], 7, engine, sandbox, per, env=world["envs"]["alpha"], tokenizer=tok)

    def without_logprobs(rec):
        turns = [{k: v for k, v in t.items() if k != "logprobs"} for t in rec["turns"]]
        return {**{k: v for k, v in strip_volatile(rec).items() if k != "logprobs"}, "turns": turns}
    assert without_logprobs(batch[0]) == without_logprobs(alone)
    assert torch.allclose(torch.tensor(batch[0]["logprobs"]), torch.tensor(alone["logprobs"]), atol=1e-5)
    # two lanes take turns (one generates while the other's tools run): the same episodes
    # (the config digest names the lanes)
    laned = ro.rollout([(world["alpha"], 7), (world["beta"], 7)], engine, sandbox,
                       config.merged(per, {"rollout": {"lanes": 2, "concurrency": 2}}), envs=world["envs"], tokenizer=tok,
                       progress=False)
    assert [{**without_logprobs(r), "config_digest": None} for r in laned] == \
        [{**without_logprobs(r), "config_digest": None} for r in batch]
