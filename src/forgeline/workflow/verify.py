"""`forgeline verify`: check every artifact under results/ against the manifest that made it.

After `dvc pull` (or any copy of a results/ tree) this is the proof that the files on disk are
the files the stages wrote: each `*manifest.json` lists its outputs with bytes and sha256 (a
directory: kind dir, file count and tree digest). Every mismatch is reported by file (missing,
size differs, sha256 differs), as are files under results/ that no manifest lists and recorded
inputs that have changed since (a stale artifact); any problem exits 1.

On success it tells Snakemake that the verified files are current: `snakemake --touch` over the
jobs that wrote them (pulled files carry the time of the pull, in no particular order, so
without it Snakemake would rebuild what was just verified). `--no-touch` skips that.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forgeline.provenance import file_record, tree_digest

log = logging.getLogger(__name__)
# Files under results/ that are not artifacts: DVC's per-directory .gitignore files.
NOT_ARTIFACTS = {".gitignore", ".snakemake_timestamp"}
# Snakemake's marker inside a directory() output, written after the stage's manifest (and by
# `snakemake --touch`): not part of the artifact. .dvcignore lists it too.
SNAKEMAKE_MARKER = ".snakemake_timestamp"
TREE_IGNORE = ("__pycache__", ".pytest_cache", SNAKEMAKE_MARKER)  # provenance.tree_digest's + marker


@dataclass(frozen=True)
class Problem:
    """One file that is not what the manifests say: what is wrong, and which manifests say so."""

    path: str
    what: str
    manifests: tuple[str, ...] = ()

    def __str__(self) -> str:
        said = f" [{', '.join(self.manifests)}]" if self.manifests else ""
        return f"{self.path}: {self.what}{said}"


def compare(expected: dict[str, Any], actual: dict[str, Any] | None) -> str | None:
    """What differs between a manifest's file record and the record of the file on disk.

    Both are `provenance.file_record` dicts (path, bytes, sha256; directories also kind "dir"
    and files); `actual` is None when the path does not exist. Returns one description
    ("missing", "size differs (...); sha256 differs (...)"), or None when the file is the one
    the manifest describes.
    """
    if actual is None:
        return "missing"
    want_dir, is_dir = expected.get("kind") == "dir", actual.get("kind") == "dir"
    if want_dir != is_dir:
        return (f"is a {'directory' if is_dir else 'file'}, the manifest says "
                f"{'directory' if want_dir else 'file'}")
    diffs = []
    if want_dir and "files" in expected and expected["files"] != actual.get("files"):
        diffs.append(f"file count differs (manifest {expected['files']}, "
                     f"on disk {actual.get('files')})")
    if expected.get("bytes") is not None and expected["bytes"] != actual["bytes"]:
        diffs.append(f"size differs (manifest {expected['bytes']} bytes, "
                     f"on disk {actual['bytes']} bytes)")
    if expected.get("sha256") != actual["sha256"]:
        diffs.append(f"sha256 differs (manifest {str(expected.get('sha256'))[:12]}…, "
                     f"on disk {actual['sha256'][:12]}…)")
    return "; ".join(diffs) or None


def unlisted(present: list[str], listed: set[str]) -> list[str]:
    """Files present under results/ that no manifest output covers (a file or a listed dir)."""
    out = []
    for path in present:
        parts = Path(path).parts
        covered = any(Path(*parts[:i]).as_posix() in listed for i in range(1, len(parts) + 1))
        if not covered:
            out.append(path)
    return out


def _observe(root: Path, rel: str) -> dict[str, Any] | None:
    path = Path(rel) if os.path.isabs(rel) else root / rel
    if not path.exists():
        return None
    if path.is_dir():  # provenance.file_record of a directory, without Snakemake's marker
        files = [p for p in path.rglob("*") if p.is_file() and p.name != SNAKEMAKE_MARKER]
        return {"path": rel, "kind": "dir", "bytes": sum(p.stat().st_size for p in files),
                "sha256": tree_digest(path, ignore=TREE_IGNORE), "files": len(files)}
    record = file_record(path)
    record["path"] = rel
    return record


def _rel(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def check(root: Path, results: Path, inputs: bool = True) -> tuple[list[Problem], list[Path], int]:
    """(problems, manifests read, artifacts verified) for the results tree below `root`.

    Manifest paths are relative to the project root (the directory the stages ran in).
    With `inputs`, each recorded input is compared too: a source outside results/ that changed
    or is missing, or an upstream artifact that differs from what a later stage read, makes
    the artifacts built from it stale. Each file is reported once.
    """
    results_abs = results if results.is_absolute() else root / results
    manifests = sorted(results_abs.rglob("*manifest.json"))
    outputs_wrong: list[Problem] = []
    inputs_wrong: dict[tuple[str, str], list[str]] = {}
    unreadable: list[Problem] = []
    listed: set[str] = set()
    observed: dict[str, dict | None] = {}
    verified = 0
    for manifest in manifests:
        mrel = _rel(root, manifest)
        try:
            record = json.loads(manifest.read_text(encoding="utf-8"))
            outputs = list(record["outputs"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            listed.add(mrel)
            unreadable.append(Problem(mrel, f"unreadable manifest ({type(exc).__name__}: {exc})"))
            continue
        listed.add(mrel)
        for expected in outputs:
            rel = expected["path"]
            listed.add(Path(rel).as_posix())
            if rel not in observed:  # hash each file once (it may be an input seen before)
                observed[rel] = _observe(root, rel)
            what = compare(expected, observed[rel])
            if what:
                outputs_wrong.append(Problem(rel, what, (mrel,)))
            else:
                verified += 1
        for expected in record.get("inputs", []) if inputs else []:
            rel = expected["path"]
            if rel not in observed:
                observed[rel] = _observe(root, rel)
            if observed[rel] is None and _is_below(rel, results):
                continue  # a missing upstream artifact is reported through its own manifest
            what = compare(expected, observed[rel])
            if what:
                inputs_wrong.setdefault((rel, what), []).append(mrel)
    wrong_outputs = {p.path for p in outputs_wrong}
    problems = unreadable + outputs_wrong
    for (rel, what), by in sorted(inputs_wrong.items()):
        if rel in wrong_outputs:
            continue  # already reported as an output
        problems.append(Problem(rel, f"input {what}: the artifacts built from it are stale",
                                tuple(by)))
    present = sorted(_rel(root, p) for p in results_abs.rglob("*")
                     if p.is_file() and p.name not in NOT_ARTIFACTS)
    problems.extend(Problem(p, "not listed in any manifest (its manifest is missing?)")
                    for p in unlisted(present, listed))
    return problems, manifests, verified


def _is_below(rel: str, folder: Path) -> bool:
    return Path(rel).parts[: len(folder.parts)] == folder.parts


def touch_targets(manifests: list[str], dvc_yaml: Path) -> list[str]:
    """What to hand `snakemake --touch`: each manifest, or the directory() output that holds it
    (a file inside a directory output is no target of its own). Directory outputs are the outs
    of dvc.yaml (the DAG's export) that contain a manifest."""
    outs: set[str] = set()
    if dvc_yaml.is_file():
        import yaml
        stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
        outs = {str(o) for st in stages.values() for o in st.get("outs", []) if isinstance(o, str)}
    out = []
    for m in manifests:
        folder = next((o for o in outs if m.startswith(o.rstrip("/") + "/")), None)
        out.append(folder or m)
    return sorted(set(out))


def touch_command(snakefile: Path, config_files: list[str], targets: list[str]) -> list[str]:
    """The Snakemake call that marks the jobs writing `targets` as done, without running them."""
    exe = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    cmd = [exe, *targets, "--snakefile", str(snakefile), "--touch", "--cores", "1"]
    overlays = [f for f in config_files if Path(f).name != "params.yaml"]
    if overlays:
        cmd += ["--configfile", *overlays]
    return cmd


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", type=Path,
                        help="the artifact tree to check (default: results)")
    parser.add_argument("--root", default=".", type=Path,
                        help="project root that manifest paths are relative to (default: .)")
    parser.add_argument("--no-touch", action="store_true",
                        help="only check; do not mark the verified files current for Snakemake")
    parser.add_argument("--no-inputs", action="store_true",
                        help="do not compare the inputs the manifests recorded")
    parser.add_argument("--snakefile", default="Snakefile", type=Path)


def run(cfg, args) -> None:
    root = args.root.resolve()
    problems, manifests, verified = check(root, args.results, inputs=not args.no_inputs)
    if not manifests and not problems:
        raise SystemExit(f"verify: no manifest under {args.results}: nothing to verify")
    for problem in problems:
        print(f"MISMATCH {problem}")
    if problems:
        files = sorted({p.path for p in problems})
        raise SystemExit(f"verify: FAILED, {len(files)} file(s) differ from their manifests: "
                         + ", ".join(files[:20]) + (" …" if len(files) > 20 else ""))
    log.info("verify: %d artifacts of %d manifests match their manifests", verified, len(manifests))
    if args.no_touch:
        return
    # Every manifest is an output of the job that wrote it: targeting them all touches exactly
    # the jobs whose artifacts were verified (a partial tree stays partial).
    targets = touch_targets([_rel(root, m) for m in manifests], root / "dvc.yaml")
    cmd = touch_command(args.snakefile, [str(f) for f in cfg.files], targets)
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"verify: files match, but `snakemake --touch` failed ({proc.returncode})")
    log.info("verify: marked %d jobs' outputs current for Snakemake (snakemake --touch)",
             len(targets))
