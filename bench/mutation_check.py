"""Checking a mutation: the whole module parsed, compiled and dumped vs only the statement
around the edit (`mutations.Reference`), side by side on the same sites in one run:

    .venv/bin/python bench/mutation_check.py [--stdlib 30] [--every 1] [--json bench/out/mutation_check.json]

The files: every module of the data/ repositories and the first `--stdlib` modules of the
interpreter's standard library (what the SFT stage's synthetic conversations and the bug
generator read). For every candidate site of every kind (every `--every`-th one), both ways
answer "does the mutated module compile and differ from the original program?" and
"is it the original program?" (the scan's question). The table shows how many answers agree,
how many the statement check left to the whole module, and the seconds each way took.
"""
from __future__ import annotations

import argparse
import ast
import json
import sysconfig
import time
from pathlib import Path

from forgeline.tasks.mutations import KINDS, apply_mutation, candidate_sites, parse, program

ROOT = Path(__file__).resolve().parents[1]


def whole_module(reference: str, mutated: str) -> tuple[bool, bool | None]:
    """(compiles and differs, same program or None when it does not parse), the old way."""
    try:
        tree = parse(mutated)
    except (SyntaxError, ValueError):
        return False, None
    dump = program(mutated, tree)
    try:
        compile(tree, "<mutated>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False, dump == reference
    return dump != reference, dump == reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stdlib", type=int, default=30, help="standard-library modules (first by name)")
    ap.add_argument("--every", type=int, default=1, help="check every N-th site")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    files = sorted((ROOT / "data" / "repos").glob("*/**/*.py"))
    files += sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:args.stdlib]
    sites = agree = undecided = 0
    t_whole = t_statement = 0.0
    for path in files:
        source = path.read_text(encoding="utf-8", errors="surrogateescape")
        found = candidate_sites(source, KINDS, str(path))
        if found is None:
            continue
        candidates, ref = found
        reference = ast.dump(ref.tree)
        for site in candidates[::args.every]:
            mutated = apply_mutation(source, site)
            t0 = time.perf_counter()
            changed, same = whole_module(reference, mutated)
            t1 = time.perf_counter()
            quick_changed, quick_same = ref.changed(mutated, site), ref.same(mutated)
            t2 = time.perf_counter()
            t_whole += t1 - t0
            t_statement += t2 - t1
            sites += 1
            undecided += quick_changed is None or quick_same is None
            agree += quick_changed in (None, changed) and quick_same in (None, same)
    row = {"files": len(files), "sites": sites, "agree": agree, "left_to_whole_module": undecided,
           "whole_module_s": round(t_whole, 2), "statement_s": round(t_statement, 2),
           "ratio": round(t_statement / max(t_whole, 1e-9), 3)}
    print("| files | sites | same answer | left to the whole module | whole module s | statement s | ratio |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {row['files']} | {sites} | {agree} | {undecided} | {row['whole_module_s']} | "
          f"{row['statement_s']} | {row['ratio']}x |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n")
    if agree != sites:
        raise SystemExit(f"{sites - agree} sites answered differently")


if __name__ == "__main__":
    main()
