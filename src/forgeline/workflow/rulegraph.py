"""Stage `rulegraph`: the DAG of rules as DOT (`snakemake --rulegraph`), for the report.

Runs Snakemake on this workflow with the same config files (`--configfile` for the overlays;
params.yaml is the Snakefile's own), read-only (`--nolock`), and writes its output atomically
with a manifest like every other artifact.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from forgeline.provenance import Manifest, write_text

log = logging.getLogger(__name__)


def rulegraph_command(snakefile: Path, config_files: list[str], target: str) -> list[str]:
    exe = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    overlays = [f for f in config_files if Path(f).name != "params.yaml"]
    return [exe, "--rulegraph", "--nolock", "--quiet", "--snakefile", str(snakefile), target,
            *(["--configfile", *overlays] if overlays else [])]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snakefile", default="Snakefile", type=Path)
    parser.add_argument("--target", default="all", help="the rule whose DAG is drawn")
    parser.add_argument("--out", required=True, help="the DOT file")
    parser.add_argument("--manifest", required=True)


def run(cfg, args: argparse.Namespace) -> None:
    files = [str(f) for f in cfg.files]
    cmd = rulegraph_command(args.snakefile, files, args.target)
    manifest = Manifest(stage="rulegraph", inputs=[str(args.snakefile), *files],
                        code=__name__)
    with manifest.timed("snakemake"):
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or "digraph" not in proc.stdout:
        raise SystemExit(f"snakemake --rulegraph failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    dot = proc.stdout[proc.stdout.index("digraph"):]
    write_text(args.out, dot)
    manifest.write(args.manifest, outputs=[args.out])
    log.info("wrote %s (%d edges)", args.out, dot.count("->"))
