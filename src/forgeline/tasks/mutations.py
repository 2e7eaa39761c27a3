"""Procedural bug injection: one small AST mutation of a library function (SWE-smith's func_pm_*).

Pure: source text in, mutation sites and mutated source text out; nothing here reads a file or
runs a test (the generate stage does that). A site is found on the AST, but applying it edits
only the characters of the affected token(s) or line(s) of the original text, so the patch
that introduces the bug is a one- or two-line diff that reads like a human slip, never a
reformatting of the whole file.

Kinds (the names used in params.yaml `tasks.generate.kinds`; bug type `func_pm_<kind>`):
  op_swap       arithmetic operator changed: + <-> -, * <-> /, // <-> /, % -> //, ** -> *, ...
  cmp_boundary  comparison changed: < <-> <=, > <-> >=, == <-> !=, in <-> not in, is <-> is not
  bool_flip     True <-> False, and <-> or, a `not` dropped
  remove_stmt   one statement deleted (augmented assignment, call, item store, or a store to
                a name / attribute that is already bound), leaving its block non-empty
  arg_swap      two adjacent positional arguments of a call swapped
  const_change  integer n -> n+1 / n-1 (0 -> 1, 1 -> 0), float f -> 2f (0.0 -> 1.0)
  invert_if     an if / elif / conditional-expression test negated

Only code inside function bodies is mutated (not decorators, defaults, annotations, module or
class level statements, docstrings, or f-strings), so every site has an enclosing function:
the thing a user would report as misbehaving.
"""
from __future__ import annotations

import __future__
import ast
import bisect
import random
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Sequence

# CPython 3.11's ast.parse keeps its recursion depth in state shared by threads: two parses at
# once can fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython
# gh-106905; seen here in `validate --threads 2`). The stages that parse in threads go
# through `parse`, which takes turns.
_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """ast.parse(source), one thread at a time."""
    with _PARSE_LOCK:
        return ast.parse(source)


_PROGRAMS: OrderedDict[str, str] = OrderedDict()
_PROGRAMS_LOCK = threading.Lock()
_PROGRAMS_KEPT = 8


def program(source: str, tree: ast.Module | None = None) -> str:
    """ast.dump of `source`'s module (`tree` if already parsed): equal for two texts of the
    same program, whitespace and redundant parentheses aside. The last few are kept: a scan
    compares each candidate with one reference file, and a candidate it keeps is compared
    again, and dumping a module costs more than parsing it. Raises SyntaxError."""
    with _PROGRAMS_LOCK:
        if source in _PROGRAMS:
            _PROGRAMS.move_to_end(source)
            return _PROGRAMS[source]
    dump = ast.dump(tree if tree is not None else parse(source))
    with _PROGRAMS_LOCK:
        _PROGRAMS[source] = dump
        while len(_PROGRAMS) > _PROGRAMS_KEPT:
            _PROGRAMS.popitem(last=False)
    return dump

KINDS = ("op_swap", "cmp_boundary", "bool_flip", "remove_stmt", "arg_swap", "const_change",
         "invert_if")

# operator class -> (source token, replacement tokens); one site per replacement
_BINOPS: dict[type, tuple[str, tuple[str, ...]]] = {
    ast.Add: ("+", ("-",)),
    ast.Sub: ("-", ("+",)),
    ast.Mult: ("*", ("/",)),
    ast.Div: ("/", ("*", "//")),
    ast.FloorDiv: ("//", ("/",)),
    ast.Mod: ("%", ("//",)),
    ast.Pow: ("**", ("*",)),
    ast.LShift: ("<<", (">>",)),
    ast.RShift: (">>", ("<<",)),
    ast.BitAnd: ("&", ("|",)),
    ast.BitOr: ("|", ("&",)),
    ast.BitXor: ("^", ("|",)),
}
# comparison class -> (token regex, replacement)
_CMPOPS: dict[type, tuple[str, str]] = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: (r"in\b", "not in"),
    ast.NotIn: (r"not\s+in\b", "in"),
    ast.Is: (r"is\b", "is not"),
    ast.IsNot: (r"is\s+not\b", "is"),
}
# Calls whose positional arguments commute (a swap is no bug) or whose swap only crashes.
_ARG_SWAP_SKIP = frozenset({"max", "min", "print", "isinstance", "issubclass"})
# Whitespace, parentheses, line continuations and comments between two operands.
_GAP = re.compile(r"(?:[ \t\r\n\f()\\]|#[^\n]*)*")
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


@dataclass(frozen=True, order=True)
class Site:
    """One mutation of one source file.

    `file` is the path relative to the repository root (as the caller passed it), `line`/`col`
    the 1-based line and 0-based character column where the change starts, `function` the
    qualified name of the enclosing function ("Ledger.post", "allocate"), `detail` a short
    internal description ("Add->Sub"; for manifests and debugging, never for problem
    statements), and `edits` the (start, end, old_text, new_text) character spans that
    `apply_mutation` replaces in the original source.
    """

    file: str
    line: int
    col: int
    kind: str
    detail: str
    function: str
    edits: tuple[tuple[int, int, str, str], ...]

    @property
    def bug_type(self) -> str:
        return f"func_pm_{self.kind}"

    def describe(self) -> dict:
        """The metadata an instance keeps: {file, line, function, kind}."""
        return {"file": self.file, "line": self.line, "function": self.function, "kind": self.kind}


def apply_mutation(source: str, site: Site) -> str:
    """Return `source` with the site's edits applied (ValueError if the text does not match)."""
    out = source
    for start, end, old, new in sorted(site.edits, reverse=True):
        if out[start:end] != old:
            raise ValueError(f"{site.file}:{site.line}: source does not match the mutation site "
                             f"(expected {old!r} at {start}:{end})")
        out = out[:start] + new + out[end:]
    return out


def enumerate_mutation_sites(source: str, kinds: Iterable[str] = KINDS, path: str = "") -> list[Site]:
    """Every valid mutation site of `source` for the given kinds, in a deterministic order.

    Inputs: the text of one Python module, the kinds wanted, and its repo-relative `path`
    (copied into each Site). Output: sites sorted by (file, line, col, kind, detail); each one
    changes the module's AST and still compiles, and no two produce the same mutated text.
    A module that does not parse has no sites.
    """
    found = candidate_sites(source, kinds, path)
    if found is None:
        return []
    candidates, reference = found
    seen: set[str] = set()
    sites = []
    for site in candidates:
        mutated = mutated_if_valid(source, site, reference, path)
        if mutated is None or mutated in seen:
            continue
        seen.add(mutated)
        sites.append(site)
    return sites


class Reference:
    """The parsed module that mutations of it are checked against (`mutated_if_valid`).

    A mutation edits a few characters, so only the statement around them can change: the
    check parses, compiles and compares the smallest top-level statement (or class-body
    statement, inside `class _:` headers) that holds the edit, not the whole module. Where
    that cannot be decided exactly (the statement alone does not compile, a carriage return,
    a `__future__` import inside the statement) it falls back to the whole module. The
    module's own `__future__` imports are compiled into every statement's check."""

    def __init__(self, source: str, tree: ast.Module):
        self.source, self.tree = source, tree
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.flags = 0
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                for alias in node.names:
                    feature = getattr(__future__, alias.name, None)
                    self.flags |= getattr(feature, "compiler_flag", 0)
        self._dumps: dict[tuple[int, int, str], str | None] = {}

    def program(self) -> str:
        return program(self.source, self.tree)

    def _line(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def chunk(self, lo: int, hi: int) -> tuple[int, int, str] | None:
        """(first char, end char, wrapper) of the smallest statement run that holds the
        characters [lo, hi), whole lines; None when there is none."""
        lo_line, hi_line = self._line(lo), self._line(max(hi - 1, lo))
        body, wrap = self.tree.body, ""
        while True:
            firsts = [min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", ())]) for n in body]
            hit = [k for k, n in enumerate(body) if firsts[k] <= hi_line and n.end_lineno >= lo_line]
            if not hit:
                return None
            i, j = hit[0], hit[-1]
            while i > 0 and body[i - 1].end_lineno >= firsts[i]:  # `a = 1; b = 2`: one line, one run
                i -= 1
            while j + 1 < len(body) and firsts[j + 1] <= body[j].end_lineno:
                j += 1
            if not (firsts[i] <= lo_line and hi_line <= body[j].end_lineno):
                return None
            node = body[i]
            if i == j and isinstance(node, ast.ClassDef) and node.body and node.body[0].lineno > node.lineno \
                    and lo_line >= min([node.body[0].lineno]
                                       + [d.lineno for d in getattr(node.body[0], "decorator_list", ())]):
                line = self.source[self.line_starts[node.lineno - 1]:]
                wrap += re.match(r"[ \t]*", line).group() + "class _:\n"
                body = node.body
                continue
            end = self.line_starts[body[j].end_lineno] if body[j].end_lineno < len(self.line_starts) \
                else len(self.source)
            return self.line_starts[firsts[i] - 1], end, wrap

    def _program(self, text: str) -> str | None:
        """ast.dump of a chunk (wrapper + the chunk's text), or None when it does not compile."""
        try:
            tree = parse(text)
            compile(tree, "<chunk>", "exec", flags=self.flags, dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
        return ast.dump(tree)

    def changed(self, mutated: str, site: Site) -> bool | None:
        """Whether `mutated` (this module with the site's edits) compiles and is another
        program: True/False, or None when only the whole module can tell."""
        if not site.edits:
            return None
        return self._differs(mutated, min(e[0] for e in site.edits), max(e[1] for e in site.edits))

    def same(self, text: str) -> bool | None:
        """Whether `text` compiles and is this module's program (its AST): True/False, or None
        when only the whole module can tell (`program`)."""
        n = min(len(text), len(self.source))
        lo = _common(self.source, text, n)
        tail = _common(self.source[::-1], text[::-1], n - lo)
        differs = self._differs(text, max(lo - 1, 0), min(len(self.source) - tail + 1, len(self.source)))
        return None if differs is None else not differs

    def _differs(self, text: str, lo: int, hi: int) -> bool | None:
        """The chunk check, where `text` equals this module outside its characters [lo, hi)."""
        if "\r" in self.source:
            return None
        found = self.chunk(lo, hi)
        if found is None:
            return None
        start, end, wrap = found
        if self.flags and "__future__" in self.source[start:end]:
            return None
        key = (start, end, wrap)
        if key not in self._dumps:
            self._dumps[key] = self._program(wrap + self.source[start:end])
        new = self._program(wrap + text[start:end + len(text) - len(self.source)])
        if new is None or self._dumps[key] is None:
            return None  # perhaps it runs into the next lines: the whole module decides
        return new != self._dumps[key]


def _common(a: str, b: str, limit: int) -> int:
    """The length of the common prefix of `a` and `b` (at most `limit`), by halving: slices
    compare in C."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def candidate_sites(source: str, kinds: Iterable[str] = KINDS, path: str = "",
                    lines: range | None = None) -> tuple[list[Site], Reference] | None:
    """The unchecked sites of `source` (sorted) and the parsed module (`Reference`) that
    `mutated_if_valid` compares against; None when the module does not parse. `lines`: only
    the sites on these lines (1-based), found without walking the rest of the module."""
    kinds = tuple(kinds)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown mutation kind(s) {unknown}; known: {', '.join(KINDS)}")
    try:
        tree = parse(source)
    except SyntaxError:
        return None
    collector = _Collector(source, path, set(kinds), lines)
    collector.visit_module(tree)
    sites = collector.sites if lines is None else [s for s in collector.sites if s.line in lines]
    return sorted(set(sites)), Reference(source, tree)


def mutated_if_valid(source: str, site: Site, reference: Reference, path: str = "") -> str | None:
    """The mutated text if it compiles and changes the AST (not just whitespace or
    parentheses), else None. Checking costs a parse and a compile of the statement around the
    edit (`Reference`), so callers that need a few sites check them one by one instead of
    enumerating all."""
    mutated = apply_mutation(source, site)
    changed = reference.changed(mutated, site)
    if changed is not None:
        return mutated if changed else None
    try:
        # one parse: compiling the tree raises what compiling the text would after parsing
        tree = parse(mutated)
        compile(tree, path or "<mutated>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return None if program(mutated, tree) == reference.program() else mutated


def select_sites(sites: Sequence[Site], kinds: Sequence[str], seed: int, max_tries: int) -> list[Site]:
    """The sites to try, in trying order: at most `max_tries`, every kind represented.

    The sites of each kind (sorted) are shuffled with one random.Random(seed), then taken
    round-robin over `kinds` in the order given, so the same sites + seed give the same list.
    """
    rng = random.Random(seed)
    queues = []
    for kind in kinds:
        group = sorted(s for s in sites if s.kind == kind)
        rng.shuffle(group)
        queues.append(group)
    out: list[Site] = []
    depth = 0
    while len(out) < max_tries and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(out) < max_tries:
                out.append(q[depth])
        depth += 1
    return out


# -- finding sites -------------------------------------------------------------------------------

class _Collector:
    """Walks one module and records a Site for every mutation of the wanted kinds."""

    def __init__(self, source: str, path: str, kinds: set[str], lines: range | None = None):
        self.source = source
        self.path = path
        self.kinds = kinds
        self.within = lines  # only nodes whose lines meet these are walked (None: all)
        self.lines = re.findall(r"[^\n]*\n|[^\n]+$", source)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.sites: list[Site] = []
        self.func_node: ast.AST | None = None  # the innermost function being walked

    # positions: ast columns are UTF-8 byte offsets; edits are character offsets
    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def add(self, kind: str, detail: str, function: str, edits: list[tuple[int, int, str]]) -> None:
        if kind not in self.kinds or not edits:
            return
        full = tuple(sorted((s, e, self.source[s:e], new) for s, e, new in edits))
        start = full[0][0]
        line = self.source.count("\n", 0, start) + 1
        col = start - (self.source.rfind("\n", 0, start) + 1)
        self.sites.append(Site(self.path, line, col, kind, detail, function, full))

    def token_between(self, left: ast.AST, right: ast.AST, pattern: str) -> tuple[int, int] | None:
        """The span of the operator token matching `pattern` between two operand nodes."""
        start, end = self.span(left)[1], self.span(right)[0]
        gap = self.source[start:end]
        m = re.compile(pattern).match(gap, _GAP.match(gap).end())
        if not m or not _GAP.fullmatch(gap, m.end()):
            return None
        return start + m.start(), start + m.end()

    # traversal: only function bodies are mutated
    def visit_module(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            self.visit(stmt, [], None)

    def visit(self, node: ast.AST, scope: list[str], function: str | None) -> None:
        # a site's edits lie inside the node it comes from, so a node outside `within` has none
        if self.within is not None and getattr(node, "end_lineno", None) is not None \
                and (node.end_lineno < self.within.start or node.lineno >= self.within.stop):
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = scope + [node.name]
            qualname = ".".join(inner)
            outer, self.func_node = self.func_node, node
            self.statements(node.body, qualname)
            for stmt in node.body:
                self.visit(stmt, inner, qualname)
            self.func_node = outer
            return
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                self.visit(stmt, scope + [node.name], function)
            return
        if isinstance(node, ast.JoinedStr):
            return  # f-string internals: positions are unreliable and edits would be odd
        if function is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.stmt)):
                    self.visit(child, scope, None)
            return
        if _is_docstring(node):
            return
        self.expression_sites(node, function)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                self.statements(block, function)
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "decorator_list"):
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if isinstance(child, ast.AST):
                    self.visit(child, scope, function)

    def expression_sites(self, node: ast.AST, function: str) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            if not (_is_str(node.left) or _is_str(node.right)):  # string concat/format: a crash
                token, replacements = _BINOPS[type(node.op)]
                span = self.token_between(node.left, node.right, re.escape(token))
                if span:
                    for new in replacements:
                        self.add("op_swap", f"{token}->{new}", function, [(*span, new)])
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOPS:
            if not _is_str(node.value):
                token, replacements = _BINOPS[type(node.op)]
                span = self.token_between(node.target, node.value, re.escape(token + "="))
                if span:
                    for new in replacements:
                        self.add("op_swap", f"{token}=->{new}=", function, [(*span, new + "=")])
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                pattern, new = _CMPOPS[type(op)]
                span = self.token_between(operands[i], operands[i + 1], pattern)
                if span:
                    old = self.source[span[0]:span[1]]
                    self.add("cmp_boundary", f"{old}->{new}", function, [(*span, new)])
        elif isinstance(node, ast.BoolOp):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            spans = [self.token_between(a, b, rf"{old}\b") for a, b in zip(node.values, node.values[1:])]
            if all(spans):
                self.add("bool_flip", f"{old}->{new}", function, [(*s, new) for s in spans])
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            self.add("bool_flip", f"{node.value}->{not node.value}", function,
                     [(*self.span(node), str(not node.value))])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            start = self.span(node)[0]
            m = re.compile(r"not\b[ \t]*").match(self.source, start)
            if m:
                self.add("bool_flip", "drop-not", function, [(start, m.end(), "")])
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            for new in _const_variants(node.value):
                self.add("const_change", f"{node.value!r}->{new}", function, [(*self.span(node), new)])
        if isinstance(node, ast.Call):
            self.call_sites(node, function)
        if isinstance(node, (ast.If, ast.IfExp)) and not (
                isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)):
            text = self.text(node.test)
            new = f"not {text}" if isinstance(node.test, _ATOMS) else f"not ({text})"
            self.add("invert_if", "negate", function, [(*self.span(node.test), new)])

    def call_sites(self, node: ast.Call, function: str) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else (
            node.func.attr if isinstance(node.func, ast.Attribute) else "")
        args = node.args
        if name in _ARG_SWAP_SKIP or any(isinstance(a, ast.Starred) for a in args):
            return
        for i, (a, b) in enumerate(zip(args, args[1:])):
            ta, tb = self.text(a), self.text(b)
            if ta != tb:
                (sa, ea), (sb, eb) = self.span(a), self.span(b)
                self.add("arg_swap", f"args {i}<->{i + 1}", function, [(sa, ea, tb), (sb, eb, ta)])

    def statements(self, block: list[ast.stmt], function: str) -> None:
        """remove_stmt sites of one block: only statements that stand on whole lines."""
        if "remove_stmt" not in self.kinds:
            return  # `removable` walks the function per statement: the scan's kinds skip it
        body = [s for s in block if not _is_docstring(s)]
        if len(body) < 2:
            return  # deleting the only statement would empty the block
        for stmt in body:
            if not self.removable(stmt, self.func_node):
                continue
            start, end = self.span(stmt)
            line_start = self.starts[stmt.lineno - 1]
            line_end = self.starts[stmt.end_lineno]
            before = self.source[line_start:start]
            after = self.source[end:line_end]
            if before.strip() or (after.strip() and not after.strip().startswith("#")):
                continue  # shares a line with other code (`a = 1; b = 2`)
            self.add("remove_stmt", type(stmt).__name__, function, [(line_start, line_end, "")])

    def removable(self, stmt: ast.stmt, func_node: ast.AST | None) -> bool:
        if isinstance(stmt, ast.AugAssign):
            return True
        if isinstance(stmt, ast.Expr):
            return isinstance(stmt.value, ast.Call)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None) is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            # A name, or an attribute of self in __init__, only when it is already bound before:
            # then the deletion changes a value instead of raising NameError/AttributeError,
            # whose message would name the deleted line's target.
            return func_node is not None and all(
                _bound_before(func_node, t, stmt.lineno) for t in targets)
        return False


def _bound_before(func: ast.AST, target: ast.expr, lineno: int) -> bool:
    """Is the assignment target already bound when line `lineno` of `func` runs?

    Subscripts and attributes of objects other than `self` in `__init__` always are (the
    container exists); a name is if it is a parameter or stored on an earlier line.
    """
    if isinstance(target, ast.Subscript):
        return True
    if isinstance(target, ast.Attribute):
        if not (func.name == "__init__" and isinstance(target.value, ast.Name) and target.value.id == "self"):
            return True
        return any(isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.attr == target.attr
                   and isinstance(n.value, ast.Name) and n.value.id == "self" and n.lineno < lineno
                   for n in ast.walk(func))
    if not isinstance(target, ast.Name):
        return False  # tuple unpacking and the like
    args = func.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return target.id in params or any(
        isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == target.id
        and n.lineno < lineno for n in ast.walk(func))


def _is_docstring(node: ast.AST) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, (str, bytes)))


def _const_variants(value: int | float) -> list[str]:
    if isinstance(value, float):
        return [repr(value * 2) if value else "1.0"]
    if value in (0, 1):
        return [str(1 - value)]
    return [str(value + 1), str(value - 1)]
