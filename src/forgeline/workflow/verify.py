"""`forgeline verify`: check every artifact under results/ against the manifest that made it.

After `dvc pull` (or any copy of a results/ tree) this is the proof that the files on disk are
the files the stages wrote. Three records are compared with the tree, each catching what the
others cannot:

- the manifests: each `*manifest.json` lists its outputs with bytes and sha256 (a directory:
  kind dir, file count and tree digest) and its inputs; a file that differs (missing, size,
  sha256), a recorded input that changed since (a stale artifact), a file no manifest lists and
  an unreadable manifest are problems;
- the DAG's own list of outputs, per stage (dvc.yaml's outs, metrics and plots; without a
  dvc.yaml, or with config overlays, the Snakefile's DAG for that config): a stage whose outputs
  are gone takes its manifest with it (a directory output keeps its manifest inside), so only
  this list can say that `results/adapter` or `results/policy/sft` should be there;
- dvc.lock, when there is one (a tagged run): the md5 DVC recorded for every output, manifests
  included, outside the outputs themselves, so an edited manifest is caught too; where there is
  none, the index each stage wrote of its manifest (provenance.index_manifest) catches it.

Completeness: by default every stage of the DAG must be present (what a plain `dvc pull`
gives). With `--partial` (after `dvc pull TARGETS`), a stage whose outputs are ALL absent and
that no present manifest was built from is "not pulled" and listed, not a problem; a stage with
some outputs present, or one that a present manifest read as input, must be complete.

Leftovers: a write killed before its rename leaves its temp beside the output
(`.NAME~HOST~PID~START~random.tmp`, provenance.atomic_path/atomic_dir). It is never an
artifact, but a tree holding one is not a finished tree, so each is a problem (LEFTOVER, with
its owner and how to clear it). The next run that writes into the same folder removes the temps
of owners gone from this host; `--sweep` removes them now, before checking. Temps of a running
process or of another host are never removed here.

Any problem exits 1 and touches nothing. On success it tells Snakemake that the verified files
are current: `snakemake --touch` over the jobs that wrote them (pulled files carry the time of
the pull, in no particular order, so without it Snakemake would rebuild what was just
verified). `--no-touch` skips that.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forgeline.provenance import (MANIFEST_INDEX, file_record, is_write_temp, owner_of, sha256_file,
                                  sweep_leftovers, tree_digest)

log = logging.getLogger(__name__)
# Files under results/ that are not artifacts: DVC's per-directory .gitignore files.
NOT_ARTIFACTS = {".gitignore", ".snakemake_timestamp"}
# Snakemake's marker inside a directory() output, written after the stage's manifest (and by
# `snakemake --touch`): not part of the artifact. .dvcignore lists it too.
SNAKEMAKE_MARKER = ".snakemake_timestamp"
TREE_IGNORE = ("__pycache__", ".pytest_cache", SNAKEMAKE_MARKER)  # provenance.tree_digest's + marker


@dataclass(frozen=True)
class Problem:
    """One file that is not what the manifests say: what is wrong, and which manifests say so.
    kind: MISMATCH (an artifact or record) or LEFTOVER (the temp of an interrupted write)."""

    path: str
    what: str
    manifests: tuple[str, ...] = ()
    kind: str = "MISMATCH"

    def __str__(self) -> str:
        names = list(self.manifests[:3]) + ([f"{len(self.manifests) - 3} more"]
                                            if len(self.manifests) > 3 else [])
        said = f" [{', '.join(names)}]" if names else ""
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


def is_leftover(name: str) -> bool:
    """A temp of an interrupted write: an owned one (provenance.is_write_temp) or an older,
    unowned `.NAME.*.tmp` / `.NAME.tmp-*` / `.NAME.old-*`."""
    return is_write_temp(name) or (name.startswith(".") and (
        name.endswith(".tmp") or ".tmp-" in name or ".old-" in name))


def scan(results: Path) -> tuple[list[Path], list[Path]]:
    """(artifact files, leftover temps) under results/, each sorted; nothing inside a leftover
    folder is listed, and DVC's/Snakemake's marker files are left out."""
    files, temps = [], []
    for folder, dirs, names in os.walk(results):
        for name in list(dirs):
            if is_leftover(name):
                dirs.remove(name)
                temps.append(Path(folder) / name)
        for name in names:
            if is_leftover(name):
                temps.append(Path(folder) / name)
            elif name not in NOT_ARTIFACTS:
                files.append(Path(folder) / name)
    return sorted(files), sorted(temps)


def leftover_reason(path: Path, rel: str) -> str:
    """What a leftover temp is and the command that clears it, from the owner its name records."""
    owner = owner_of(path.name)
    if owner is None:
        return (f"temp of an interrupted write (no owner recorded); remove it when no run is "
                f"in progress: rm -rf '{rel}'")
    host, pid, state = owner
    if state == "gone":
        return (f"temp of a write killed before it finished ({host}:{pid} has exited); the next "
                "run writing there removes it, or now: forgeline verify --sweep")
    if state == "running":
        return f"temp of a write in progress ({host}:{pid} is running): verify after the run"
    return (f"temp of a write by {host}:{pid}, on another machine (this one cannot tell whether "
            f"it still runs); once no run is in progress there: rm -rf '{rel}'")


def sweep(results: Path) -> list[Path]:
    """Remove the leftover temps under results/ whose owner is gone from this host."""
    removed = []
    for folder in sorted({t.parent for t in scan(results)[1]}):
        removed += sweep_leftovers(folder)
    return removed


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
    """(problems, manifests read, artifacts verified): the manifests' part of `check_tree`."""
    found = check_tree(root, results, inputs=inputs)
    return found.problems, found.manifests, found.verified


@dataclass
class Findings:
    """What `check_tree` found: problems (one per path), the manifests read, how many recorded
    outputs matched, and the stages that are wholly absent and allowed to be (--partial)."""

    problems: list[Problem]
    manifests: list[Path]
    verified: int
    not_pulled: list[str]


def check_tree(root: Path, results: Path, inputs: bool = True,
               stages: dict[str, list[str]] | None = None,
               locked: dict[str, dict[str, Any]] | None = None,
               partial: bool = False) -> Findings:
    """Check the results tree below `root` against its manifests, the DAG's outputs per stage
    (`stages`: stage name -> output paths, see `dag_outputs`) and dvc.lock's records of those
    outputs (`locked`: path -> {md5, size, nfiles}, see `lock_records`).

    Manifest paths are relative to the project root (the directory the stages ran in).
    With `inputs`, each recorded input is compared too: a source outside results/ that changed
    or is missing, or an upstream artifact that differs from what a later stage read, makes
    the artifacts built from it stale. Each path is reported once, with its first reason.
    """
    results_abs = results if results.is_absolute() else root / results
    manifests = sorted(results_abs.rglob("*manifest.json"))
    outputs_wrong: list[Problem] = []
    inputs_wrong: dict[tuple[str, str], list[str]] = {}
    read_by: dict[str, list[str]] = {}  # artifact under results/ -> manifests that read it
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
        if edited := edited_since_written(root, mrel, locked):
            outputs_wrong.append(Problem(mrel, edited, (mrel,)))
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
        for expected in record.get("inputs", []):
            rel = expected["path"]
            if _is_below(rel, results):  # what it was built from must be here (--partial too)
                read_by.setdefault(Path(rel).as_posix(), []).append(mrel)
            if not inputs:
                continue
            if rel not in observed:
                observed[rel] = _observe(root, rel)
            what = compare(expected, observed[rel])
            if what:
                inputs_wrong.setdefault((rel, what), []).append(mrel)
    problems: dict[str, Problem] = {}

    def report(problem: Problem) -> None:
        problems.setdefault(problem.path, problem)  # first reason wins

    for problem in unreadable + outputs_wrong:
        report(problem)
    for (rel, what), by in sorted(inputs_wrong.items()):
        if what == "missing" and _is_below(rel, results):
            what = "missing: an input of artifacts that are present"
        else:
            what = f"input {what}: the artifacts built from it are stale"
        report(Problem(rel, what, tuple(by)))
    present, temps = scan(results_abs)
    for temp in temps:
        report(Problem(_rel(root, temp), leftover_reason(temp, _rel(root, temp)), kind="LEFTOVER"))
    present = [_rel(root, p) for p in present]
    for p in unlisted(present, listed):
        report(Problem(p, "not listed in any manifest (its manifest is missing?)"))
    not_pulled = []
    for name, outs in sorted((stages or {}).items()):
        gone = [o for o in outs if not (root / o).exists()]
        if not gone:
            continue
        if len(gone) < len(outs):
            why = f"missing: stage {name} wrote it, and its other outputs are here"
        elif needed := sorted({m for o in outs for rel, by in read_by.items()
                               if _is_below(rel, Path(o)) for m in by}):
            why = f"missing: stage {name} wrote it, and present artifacts were built from it"
            for o in gone:
                report(Problem(o, why, tuple(needed)))
            continue
        elif partial:
            not_pulled.append(name)
            continue
        else:
            why = (f"missing: stage {name} is not in the tree (`dvc pull {name}`; a partial "
                   "pull: verify --partial)")
        for o in gone:
            report(Problem(o, why))
    for rel, expected in sorted((locked or {}).items()):
        if not (root / rel).exists():
            continue  # absence is the stages' part above
        what = compare_lock(root, rel, expected)
        for path, diff in what:
            report(Problem(path, f"{diff} (dvc.lock; edited since the run, or rebuilt without "
                                 "`dvc commit`?)", ("dvc.lock",)))
    return Findings(list(problems.values()), manifests, verified, not_pulled)


# -- the DAG's outputs and dvc.lock's records of them ----------------------------------------

def _paths(entries: list | None) -> list[str]:
    """Paths of a dvc.yaml outs/metrics/plots list (plain strings or {path: options}), without
    the uncached ones (the stamps of stage `code`: derived from src/, never pulled)."""
    out = []
    for entry in entries or []:
        if isinstance(entry, str):
            out.append(entry)
        else:
            out.extend(str(k) for k, opts in entry.items() if (opts or {}).get("cache", True))
    return out


def dag_outputs(dvc_yaml: Path) -> dict[str, list[str]]:
    """Stage name -> every output it declares (outs, metrics, plots), from dvc.yaml."""
    import yaml
    stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
    outs = {name: sorted(_paths(st.get("outs")) + _paths(st.get("metrics")) + _paths(st.get("plots")))
            for name, st in stages.items()}
    return {name: paths for name, paths in outs.items() if paths}


def snakefile_outputs(snakefile: Path, config_files: list[str]) -> dict[str, list[str]]:
    """The same map from the Snakefile's DAG for these config files (no dvc.yaml, or overlays)."""
    from forgeline.workflow.dvc_export import snakemake_jobs, stage_name
    return {stage_name(job): job["outs"] for job in snakemake_jobs(snakefile, config_files)}


def lock_records(dvc_lock: Path, stages: dict[str, list[str]] | None = None) -> dict[str, dict]:
    """Output path -> dvc.lock's record (md5, size, nfiles) of the stages still in the DAG."""
    import yaml
    locked = (yaml.safe_load(dvc_lock.read_text(encoding="utf-8")) or {}).get("stages", {})
    out = {}
    for name, stage in locked.items():
        if stages is not None and name not in stages:
            continue  # a stage the DAG no longer has
        for key in ("outs", "metrics", "plots"):
            for entry in stage.get(key) or []:
                if isinstance(entry, dict) and entry.get("hash") == "md5" and "md5" in entry:
                    out[str(entry["path"])] = entry
    return out


def _md5(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _dvc_tree(folder: Path) -> dict[str, str]:
    """relpath -> md5 of each file of a directory output, as DVC lists it (.dvcignore's
    Snakemake marker left out)."""
    return {p.relative_to(folder).as_posix(): _md5(p) for p in folder.rglob("*")
            if p.is_file() and p.name != SNAKEMAKE_MARKER}


def dvc_dir_md5(tree: dict[str, str]) -> str:
    """DVC 3's md5 of a directory: md5 of its sorted JSON listing, plus ".dir"."""
    listing = [{"md5": md5, "relpath": rel} for rel, md5 in sorted(tree.items())]
    return hashlib.md5(json.dumps(listing, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def compare_lock(root: Path, rel: str, expected: dict[str, Any]) -> list[tuple[str, str]]:
    """[(path, what differs)] between dvc.lock's record of an output and the tree. A directory
    that differs is named file by file when DVC's cache holds its listing (after a pull)."""
    path = root / rel
    want = str(expected["md5"])
    if not path.is_dir():
        return [] if _md5(path) == want else [(rel, f"md5 differs (dvc.lock {want[:12]}…)")]
    tree = _dvc_tree(path)
    if dvc_dir_md5(tree) == want:
        return []
    listing = root / ".dvc" / "cache" / "files" / "md5" / want[:2] / want[2:]
    try:
        recorded = {e["relpath"]: e["md5"] for e in json.loads(listing.read_text(encoding="utf-8"))}
    except (OSError, ValueError, KeyError, TypeError):
        return [(rel, f"directory differs (dvc.lock {want[:12]}…)")]
    diffs = [(f"{rel}/{r}", "md5 differs" if r in tree and r in recorded else
              "missing" if r in recorded else "not in the run's directory")
             for r in sorted(set(tree) | set(recorded)) if tree.get(r) != recorded.get(r)]
    return [(p, f"{what} (dvc.lock's {rel})") for p, what in diffs] or \
        [(rel, f"directory differs (dvc.lock {want[:12]}…)")]


def edited_since_written(root: Path, mrel: str, locked: dict | None) -> str | None:
    """What is wrong when a manifest differs from the sha256 its stage indexed when it wrote it
    (provenance.index_manifest). Where dvc.lock records the manifest (or its folder), dvc.lock is
    the reference instead: a `dvc checkout` of another run legitimately replaces both."""
    index = root / MANIFEST_INDEX / f"{mrel}.sha256"
    if any(mrel == k or _is_below(mrel, Path(k)) for k in locked or {}) or not index.is_file():
        return None
    want = index.read_text(encoding="utf-8").strip()
    have = sha256_file(root / mrel)
    if have == want:
        return None
    return (f"manifest edited since its stage wrote it (sha256 {have[:12]}…, "
            f"{MANIFEST_INDEX / mrel}.sha256 says {want[:12]}…): rerun the stage")


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
    parser.add_argument("--partial", action="store_true",
                        help="a partial pull: stages wholly absent that nothing present was built "
                             "from are listed as not pulled, not failures")
    parser.add_argument("--sweep", action="store_true",
                        help="first remove the temps of interrupted writes whose owner process "
                             "is gone from this host (what the next run would remove)")
    parser.add_argument("--snakefile", default="Snakefile", type=Path)


def run(cfg, args) -> None:
    root = args.root.resolve()
    config_files = [str(f) for f in cfg.files]
    overlays = [f for f in config_files if Path(f).name != "params.yaml"]
    snakefile = args.snakefile if args.snakefile.is_absolute() else root / args.snakefile
    if (root / "dvc.yaml").is_file() and not overlays:
        stages = dag_outputs(root / "dvc.yaml")
    elif snakefile.is_file():
        stages = snakefile_outputs(snakefile, config_files)
    else:
        stages = None
        log.warning("verify: neither dvc.yaml nor %s: a stage deleted whole is not detected",
                    snakefile)
    locked = lock_records(root / "dvc.lock", stages) if (root / "dvc.lock").is_file() else None
    if getattr(args, "sweep", False):
        results_abs = args.results if args.results.is_absolute() else root / args.results
        for path in sweep(results_abs):
            log.info("verify: swept %s (temp of a killed write)", _rel(root, path))
    found = check_tree(root, args.results, inputs=not args.no_inputs, stages=stages,
                       locked=locked, partial=args.partial)
    problems, manifests, verified = found.problems, found.manifests, found.verified
    if not manifests and not problems:
        raise SystemExit(f"verify: no manifest under {args.results}: nothing to verify")
    if found.not_pulled:
        log.info("verify: %d stage(s) not pulled (--partial): %s", len(found.not_pulled),
                 ", ".join(found.not_pulled))
    for problem in problems:
        print(f"{problem.kind} {problem}")
    if problems:
        files = sorted({p.path for p in problems if p.kind == "MISMATCH"})
        temps = sorted({p.path for p in problems if p.kind == "LEFTOVER"})
        said = [f"{len(files)} file(s) differ from their manifests: " + ", ".join(files[:20])
                + (" …" if len(files) > 20 else "")] if files else []
        said += [f"{len(temps)} leftover temp(s) of interrupted writes: " + ", ".join(temps[:20])
                 + (" …" if len(temps) > 20 else "")] if temps else []
        raise SystemExit("verify: FAILED, " + "; ".join(said))
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
