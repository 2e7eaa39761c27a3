"""`forgeline timings`: the per-stage table from the manifests, saved as a reference and
printed before the next run (what `make run` shows at its start and end)."""
from __future__ import annotations

import argparse
import json

from forgeline.provenance import Manifest
from forgeline.workflow import timings


def _args(**kw):
    base = dict(results=None, reference=None, expected=False, save=None, note="", since=None)
    return argparse.Namespace(**{**base, **kw})


def test_the_table_sums_jobs_saves_a_reference_and_prints_it_before_the_next_run(tmp_path, capsys):
    results = tmp_path / "results"
    for name, stage in (("a", "difficulty"), ("b", "difficulty"), ("c", "sft")):
        (results / name).mkdir(parents=True)
        out = results / name / "x.txt"
        out.write_text(name)
        Manifest(stage=stage, inputs=[]).write(results / name / "manifest.json", outputs=[out])
    (results / "other.manifest.json").write_text("not json")  # not a forgeline manifest: skipped
    rows = timings.collect(results)
    assert rows.keys() == {"difficulty", "sft"} and rows["difficulty"]["jobs"] == 2
    ref = tmp_path / "ref.json"
    timings.run(None, _args(results=results, save=ref, note="idle"))
    saved = json.loads(ref.read_text())
    assert saved["note"] == "idle" and saved["stages"]["difficulty"]["jobs"] == 2 and saved["machine"]["cpus"] >= 1
    capsys.readouterr()
    timings.run(None, _args(results=results, reference=ref, expected=True))
    before = capsys.readouterr().out
    assert "last measured run" in before and "difficulty" in before and "sft" in before
    timings.run(None, _args(results=results, reference=ref))
    assert "last time s" in capsys.readouterr().out
    # no reference yet: the start of a run says nothing
    timings.run(None, _args(results=results, reference=tmp_path / "none.json", expected=True))
    assert capsys.readouterr().out == ""


def test_a_run_counts_only_the_manifests_written_since_it_started(tmp_path, capsys):
    import os
    import time

    results = tmp_path / "results"
    for name in ("old", "new"):
        (results / name).mkdir(parents=True)
        out = results / name / "x.txt"
        out.write_text(name)
        Manifest(stage=f"stage-{name}", inputs=[]).write(results / name / "manifest.json", outputs=[out])
    start = time.time()
    os.utime(results / "old" / "manifest.json", (start - 3600, start - 3600))  # another config's
    assert timings.collect(results, since=start - 1).keys() == {"stage-new"}
    assert timings.collect(results).keys() == {"stage-new", "stage-old"}
    timings.run(None, _args(results=results, since=start - 90, save=tmp_path / "ref.json"))
    out = capsys.readouterr().out
    assert "stage-new" in out and "stage-old" not in out and "wall time of this run: 1.5 min" in out
    assert json.loads((tmp_path / "ref.json").read_text())["wall_s"] >= 90
