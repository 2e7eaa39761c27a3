"""The validation checks of a task, pure: data in, a rejection reason (or None) out.

`forgeline.tasks.validate` runs the suites in the sandbox and calls these in its order
(structure, flaky, nop, oracle, verifier, alignment; docs/validation.md):

- `check_structure`: the record's fields agree with the snapshot and the clean suite;
- `flaky_tests` / `check_flaky`: tests whose outcome differs across the gold runs;
- `check_nop`: with the bug in, every FAIL_TO_PASS test fails or errors;
- `check_oracle`: with the bug reversed, every FAIL_TO_PASS and PASS_TO_PASS test passes;
- `check_verifier`: the verifier's own verdict on the gold fix;
- `check_alignment`: the problem statement names an identifier the FAIL_TO_PASS tests use
  (`statement_identifiers`, `identifiers_of_test`), or a dunder method `Class.__m__` that a
  test reaches through its syntax on that class (`statement_dunders`, `dunders_of_test`), and
  quotes no code line of the patch.
"""
from __future__ import annotations

import ast
import builtins
import keyword
import re
from typing import Iterable, Sequence

from forgeline.sandbox.grading import grade, is_test_path, representable
from forgeline.tasks.mutations import parse
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import parse_patch, repo_key

NOP_FAILING = ("FAILED", "ERROR")
MIN_IDENTIFIER = 3  # shortest identifier that counts as "named" by a problem statement
MIN_LEAK_LINE = 8  # shortest stripped patch line whose presence in a statement is a leak
_LIST_MAX = 5  # node ids named in one rejection reason


def listing(items: Sequence[str], limit: int = _LIST_MAX) -> str:
    """The first `limit` items, comma-separated, and how many more there are."""
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# -- patches -------------------------------------------------------------------------------

def patch_files(patch: str) -> list[str]:
    """Repository-relative paths a unified (git) diff touches, sorted."""
    return parse_patch(patch)[0]


def patch_code_lines(patch: str, min_chars: int = MIN_LEAK_LINE) -> list[str]:
    """Added and removed code lines of a diff, stripped, at least `min_chars` long, sorted, unique."""
    return sorted({s for s in (t.strip() for t in parse_patch(patch)[1]) if len(s) >= min_chars})


# -- the checks (pure: data in, a rejection reason or None out) -----------------------------

def repo_matches(record_repo: str, name: str) -> bool:
    """Whether an instance's `repo` field names the snapshot folder `name` (schema.repo_key)."""
    return repo_key(record_repo) == name


def check_structure(inst: dict, snapshot: RepoSnapshot, suite: Iterable[str] | None) -> str | None:
    """Reason the instance is structurally unusable at `snapshot`, or None.

    `suite` is the set of node ids of the clean suite (None: skip that part, for a pre-check
    before the suite has run). Checked in order: base_commit (optional, as upstream leaves it
    out; when present it is the snapshot's commit), instance_id (SWE-smith's
    `OWNER__NAME.<commit8>.` prefix of this snapshot), FAIL_TO_PASS non-empty, FAIL_TO_PASS and
    PASS_TO_PASS disjoint, every node id collected and nameable by the reference graders'
    log parsers, the patch touches at least one file and no test file (grading.is_test_path).
    """
    commit = snapshot.commit
    base = inst.get("base_commit")
    if base and base != commit:
        return (f"base_commit {base} is not the snapshot's commit {commit}: the repository "
                f"changed since the task was made (stale task)")
    iid = inst["instance_id"]
    if not iid.startswith(snapshot.repo_name + "."):
        return (f"instance_id {iid!r} does not name repository {snapshot.name!r} at commit "
                f"{commit[:8]} (expected '{snapshot.repo_name}.<bug_type>__<hash8>')")
    f2p, p2p = inst["FAIL_TO_PASS"], inst["PASS_TO_PASS"]
    if not f2p:
        return "FAIL_TO_PASS is empty: no test shows the bug"
    both = sorted(set(f2p) & set(p2p))
    if both:
        return f"test(s) in both FAIL_TO_PASS and PASS_TO_PASS: {listing(both)}"
    unnameable = sorted(t for t in set(f2p) | set(p2p) if not representable(t))
    if unnameable:
        return (f"test id(s) with whitespace, which the SWE-bench/SWE-smith log parsers cannot "
                f"name: {listing(unnameable)}")
    if suite is not None:
        suite = set(suite)
        unknown = sorted(set(f2p) - suite) + sorted(set(p2p) - suite - set(f2p))
        if unknown:
            return f"test(s) not in the clean suite ({len(suite)} collected): {listing(unknown)}"
    files = patch_files(inst["patch"])
    if not files:
        return "the patch touches no file"
    tests = [f for f in files if is_test_path(f)]
    if tests:
        return (f"the patch touches test file(s) {listing(tests)}: the verifier restores "
                f"those, so the bug would not reach grading")
    return None


def flaky_tests(runs: Sequence[dict[str, str]]) -> list[str]:
    """Node ids whose status differs across the runs (absent from some run counts), sorted."""
    ids = set().union(*runs) if runs else set()
    return sorted(t for t in ids if len({run.get(t) for run in runs}) > 1)


def check_flaky(inst: dict, flaky: Iterable[str]) -> str | None:
    """Reason the instance depends on a flaky test (FAIL_TO_PASS or PASS_TO_PASS), or None."""
    hit = sorted(set(flaky) & (set(inst["FAIL_TO_PASS"]) | set(inst["PASS_TO_PASS"])))
    if hit:
        return f"depends on flaky test(s) (outcome differs across gold runs): {listing(hit)}"
    return None


def check_nop(statuses: dict[str, str], fail_to_pass: Sequence[str], timed_out: bool = False,
              timeout_s: float | None = None) -> str | None:
    """Reason the bug does not show (some FAIL_TO_PASS test neither FAILED nor ERRORed), or None.

    `statuses` are those of the run of the FAIL_TO_PASS tests with the bug patch applied.
    """
    if timed_out:
        return ("the FAIL_TO_PASS run with the bug in timed out"
                + (f" after {timeout_s:g} s (sandbox.test_timeout_s)" if timeout_s else ""))
    ok = [t for t in fail_to_pass if statuses.get(t) not in NOP_FAILING]
    if ok:
        shown = [f"{t} ({statuses.get(t) or 'not run'})" for t in sorted(ok)]
        return f"FAIL_TO_PASS test(s) do not fail with the bug in: {listing(shown)}"
    return None


def check_oracle(gold: Sequence[dict[str, str]], fail_to_pass: Sequence[str],
                 pass_to_pass: Sequence[str]) -> str | None:
    """Reason the clean snapshot (the bug reversed) does not resolve the task in every gold run.

    Grading is SWE-bench's (grading.grade). The first gold run that does not resolve is named.
    """
    for i, statuses in enumerate(gold, 1):
        g = grade(statuses, fail_to_pass, pass_to_pass)
        if not g["resolved"]:
            shown = [f"{t} ({statuses.get(t) or 'not run'})" for t in g["failing"]]
            return (f"with the bug reversed, test(s) do not pass in gold run {i}/{len(gold)}: "
                    f"{listing(shown)}")
    return None


def check_verifier(result: dict) -> str | None:
    """Reason the verifier (sandbox.verify: a fresh environment, the bug patch, the fix filtered
    as an agent's diff, only the listed tests; the run an agent's verdict comes from) does not
    grade the gold fix resolved, or None."""
    if result["resolved"]:
        return None
    if result["stripped"]:
        return ("the verifier strips the gold fix: "
                + "; ".join(f"{s['path']} ({s['reason']})" for s in result["stripped"]))
    if not result["applied"]:
        return f"the gold fix does not apply in the verifier: {result.get('error', '')[:200]}"
    if result["timed_out"]:
        return "the verifier's run of the gold fix timed out"
    return (f"the verifier grades the gold fix unresolved (pytest exit code {result['exit_code']}): "
            f"{listing(result['failing'])} do not pass")


# -- alignment (pure) ----------------------------------------------------------------------

# Words that are identifiers in form but carry no signal about what a test exercises.
STOPWORDS = frozenset("""
a about above after again against all also an and any are as at be because been before being
below between both but by can cannot could did do does doing done down during each else every
few for from further get gets got had has have having here how however if in instead into is it
its itself just like may might more most much must no nor not now of off on once only or other
our out over own same should since so some such than that the their them then there these they
this those through thus to too under until up upon very via was we were what when where whether
which while who whom why will with within without would yet you your
wrong bug bugs broken break breaks issue issues problem problems error errors fail fails failed
failing failure fix fixed fixes expect expected expects actual actually correct correctly incorrect
incorrectly instead result results return returns returned value values output outputs input
inputs case cases code function functions method methods class classes call calls called calling
test tests testing pytest assert raises raise raised exception exceptions behavior behaviour
should now still even though see seems seem happen happens happened given gives give using use
used uses work works working number numbers string strings list lists dict item items type types
true false none null self cls new old one two three first second last time times way thing things
when line lines file files module package data object objects argument arguments param params
parameter parameters default defaults set sets run runs running check checks version report
reports reported approx mark parametrize fixture fixtures monkeypatch capsys tmp_path
""".split())
_BUILTIN_NAMES = frozenset(n.lower() for n in dir(builtins)) | frozenset(keyword.kwlist)
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _meaningful(name: str) -> bool:
    low = name.lower()
    return (len(name) >= MIN_IDENTIFIER and low not in STOPWORDS and low not in _BUILTIN_NAMES
            and not low.startswith(("assert", "test_", "__")) and low.strip("_") != "")


def statement_identifiers(text: str) -> set[str]:
    """Identifier-like words of a problem statement, lowercased, minus stopwords and builtins.

    `Ledger.post()` yields "ledger" and "post"; words shorter than MIN_IDENTIFIER are dropped.
    """
    return {t.lower() for t in _TOKEN.findall(text) if _meaningful(t)}


def split_node_id(node_id: str) -> tuple[str, list[str], str]:
    """'tests/t.py::TestA::test_x[1-2]' -> ('tests/t.py', ['TestA'], 'test_x')."""
    base = node_id.split("[", 1)[0]
    parts = base.split("::")
    return parts[0], parts[1:-1], parts[-1] if len(parts) > 1 else ""


def _find_function(tree: ast.Module, classes: list[str], name: str) -> ast.AST | None:
    """The test function `name` inside nested `classes` (or their bases defined in the module)."""
    top = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def lookup(scope: ast.AST, seen: frozenset) -> ast.AST | None:
        for node in scope.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        if isinstance(scope, ast.ClassDef):
            for base in scope.bases:
                if isinstance(base, ast.Name) and base.id in top and base.id not in seen:
                    found = lookup(top[base.id], seen | {base.id})
                    if found is not None:
                        return found
        return None

    scope: ast.AST = tree
    for cls in classes:
        nxt = next((n for n in scope.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if nxt is None:
            return None
        scope = nxt
    return lookup(scope, frozenset(classes))


def _test_function(source: str, node_id: str) -> tuple[ast.Module, ast.AST] | None:
    """(module, function) of the test `node_id` in its module's `source`; None when the function
    cannot be found or parsed."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    _, classes, name = split_node_id(node_id)
    fn = _find_function(tree, classes, name)
    return None if fn is None else (tree, fn)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """`import ... as alias` anywhere in the module: alias -> the original (last) name."""
    return {alias.asname: alias.name.rsplit(".", 1)[-1] for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names if alias.asname}


def identifiers_of_test(source: str, node_id: str) -> set[str] | None:
    """Identifiers the test `node_id` uses, lowercased, from its module's `source` text.

    Names loaded and attributes read inside the test function (its decorators included), plus
    the original names of `import ... as` aliases it uses; minus its arguments (fixtures), the
    names it binds, builtins and stopwords. None when the function cannot be found or parsed.
    """
    found = _test_function(source, node_id)
    return None if found is None else _identifiers(*found)


def _identifiers(tree: ast.Module, fn: ast.AST) -> set[str]:
    aliases = _aliases(tree)
    used: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            bound.add(node.name)
    names = used - bound
    names |= {aliases[n] for n in names if n in aliases}
    return {n.lower() for n in names if _meaningful(n)}


# -- alignment: dunder methods, which tests reach through syntax, never by name ------------------

# `Class.__method__` in a statement (the generator names a method with its class).
_QUALIFIED_DUNDER = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\.(__[A-Za-z0-9_]+__)(?![A-Za-z0-9_])")
# The words of an identifier: snake_case and CamelCase split, acronyms kept (`FIFOCache`: fifo, cache).
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Called by constructing the class: `Cache(...)` in the test.
CONSTRUCTION = frozenset({"__init__", "__new__", "__post_init__"})
# Syntax -> the dunder methods it calls (a reflected operator may call the other side's method).
_SUBSCRIPT = {ast.Load: ("__getitem__", "__class_getitem__", "__missing__"), ast.Store: ("__setitem__",),
              ast.Del: ("__delitem__",)}
_ATTRIBUTE = {ast.Load: ("__getattr__", "__getattribute__"), ast.Store: ("__setattr__",),
              ast.Del: ("__delattr__",)}
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.MatMult: "matmul", ast.Div: "truediv",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift",
           ast.RShift: "rshift", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}
_UNARY = {ast.USub: ("__neg__",), ast.UAdd: ("__pos__",), ast.Invert: ("__invert__",),
          ast.Not: ("__bool__", "__len__")}
_COMPARE = {ast.Eq: ("__eq__",), ast.NotEq: ("__ne__", "__eq__"), ast.Lt: ("__lt__", "__gt__"),
            ast.LtE: ("__le__", "__ge__"), ast.Gt: ("__gt__", "__lt__"), ast.GtE: ("__ge__", "__le__"),
            ast.In: ("__contains__",), ast.NotIn: ("__contains__",)}
_ITERATION = ("__iter__", "__next__")
# A call by the callee's name (a builtin, copy/pickle, or a unittest assertion on `self`).
_CALLS = {
    "len": ("__len__",), "iter": _ITERATION, "next": ("__next__",), "reversed": ("__reversed__",),
    "list": _ITERATION, "tuple": _ITERATION, "set": (*_ITERATION, "__hash__"),
    "frozenset": (*_ITERATION, "__hash__"), "dict": _ITERATION, "enumerate": _ITERATION,
    "zip": _ITERATION, "sorted": (*_ITERATION, "__lt__", "__gt__"), "min": (*_ITERATION, "__lt__", "__gt__"),
    "max": (*_ITERATION, "__lt__", "__gt__"), "sum": (*_ITERATION, "__add__", "__radd__"),
    "repr": ("__repr__",), "ascii": ("__repr__",), "str": ("__str__", "__repr__"), "print": ("__str__", "__repr__"),
    "format": ("__format__", "__str__"), "hash": ("__hash__",), "bool": ("__bool__", "__len__"),
    "abs": ("__abs__",), "int": ("__int__", "__index__"), "float": ("__float__",),
    "complex": ("__complex__",), "round": ("__round__",), "divmod": ("__divmod__", "__rdivmod__"),
    "bytes": ("__bytes__",), "getattr": ("__getattr__", "__getattribute__"), "setattr": ("__setattr__",),
    "delattr": ("__delattr__",), "dir": ("__dir__",), "copy": ("__copy__",), "deepcopy": ("__deepcopy__",),
    "dumps": ("__reduce__", "__reduce_ex__", "__getstate__"), "loads": ("__setstate__",),
    "assertEqual": ("__eq__",), "assertNotEqual": ("__ne__", "__eq__"), "assertIn": ("__contains__",),
    "assertNotIn": ("__contains__",), "assertLess": ("__lt__", "__gt__"),
    "assertLessEqual": ("__le__", "__ge__"), "assertGreater": ("__gt__", "__lt__"),
    "assertGreaterEqual": ("__ge__", "__le__"), "assertTrue": ("__bool__", "__len__"),
    "assertFalse": ("__bool__", "__len__"), "assertCountEqual": _ITERATION,
}


def statement_dunders(text: str) -> set[tuple[str, str]]:
    """(class, method) for every `Class.__method__` the statement names: `Cache.__delitem__`
    (also inside `pkg.Cache.__delitem__`) gives ("Cache", "__delitem__")."""
    return set(_QUALIFIED_DUNDER.findall(text))


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def names_class(cls: str, names: Iterable[str]) -> bool:
    """Whether one of `names` is the class or an instance named after it: the class's words in
    a row among the name's (`Cache` in `cache`, `self.Cache`, `FIFOCache`, `lru_cache`; not in
    `cached` or `cachetools`)."""
    want = _words(cls)
    return bool(want) and any(words[i:i + len(want)] == want for words in map(_words, names)
                              for i in range(len(words) - len(want) + 1))


def dunders_of_test(source: str, node_id: str) -> tuple[set[str], set[str], set[str]] | None:
    """What the test `node_id` does that calls dunder methods without naming them, from its
    module's `source`: (the dunder methods its syntax reaches, every name it mentions, the names
    it calls); None when the function cannot be found or parsed. The syntax: subscripts (get,
    set, del), attribute access, operators (binary, augmented, unary, comparisons, `in`), `for`
    and comprehensions, `with`, `await`, f-strings and `%`, calling a local or a call's result
    (__call__), and calls by name of builtins (`len`, `repr`, `hash`, `sorted`, ...), `copy`,
    pickle and unittest assertions (`assertIn`, `assertEqual`, ...)."""
    found = _test_function(source, node_id)
    return None if found is None else _dunder_evidence(*found)


def _dunder_evidence(tree: ast.Module, fn: ast.AST) -> tuple[set[str], set[str], set[str]]:
    aliases = _aliases(tree)
    nodes = list(ast.walk(fn))
    names = ({n.id for n in nodes if isinstance(n, ast.Name)} | {n.attr for n in nodes if isinstance(n, ast.Attribute)}
             | {n.arg for n in nodes if isinstance(n, ast.arg)})
    names |= {aliases[n] for n in names if n in aliases}
    local = ({n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
             | {n.arg for n in nodes if isinstance(n, ast.arg)})
    dunders: set[str] = set()
    called: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Subscript):
            dunders.update(_SUBSCRIPT[type(node.ctx)])
        elif isinstance(node, ast.Attribute):
            dunders.update(_ATTRIBUTE[type(node.ctx)])
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            op = _BINARY[type(node.op)]
            dunders.update((f"__{op}__", f"__r{op}__"))
            if isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.JoinedStr)):
                dunders.update(("__str__", "__repr__"))  # "%s" % x
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINARY:
            op = _BINARY[type(node.op)]
            dunders.update((f"__i{op}__", f"__{op}__", f"__r{op}__"))
        elif isinstance(node, ast.UnaryOp):
            dunders.update(_UNARY[type(node.op)])
        elif isinstance(node, ast.Compare):
            for op in node.ops:
                dunders.update(_COMPARE.get(type(op), ()))  # `is` calls nothing
        elif isinstance(node, (ast.For, ast.comprehension, ast.Starred)):
            dunders.update(("__aiter__", "__anext__") if getattr(node, "is_async", 0) else _ITERATION)
        elif isinstance(node, ast.AsyncFor):
            dunders.update(("__aiter__", "__anext__"))
        elif isinstance(node, ast.With):
            dunders.update(("__enter__", "__exit__"))
        elif isinstance(node, ast.AsyncWith):
            dunders.update(("__aenter__", "__aexit__"))
        elif isinstance(node, ast.Await):
            dunders.add("__await__")
        elif isinstance(node, ast.FormattedValue):
            dunders.update(("__repr__",) if node.conversion in (ord("r"), ord("a")) else ("__str__", "__format__"))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name is not None:
                called.add(name)
                dunders.update(_CALLS.get(name, ()))
            if name in local or isinstance(func, (ast.Call, ast.Subscript)):  # an instance, called
                dunders.add("__call__")
    return dunders, names, called


def _dunders_reached(pairs: set[tuple[str, str]], evidence: tuple[set[str], set[str], set[str]]) -> set[str]:
    """`class.__method__` (lowercased) for each pair the test reaches: by constructing the class
    (CONSTRUCTION), else by the method's syntax in a test that names the class or an instance."""
    dunders, names, called = evidence
    return {f"{cls}.{method}".lower() for cls, method in pairs
            if (cls in called if method in CONSTRUCTION else method in dunders and names_class(cls, names))}


def check_alignment(statement: str, patch: str, test_sources: dict[str, str | None],
                    fail_to_pass: Sequence[str]) -> tuple[str | None, list[str]]:
    """(reason the statement is not about the FAIL_TO_PASS tests or leaks the fix, or None;
    the identifiers it shares with them, sorted).

    `test_sources` maps a test file path (the part of a node id before "::") to its text, or to
    None when it cannot be read. The heuristic is documented in docs/validation.md.
    """
    norm = " ".join(statement.split())
    for line in patch_code_lines(patch):
        if " ".join(line.split()) in norm:
            return f"the problem statement quotes a code line of the patch: {line!r}", []
    used: set[str] = set()
    dunders = statement_dunders(statement)
    reached: set[str] = set()
    readable = 0
    for test in fail_to_pass:
        source = test_sources.get(split_node_id(test)[0])
        found = _test_function(source, test) if source is not None else None
        if found is not None:
            readable += 1
            used |= _identifiers(*found)
            if dunders:
                reached |= _dunders_reached(dunders, _dunder_evidence(*found))
    if not readable:
        return ("cannot read the source of any FAIL_TO_PASS test, so alignment cannot be "
                "checked"), []
    shared = sorted((statement_identifiers(statement) & used) | reached)
    if not shared:
        return ("the problem statement names none of the identifiers the FAIL_TO_PASS tests use "
                f"({listing(sorted(used), 8) or 'none'})"), []
    return None, shared
