"""The mutation operators: pure source-to-source, no sandbox."""
from __future__ import annotations

import ast
import difflib

import pytest

from forgeline.tasks.mutations import (KINDS, Site, apply_mutation, enumerate_mutation_sites,
                                       select_sites)

SAMPLE = '''"""A module docstring with 1 + 2 in it."""
LIMIT = 10


def total(prices, rate):
    """Sum with tax; 0 < rate."""
    if rate > 1:
        rate = rate / 100
    subtotal = 0
    for p in prices:
        subtotal += p
    tax = subtotal * rate
    return subtotal + tax


def in_range(x, low, high):
    return low <= x and x < high


class Cart:
    def __init__(self):
        self.items = []
        self.open = True

    def add(self, item, qty):
        if not self.open:
            raise RuntimeError("closed")
        self.items.append((item, qty))
        return divmod(qty, 2)

    def label(self, name):
        return f"{name}: {len(self.items) + 1}"

    def close(self):
        self.open = False
        return len(self.items)
'''


def _changed(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _mutations(kind: str) -> dict[str, list[str]]:
    """detail -> changed lines, for every site of `kind` in SAMPLE."""
    return {f"{s.function}:{s.line}:{s.detail}": _changed(SAMPLE, apply_mutation(SAMPLE, s))
            for s in enumerate_mutation_sites(SAMPLE, [kind], path="shop/cart.py")}


@pytest.mark.parametrize("kind, expected", [
    ("op_swap", ["-    return subtotal + tax", "+    return subtotal - tax"]),
    ("op_swap", ["-        subtotal += p", "+        subtotal -= p"]),
    ("op_swap", ["-    tax = subtotal * rate", "+    tax = subtotal / rate"]),
    ("cmp_boundary", ["-    return low <= x and x < high", "+    return low < x and x < high"]),
    ("cmp_boundary", ["-    return low <= x and x < high", "+    return low <= x and x <= high"]),
    ("bool_flip", ["-    return low <= x and x < high", "+    return low <= x or x < high"]),
    ("bool_flip", ["-        self.open = True", "+        self.open = False"]),
    ("bool_flip", ["-        if not self.open:", "+        if self.open:"]),
    ("remove_stmt", ["-        self.open = False"]),
    ("remove_stmt", ["-        self.items.append((item, qty))"]),
    ("arg_swap", ["-        return divmod(qty, 2)", "+        return divmod(2, qty)"]),
    ("const_change", ["-    subtotal = 0", "+    subtotal = 1"]),
    ("const_change", ["-        return divmod(qty, 2)", "+        return divmod(qty, 3)"]),
    ("const_change", ["-        return divmod(qty, 2)", "+        return divmod(qty, 1)"]),
    ("invert_if", ["-    if rate > 1:", "+    if not (rate > 1):"]),
])
def test_each_kind_makes_the_expected_change(kind, expected):
    assert expected in list(_mutations(kind).values())


def test_invert_if_negates_conditions_but_leaves_not_to_bool_flip():
    # `if not self.open:` is bool_flip's business (dropping the `not`)
    assert [s.line for s in enumerate_mutation_sites(SAMPLE, ["invert_if"])] == [7]
    src = "def f(x, y):\n    if x > y:\n        return x\n    return y if y else 0\n"
    changed = {s.line: _changed(src, apply_mutation(src, s))
               for s in enumerate_mutation_sites(src, ["invert_if"])}
    assert changed[2] == ["-    if x > y:", "+    if not (x > y):"]
    assert changed[4] == ["-    return y if y else 0", "+    return y if not y else 0"]


def test_every_kind_has_a_site_and_every_site_is_a_small_valid_change():
    sites = enumerate_mutation_sites(SAMPLE, KINDS, path="shop/cart.py")
    assert {s.kind for s in sites} == set(KINDS)
    original = ast.dump(ast.parse(SAMPLE))
    for site in sites:
        mutated = apply_mutation(SAMPLE, site)
        compile(mutated, "x.py", "exec")
        assert ast.dump(ast.parse(mutated)) != original
        changed = _changed(SAMPLE, mutated)
        assert 1 <= len(changed) <= 2, (site, changed)
        assert site.file == "shop/cart.py" and site.bug_type == f"func_pm_{site.kind}"
        assert site.describe() == {"file": "shop/cart.py", "line": site.line,
                                   "function": site.function, "kind": site.kind}
        assert SAMPLE.splitlines()[site.line - 1] in [c[1:] for c in changed if c[0] == "-"]
    assert len({apply_mutation(SAMPLE, s) for s in sites}) == len(sites)  # no duplicates


def test_only_function_bodies_are_mutated():
    sites = enumerate_mutation_sites(SAMPLE)
    lines = {s.line for s in sites}
    assert 1 not in lines and 2 not in lines  # module docstring and module constant
    assert 6 not in lines  # function docstring
    assert 8 not in {s.line for s in sites if s.kind == "remove_stmt"}  # the if's only statement
    assert not [s for s in sites if s.function == "Cart.label"]  # f-string only
    assert {s.function for s in sites} == {"total", "in_range", "Cart.__init__", "Cart.add", "Cart.close"}


def test_remove_stmt_keeps_blocks_non_empty_and_avoids_unbound_names():
    src = ("def f(a):\n    return a\n\n"
           "def g(a):\n    b = a * 2\n    b = b + 1\n    a += 1\n    return b\n")
    removed = [_changed(src, apply_mutation(src, s)) for s in enumerate_mutation_sites(src, ["remove_stmt"])]
    # `b = a * 2` would leave `b` unbound; `b = b + 1` re-binds a bound name; f's body has one stmt
    assert removed == [["-    b = b + 1"], ["-    a += 1"]]
    # the first store of an attribute in __init__ would only raise AttributeError later
    src = ("class C:\n    def __init__(self, n):\n        self.n = n\n        self.items = []\n"
           "        self.n = n + 1\n        if n:\n            self.n = 0\n            total = n\n"
           "            total = total + 1\n            self.total = total\n")
    removed = [_changed(src, apply_mutation(src, s)) for s in enumerate_mutation_sites(src, ["remove_stmt"])]
    assert removed == [["-        self.n = n + 1"], ["-            self.n = 0"], ["-            total = total + 1"]]


def test_non_ascii_columns():
    src = 'def f(n):\n    return len("héllo→") + n\n'
    (site,) = enumerate_mutation_sites(src, ["op_swap"])
    assert apply_mutation(src, site) == 'def f(n):\n    return len("héllo→") - n\n'


def test_enumeration_is_deterministic_and_sorted():
    a = enumerate_mutation_sites(SAMPLE, KINDS, path="m.py")
    b = enumerate_mutation_sites(SAMPLE, list(reversed(KINDS)), path="m.py")
    assert a == b == sorted(a)


def test_apply_mutation_rejects_other_source():
    site = enumerate_mutation_sites(SAMPLE, ["op_swap"])[0]
    with pytest.raises(ValueError):
        apply_mutation("# a header line\n" + SAMPLE, site)


def test_unknown_kind_and_unparsable_source():
    with pytest.raises(ValueError, match="unknown mutation kind"):
        enumerate_mutation_sites(SAMPLE, ["op_swap", "typo"])
    assert enumerate_mutation_sites("def f(:\n", KINDS) == []


def test_selection_is_seeded_round_robin():
    sites = enumerate_mutation_sites(SAMPLE, KINDS)
    kinds = list(KINDS)
    first = select_sites(sites, kinds, seed=3, max_tries=12)
    assert first == select_sites(list(reversed(sites)), kinds, seed=3, max_tries=12)
    assert len(first) == 12 and len(set(first)) == 12
    present = [k for k in kinds if any(s.kind == k for s in sites)]
    assert [s.kind for s in first[:len(present)]] == present  # one of each kind, in order
    everything = select_sites(sites, kinds, seed=3, max_tries=10_000)
    assert sorted(everything) == sorted(sites)
    others = [select_sites(sites, kinds, seed=s, max_tries=12) for s in range(4, 10)]
    assert any(o != first for o in others)


TRICKY = '''\
from __future__ import annotations
import functools
X = 1; Y = 2


class Outer:
    limit = 3

    @functools.lru_cache(None)
    def first(self, a, b):
        return a + b if a < b else a - b

    class Inner:
    \tdef second(self, a):  # a tab after four spaces
    \t    return [a * 2, not a]


def third(a, b):
    x = (a
         + b); y = x * 2
    return f(y, x) if y > 0 else None
'''


def _whole_module_changed(reference: str, mutated: str) -> bool:
    try:
        tree = ast.parse(mutated)
        compile(tree, "<m>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return ast.dump(tree) != reference


def test_statement_check_agrees_with_the_whole_module():
    """`Reference.changed` and `.same` parse only the statement around the edit (in `class _:`
    headers inside classes); on every site of these files they say what the whole module says."""
    import glob
    import sysconfig
    from pathlib import Path

    from forgeline.tasks.mutations import Reference, candidate_sites
    files = [("tricky.py", TRICKY), ("sample.py", SAMPLE)]
    root = Path(__file__).resolve().parents[1] / "data" / "repos"
    files += [(p, Path(p).read_text()) for p in sorted(glob.glob(f"{root}/*/*/*.py"))
              + [f"{sysconfig.get_paths()['stdlib']}/shlex.py"]]
    decided = 0
    for path, source in files:
        sites, ref = candidate_sites(source, KINDS, path)
        assert isinstance(ref, Reference)
        whole = ast.dump(ast.parse(source))
        for site in sites if path == "tricky.py" else sites[::8]:  # the whole check is slow
            mutated = apply_mutation(source, site)
            quick = ref.changed(mutated, site)
            decided += quick is not None
            if quick is not None:
                assert quick == _whole_module_changed(whole, mutated), (path, site)
            same = ref.same(mutated)  # the same question, the changed characters found by diffing
            assert same is None or same == (not _whole_module_changed(whole, mutated)), (path, site)
    assert decided > 1000
    # the wrapper: a method inside a nested class is checked inside two `class _:` headers
    sites, ref = candidate_sites(TRICKY, KINDS, "tricky.py")
    inner = [s for s in sites if s.function == "Outer.Inner.second"]
    assert inner and ref.chunk(inner[0].edits[0][0], inner[0].edits[0][1])[2] == "class _:\n    class _:\n"
    # an edit that breaks the statement alone is left to the whole module
    broken = Site("tricky.py", 12, 0, "op_swap", "x", "Outer.first",
                  ((TRICKY.index("a + b"), TRICKY.index("a + b") + 5, "a + b", "a + (b"),))
    assert ref.changed(apply_mutation(TRICKY, broken), broken) is None
    assert ref.same(TRICKY.replace("X = 1; Y = 2", "X = 1;  Y = (2)")) is True
    assert ref.same(TRICKY + "\n\n# a comment\n") is True and ref.same(TRICKY + "Z = 3\n") is False


def test_sites_on_some_lines_are_those_of_the_whole_module_on_them():
    """`candidate_sites(..., lines=)` walks only the nodes that meet the lines (the scan asks for
    the grep's window of one function): the same sites as the whole walk, filtered."""
    import glob
    import sysconfig
    from pathlib import Path

    from forgeline.tasks.mutations import candidate_sites
    root = Path(__file__).resolve().parents[1] / "data" / "repos"
    files = [("tricky.py", TRICKY), ("sample.py", SAMPLE)]
    files += [(p, Path(p).read_text()) for p in sorted(glob.glob(f"{root}/*/*/*.py"))[:12]
              + [f"{sysconfig.get_paths()['stdlib']}/shlex.py"]]
    checked = 0
    for path, source in files:
        whole = candidate_sites(source, KINDS, path)[0]
        n = source.count("\n") + 1
        for lines in (range(1, n + 1), range(3, 9), range(n // 2, n // 2 + 20), range(n + 5, n + 9)):
            some = candidate_sites(source, KINDS, path, lines)[0]
            assert some == [s for s in whole if s.line in lines], (path, lines)
            checked += len(some)
    assert checked > 500
