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
    os.utime(results / "new" / "manifest.json", (start + 30, start + 30))  # the run's last job
    assert timings.collect(results, since=start - 1).keys() == {"stage-new"}
    assert timings.collect(results).keys() == {"stage-new", "stage-old"}
    # the run's wall time ends at its last manifest, not when the table is made
    timings.run(None, _args(results=results, since=start - 60, save=tmp_path / "ref.json"))
    out = capsys.readouterr().out
    assert "stage-new" in out and "stage-old" not in out and "wall time of this run: 1.5 min" in out
    assert json.loads((tmp_path / "ref.json").read_text())["wall_s"] == 90.0


def test_the_run_timeline_places_each_job_from_its_start_to_its_manifest(tmp_path, capsys):
    import os
    import time

    results = tmp_path / "results"
    now = time.time()
    for name, stage, wall, end in (("sft", "sft", 600.0, now - 100), ("difficulty/a", "difficulty", 200.0, now)):
        (results / name).mkdir(parents=True)
        out = results / name / "x.txt"
        out.write_text(name)
        Manifest(stage=stage, inputs=[]).write(results / name / "manifest.json", outputs=[out])
        manifest = results / name / "manifest.json"
        record = json.loads(manifest.read_text())
        record["timings"]["wall_s"] = wall
        manifest.write_text(json.dumps(record))
        os.utime(manifest, (end, end))
    spans = timings.job_spans(results, since=now - 3600)
    assert [s["job"] for s in spans] == ["sft", "difficulty/a"]  # by start: sft began 700 s ago
    assert abs(spans[0]["start"] - (now - 700)) < 1e-6 and abs(spans[1]["start"] - (now - 200)) < 1e-6
    assert timings.job_spans(results, since=now - 50) == spans[1:]  # sft ended before the run began
    # /proc/stat's cpu line: user nice system idle iowait irq softirq steal; 300 busy of 400
    start, end = "cpu  100 0 50 800 50 0 0 0 0 0", "cpu  300 0 150 880 70 0 0 0 0 0"
    assert timings.cpu_busy_share(start, end) == 0.75
    assert timings.cpu_busy_share("", end) is None
    png = tmp_path / "timeline.png"
    timings.run(None, _args(results=results, since=now - 3600, cpu_start="cpu  0 0 0 0 0 0 0 0", timeline=png))
    # (a start of all zeros: the share since the machine booted)
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "2 jobs, start to end" in out
    assert "cores were busy" in out
