"""Stage `report`: the evidence page from small inputs in the real formats (made with the stages'
own pure functions where they exist: funnel, split summary, difficulty report, paired tables)."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from forgeline.agent import difficulty as df
from forgeline.config import Config
from forgeline.params import EvalGateConfig
from forgeline.evaluation import report as rp, tables as tb
from forgeline.provenance import Manifest, write_json
from forgeline.tasks import funnel as fn, split as sp

from embedded import PARAMS

RULEGRAPH = """digraph snakemake_dag {
    graph[bgcolor=white, margin=0];
    node[shape=box, style=rounded, fontname=sans,                 fontsize=10, penwidth=2];
    edge[penwidth=2, color=grey];
	0[label = "all", color = "0.00 0.6 0.85", style="rounded"];
	1[label = "funnel", color = "0.07 0.6 0.85", style="rounded"];
	2[label = "ingest", color = "0.37 0.6 0.85", style="rounded"];
	3[label = "generate", color = "0.15 0.6 0.85", style="rounded"];
	4[label = "tables", color = "0.30 0.6 0.85", style="rounded"];
	1 -> 0
	4 -> 0
	2 -> 1
	3 -> 2
}
"""


def test_rulegraph_parsing_and_layers():
    names, edges = rp.parse_rulegraph(RULEGRAPH)
    assert names == ["all", "funnel", "generate", "ingest", "tables"]
    assert edges == [("funnel", "all"), ("generate", "ingest"), ("ingest", "funnel"), ("tables", "all")]
    assert rp.dag_layers(names, edges) == [["generate", "tables"], ["ingest"], ["funnel"], ["all"]]
    with pytest.raises(ValueError, match="cycle"):
        rp.dag_layers(["a", "b"], [("a", "b"), ("b", "a")])


def test_ppo_rows_fill_missing_gates():
    rows, gates = rp.ppo_rows([{"step": 2, "kl": 0.1, "drops": {"alignment": 1}},
                               {"step": 1, "kl": 0.0, "drops": {"outcome": 2}}])
    assert gates == ["alignment", "outcome"]
    assert [(r["step"], r["drops_alignment"], r["drops_outcome"]) for r in rows] == [(1, 0, 2), (2, 1, 0)]


def test_copy_phase_ends_count_each_phase_steps():
    # repeat stopped early at its accuracy (step 100); a point every 50 steps and at a phase's end
    rows = rp.copy_rows([{"phase": "recall", "step": 160, "loss": 0.7, "copy_accuracy": 0.9, "lr": 3e-3},
                         {"phase": "repeat", "step": 50, "loss": 8.0, "copy_accuracy": 0.1, "lr": 3e-3},
                         {"phase": "repeat", "step": 100, "loss": 1.0, "copy_accuracy": 0.86, "lr": 3e-3},
                         {"phase": "recall", "step": 150, "loss": 0.9, "copy_accuracy": 0.8, "lr": 3e-3}])
    assert [r["step"] for r in rows] == [50, 100, 150, 160]
    assert rp.copy_phase_ends(rows) == [
        {"phase": "repeat", "steps": 100, "last_step": 100, "loss": 1.0, "copy_accuracy": 0.86},
        {"phase": "recall", "steps": 60, "last_step": 160, "loss": 0.7, "copy_accuracy": 0.9}]


def test_sft_rows_moving_mean_of_the_last_steps():
    rows = rp.sft_rows([{"step": s, "epoch": 0, "loss": loss, "tokens": 10} for s, loss in enumerate([4, 2, 3, 1])],
                       window=2)
    assert [r["loss_mean"] for r in rows] == [4, 3, 2.5, 2]
    assert rows[0]["tokens"] == 10 and rows[0]["lr"] is None


def _inputs(tmp: Path) -> dict[str, object]:
    """Every input of the report in its real format; returns the argument values."""
    ingest = {r: {"repo": r, "accepted": 10, "rejected": 1, "rejected_by_category": {"schema": 1}}
              for r in ("alpha", "beta", "gamma")}
    validate = {r: {"repo": r, "validated": 8, "rejected": {"nop": 1, "flaky": 1}} for r in ("alpha", "beta", "gamma")}
    insts = {name: [{"instance_id": f"{repo}.{i}", "repo": repo, "base_commit": "c" * 40, "patch": "p",
                     "FAIL_TO_PASS": ["t"], "PASS_TO_PASS": [], "problem_statement": "s", "image_name": "x"}
                    for i in range(8)] for name, repo in (("train", "alpha"), ("test", "beta"))}
    split = sp.split_summary(insts, {"train": 0.5, "test": 0.5}, seed=7)
    write_json(tmp / "split.json", split)
    generated = {"alpha": {"repo": "alpha", "kept": 11, "baseline": {"unnameable": ["t[a b]", "t[1 - 2]"]}}}
    funnel = fn.funnel(ingest, validate, split, ["alpha", "beta"], generated)
    assert funnel["repos"]["alpha"]["unnameable_tests"] == 2 and funnel["totals"]["unnameable_tests"] == 2
    assert funnel["totals"]["candidates"] == 11 and funnel["repos"]["beta"]["candidates"] is None
    write_json(tmp / "funnel.json", funnel)
    (tmp / "dag.dot").write_text(RULEGRAPH)
    write_json(tmp / "alpha.image.json", {"repo": "alpha", "commit": "a" * 40, "tag": "forgeline/alpha:aaaaaaaa",
                                          "image_id": "sha256:" + "1" * 64, "base_image": "forgeline/base:bookworm-b01d98a1",
                                          "build_input_digest": "2" * 64})

    def ep(iid, outcome):
        return {"instance_id": iid, "repo": iid.split(".")[0], "outcome": outcome,
                "exit_status": "submitted" if outcome in ("resolved", "failed") else "step_limit",
                "stats": {"steps": 2}, "timing": {"wall_s": 1.0, "generate_s": 0.5},
                "turns": [{"labels": {"well_formed_call": True, "command_ran": True, "no_error": None,
                                      "tests_improved": None}}] * 2}
    eps = [ep("alpha.1", "resolved"), ep("alpha.1", "failed"), ep("alpha.2", "failed"), ep("alpha.2", "failed"),
           ep("beta.1", "resolved"), ep("beta.1", "resolved")]
    write_json(tmp / "difficulty.json", df.report(eps, 2, [0.25, 0.75], PARAMS.agent.reward))
    write_json(tmp / "critic.json", {
        "epochs": [{"epoch": e, "train_mse": 0.5 / (e + 1), "train_ev": 0.1 * e, "val_mse": 0.6 / (e + 1) + 0.05,
                    "val_ev": 0.08 * e} for e in range(4)],
        "chosen_epoch": 2, "val": {"mse": 0.25, "ev": 0.16, "baseline_mse": 0.4},
        "test": {"mse": 0.3, "ev": 0.1, "baseline_mse": 0.42, "episodes": 24, "tasks": 6},
        "data": {"train_episodes": 100}})
    # the base policy: copy pre-training (repeat stopped early at step 100) and two epochs of SFT
    write_json(tmp / "copy_curve.json", [
        {"phase": phase, "step": step, "loss": loss, "copy_accuracy": acc, "lr": 0.003}
        for phase, step, loss, acc in (("repeat", 50, 8.6, 0.01), ("repeat", 100, 1.02, 0.8602),
                                       ("recall", 150, 0.9, 0.8), ("recall", 160, 0.66, 0.9229),
                                       ("match", 200, 2.9, 0.6), ("match", 210, 2.42, 0.7049))])
    write_json(tmp / "loss_curve.json", [
        {"step": s, "epoch": s // 15, "loss": round(5.0 - 0.1 * s, 6), "tokens": 100, "examples": 4,
         "lr": 2e-4, "grad_norm": 1.5} for s in range(30)])
    # step 0 kept no episode: the PPO log then has null statistics (ppo.py writes None)
    (tmp / "adapter").mkdir()
    (tmp / "adapter" / "train_log.jsonl").write_text("".join(json.dumps({
        "step": s, "reward_mean": -0.2 + 0.05 * s if s else None, "success_rate": 0.1 * s,
        "kl": 0.01 * s if s else None, "clip_frac": 0.02 if s else None, "value_loss": 0.3 if s else None,
        "ev": 0.05 * s if s else None, "entropy": 1.2 if s else None, "policy_loss": -0.01 if s else None,
        "drops": {"alignment": s % 2, "outcome": 1} if s else {"alignment": 16, "outcome": 0},
        "solved": {"alpha.1": s} if s else {}, "episodes": 16, "kept": 15 if s else 0, "tokens": 4000 if s else 0,
        "wall_s": 12.5, "time": {"generation": 8.0, "sandbox": 2.0, "critic": 1.0, "actor": 1.5}}) + "\n"
        for s in range(5)))
    # its series: a checkpoint at steps 2 and 4 (the last)
    write_json(tmp / "adapter" / "checkpoints.json", [
        {"step": s, "path": f"checkpoints/step-{s:06d}", "success_rate": 0.1 * s, "reward_mean": -0.2 + 0.05 * s,
         "kl": 0.01 * s, "clip_frac": 0.02} for s in (2, 4)])
    # GRPO's log: 3 successes a step, 2 of them on alpha.2; one group of two dropped at step 1
    (tmp / "adapter-grpo").mkdir()
    (tmp / "adapter-grpo" / "train_log.jsonl").write_text("".join(json.dumps({
        "step": s, "success_rate": 3 / 8, "episodes": 8, "solved": {"alpha.2": 2, "beta.1": 1},
        "kl": 0.001 * s, "clip_frac": 0.01, "groups": 2, "groups_dropped": int(s == 1)}) + "\n"
        for s in range(1, 5)))
    # tables: the original experiment's 3 / 32 / 3 on the test panel
    base = [0] * 3 + [1] * 3 + [1] * 5 + [0] * 27
    ppo = [1] * 3 + [0] * 3 + [1] * 5 + [0] * 27

    def rows(policy, outcomes):
        return [{"policy": policy, "panel": "test", "instance_id": f"t{i:03d}", "seed": 7, "resolved": bool(r),
                 "outcome": "resolved" if r else ("timeout" if policy == "base" and i < 3 else "failed"), "steps": 3, "input_tokens": 900, "output_tokens": 10, "wall_s": 2.0} for i, r in enumerate(outcomes)]
    grouped, sources = tb.group_results({"base.jsonl": rows("base", base), "ppo.jsonl": rows("ppo", ppo)})
    tables = tb.paired_tables(grouped, "base", sources)
    gate = tb.gate_decision(tables, EvalGateConfig(policy="ppo", against="base", panel="test", unit="pair",
                                                   continue_if="better"), 0.05)
    tables["test"]["gate"] = gate
    write_json(tmp / "metrics.json", tb.metrics(tables, gate))
    write_json(tmp / "tables.json", tables)
    (tmp / "tables.md").write_text(tb.markdown(tables, gate=gate))
    m = Manifest(stage="split")
    m.write(tmp / "split.manifest.json", outputs=[tmp / "split.json"])
    Manifest(stage="funnel").write(tmp / "funnel.manifest.json", outputs=[tmp / "funnel.json"])
    return {"dag": str(tmp / "dag.dot"), "funnel": str(tmp / "funnel.json"), "split": str(tmp / "split.json"),
            "images": [str(tmp / "alpha.image.json")], "difficulty": [str(tmp / "difficulty.json")],
            "copy_curve": str(tmp / "copy_curve.json"), "sft_curve": str(tmp / "loss_curve.json"),
            "critic": str(tmp / "critic.json"),
            "runs": [f"ppo={tmp / 'adapter'}", f"grpo={tmp / 'adapter-grpo'}"], "tables_json": str(tmp / "tables.json"),
            "metrics": str(tmp / "metrics.json"), "tables_md": str(tmp / "tables.md"),
            "manifests": [str(tmp / "split.manifest.json"), str(tmp / "funnel.manifest.json")]}


GOLDEN_PAGE = Path(__file__).parent / "golden" / "report_page.html"


def normalized_page(page: str, inputs: Path) -> str:
    """The page without what differs between machines or runs: the inputs' folder, the pictures'
    bytes (they follow the matplotlib and freetype versions) and which program drew the DAG."""
    page = page.replace(str(inputs), "IN")
    page = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,PNG", page)
    page = page.replace('<img alt="dag" src="data:image/png;base64,PNG">', "DAG")
    page = re.sub(r"<svg.*?</svg>", "DAG", page, flags=re.S)  # graphviz's drawing, where installed
    return re.sub(r"drawn by (graphviz|matplotlib)", "drawn by ...", page)


def _args(out: Path, **given) -> argparse.Namespace:
    base = {"out_dir": str(out), "title": "forgeline evidence report", "dag": None, "funnel": None, "split": None,
            "images": [], "difficulty": [], "copy_curve": None, "sft_curve": None, "critic": None, "runs": [], "metrics": None, "tables_md": None, "tables_json": None,
            "manifests": [], "manifest": None}
    return argparse.Namespace(**{**base, **given})


def test_report_has_every_section_the_verdict_and_the_plots(tmp_path):
    inputs = _inputs(tmp_path / "in")
    out = tmp_path / "report"
    rp.run(Config(data={}), _args(out, **inputs))
    page = (out / "report.html").read_text()
    for anchor in ("result", "tables", "attribution", "dag", "funnel", "split", "images", "base", "difficulty",
                   "critic", "rl", "ppo", "artifacts"):
        assert f'<section id="{anchor}">' in page
    assert "Not part of this build" not in page
    # the result stated plainly, as the tables say it
    assert "ppo vs base: no significant difference (p=1.00; 3 wins, 32 ties, 3 losses)." in page
    assert "base resolved 8/38 (21.1%, 95% CI" in page
    # the gate's decision on top, and what the 38 pairs could detect before the panel's numbers
    assert page.index("<b>Decision: stop.</b> stop: ppo is not significantly better than base on panel test") \
        < page.index("Detectable effect:</i> 38 pairs, 80% power, alpha 0.05: the smallest gain") \
        < page.index("base resolved 8/38")
    # failure attribution: the classes per policy, the transitions, the training successes
    assert "ppo training: 10 successes in 80 episodes over 1 task; the top task (alpha.1) carries 10 (100%)." in page
    assert "grpo training: 12 successes in 32 episodes over 2 tasks; the top task (alpha.2) carries 8 (67%)." in page
    outcomes_csv = (out / "outcomes.csv").read_text().splitlines()
    assert outcomes_csv[0] == "panel,policy,class,episodes,share" and len(outcomes_csv) == 1 + 2 * 7
    assert "test,base,timeout,3,0.078947" in outcomes_csv and "test,ppo,solved,8,0.210526" in outcomes_csv
    # the digests and hashes of the inputs are on the page
    split = json.loads(Path(inputs["split"]).read_text())
    assert split["digest"] in page and "2" * 64 in page
    funnel_out = json.loads(Path(inputs["manifests"][1]).read_text())["outputs"][0]
    assert funnel_out["sha256"] in page
    # the DAG: drawn (graphviz if installed, else matplotlib) and its edges listed
    assert "<code>ingest</code> &rarr; <code>funnel</code>" in page
    assert (out / "dag.svg").exists() or (out / "dag.png").read_bytes().startswith(b"\x89PNG")
    # plots as files, CSVs for dvc plots, captions for snakemake --report
    for name in ("success", "outcomes", "funnel", "copy_curve", "sft_curve", "difficulty", "critic_curve", "rl_curves",
                 "ppo_curve"):
        assert (out / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert (out / f"{name}.rst").read_text().strip()
        assert len((out / f"{name}.csv").read_text().splitlines()) >= 2
    ppo_csv = (out / "ppo_curve.csv").read_text().splitlines()
    assert ppo_csv[0].endswith("drops_alignment,drops_outcome") and len(ppo_csv) == 6
    assert ppo_csv[1].startswith("0,,0.0,,") and ppo_csv[1].endswith(",16,0")  # nulls stay empty
    # PPO and GRPO side by side: the dropped share is of episodes (PPO) or of groups (GRPO)
    rl_csv = (out / "rl_curves.csv").read_text().splitlines()
    assert rl_csv[0] == "run,step,success_rate,kl,clip_frac,dropped" and len(rl_csv) == 1 + 5 + 4
    assert rl_csv[1] == "ppo,0,0.0,,,1.0" and rl_csv[6] == "grpo,1,0.375,0.001,0.01,0.5"
    assert (out / "critic_curve.csv").read_text().splitlines()[0] == "epoch,train_mse,val_mse,train_ev,val_ev"
    assert (out / "difficulty.csv").read_text() == "c,tasks\n0,1\n1,1\n2,1\n"
    # how the base policy was made: the facts of both curves, their rows as CSV
    assert "Final copy accuracy per phase: repeat 86.0%, recall 92.3%, match 70.5%." in page
    assert "SFT: 30 steps over 2 epochs, 3,000 action tokens; loss 5.000 at step 0 &rarr; 2.100 at step 29" in page
    copy_csv = (out / "copy_curve.csv").read_text().splitlines()
    assert copy_csv[0] == "step,phase,loss,copy_accuracy,lr" and copy_csv[2] == "100,repeat,1.02,0.8602,0.003"
    assert len(copy_csv) == 7
    sft_csv = (out / "sft_curve.csv").read_text().splitlines()
    assert sft_csv[0] == "step,epoch,loss,loss_mean,tokens,examples,lr,grad_norm" and len(sft_csv) == 31
    assert sft_csv[-1] == "29,1,2.1,3.05,100,4,0.0002,1.5"  # mean of the last 20 steps' losses
    funnel_csv = (out / "funnel.csv").read_text()
    assert "candidates,33" in funnel_csv and "pool,16" in funnel_csv and "validate: nop,3" in funnel_csv
    # self-contained: every picture inline, nothing fetched from elsewhere
    assert page.count('src="data:image/png;base64,') >= 8
    assert "http://" not in page.replace('xmlns="http://', "") and "https://" not in page
    man = json.loads((out / "manifest.json").read_text())
    assert man["stage"] == "evaluation.report" and any(o["path"].endswith("report.html") for o in man["outputs"])
    # the same inputs give the same page, byte for byte (no timestamps, no PNG metadata)
    again = tmp_path / "again"
    rp.run(Config(data={}), _args(again, **inputs))
    assert (again / "report.html").read_bytes() == (out / "report.html").read_bytes()
    # and the same page as before: the golden copy was written by the report before its sections
    # became functions (pictures and the input folder left out, see normalized_page)
    assert normalized_page(page, tmp_path / "in") == GOLDEN_PAGE.read_text(encoding="utf-8")


def test_the_checkpoint_series_table_names_the_evaluated_checkpoints(tmp_path):
    """A policy of the evaluation that is a checkpoint of a run (its folder and step; the final
    adapter is the last checkpoint) is named in that checkpoint's row, with its success per panel."""
    inputs = _inputs(tmp_path / "in")
    adapter = str(tmp_path / "in" / "adapter")
    page, _ = rp.build(_args(tmp_path / "out", **inputs),
                       {"ppo": {"path": adapter, "step": None}, "ppo-2": {"path": adapter + "/", "step": 2},
                        "base": {"path": "results/policy/sft", "step": None}})
    table = page[page.index("<h3>Checkpoint series</h3>"):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]
    assert len(rows) == 2
    assert "<td>ppo-2</td>" in rows[0] and "<td>ppo</td>" in rows[1]
    assert "test: 0.2105 (ppo)" in rows[1] and "test:" not in rows[0]  # ppo-2 has no results here


def test_report_with_few_inputs_says_what_is_missing(tmp_path):
    inputs = _inputs(tmp_path / "in")
    out = tmp_path / "partial"
    rp.run(Config(data={}), _args(out, metrics=inputs["metrics"], split=inputs["split"]))
    page = (out / "report.html").read_text()
    assert ("Not part of this build: failure attribution, RL runs, DAG, task funnel, images, copy "
            "pre-training curve, SFT loss curve, difficulty, critic metrics, artifact manifests.") in page
    assert '<section id="base">' not in page
    assert "no significant difference (p=1.00" in page
    assert not (out / "ppo_curve.png").exists() and (out / "success.png").exists()
    assert not (out / "copy_curve.png").exists() and not (out / "sft_curve.csv").exists()
    empty = tmp_path / "empty"
    (tmp_path / "empty.dot").write_text("")  # what a failed `snakemake --rulegraph >` leaves
    rp.run(Config(data={}), _args(empty, dag=str(tmp_path / "empty.dot")))
    page = (empty / "report.html").read_text()
    assert "No evaluation tables were given: there is no result to state." in page
    assert "The rule graph file names no rules." in page and not (empty / "dag.png").exists()


def test_result_statements_say_better_when_significant():
    metrics = {"wide": {"base": {"n": 15, "resolved": 5, "success_rate": 1 / 3, "ci_low": 0.15, "ci_high": 0.58},
                        "ppo": {"n": 15, "resolved": 15, "success_rate": 1.0, "ci_low": 0.8, "ci_high": 1.0},
                        "ppo_vs_base": {"wins": 10, "ties": 5, "losses": 0, "mcnemar_p": 0.001953125,
                                        "alpha": 0.05, "significant": True}}}
    lines = rp.result_statements(metrics)["wide"]
    assert lines[-1] == "ppo vs base: ppo better, p=0.002 (10 wins, 5 ties, 0 losses)"
    assert lines[0].startswith("base resolved 5/15 (33.3%")
    # several seeds per task: the sentence answers on these tasks and over tasks as a sample
    metrics["wide"]["ppo_vs_base"].update(task_tasks=3, task_up=3, task_same=0, task_down=0,
                                          task_mean_diff=0.67, task_p=0.25, task_significant=False)
    assert rp.result_statements(metrics)["wide"][-1] == (
        "ppo vs base on these 3 tasks (McNemar over 15 pairs): ppo better, p=0.002 (10 wins, 5 ties, 0 losses); "
        "over tasks as a sample (task-level sign flip): no significant difference (p=0.25; 3 up, 0 same, 0 down)")
