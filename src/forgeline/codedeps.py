"""What code a stage runs: the definitions its entry point can reach, normalized, and their digest.

A stage's code is not its whole import closure. Starting from `cli.main` and the stage module's
`add_arguments`/`run`, this follows names through the package (functions, classes, module
constants, `from x import y`, `module.attr`) to the definitions the stage can call, and hashes
their syntax trees without docstrings, comments or layout. Editing a comment, a docstring, the
formatting, or a function no stage path reaches changes no digest, so it reruns nothing.

The walk over-approximates where Python is dynamic, never under: a module's top-level statements
count whenever it is imported (they run on import); a method counts when its class is reachable
and its name is used as an attribute anywhere on the path (`obj.meth`, `getattr(obj, "meth")`);
every method of a class that subclasses something outside forgeline counts (the framework calls
`forward`, `emit`, ...); a data file of the package counts when a reachable string names it or a
folder above it; a module used as a value counts whole.

The stamps (`.forgeline/code/<module>.json`) are what Snakemake and DVC see as a stage's code:
written only when the digest changes, so their mtime and bytes move only with the code a stage runs.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

PACKAGE = "forgeline"
PACKAGE_ROOT = _HERE = Path(__file__).resolve().parent
STAMP_DIR = Path(".forgeline/code")
CODE_CACHE = Path(".forgeline/code-cache.json")  # stamps by tree_key (outside STAMP_DIR: not a DVC output)
ENTRY = ("forgeline.cli", "main")  # every stage runs through the CLI
STAGE_ENTRY = ("add_arguments", "run")  # what cli.main calls on a stage's module
FORMAT = 1  # bump when the normalization changes: every stamp changes once
OLD = 946684800  # 2000-01-01: the mtime of a stamp written for the first time (see write_stamp)

# Decorators that only wrap or describe what they decorate: the definition runs when called, not
# on import. Any other decorator may register it somewhere (then it counts wherever imported).
PURE_DECORATORS = {"dataclass", "contextmanager", "cache", "lru_cache", "cached_property", "property",
                   "classmethod", "staticmethod", "abstractmethod", "wraps", "total_ordering"}

# What a reference names: a module, or a definition ("unit") of a module.
Ref = tuple[str, ...]  # a dotted chain as written: ("images", "connect") or ("run_episode",)


@dataclass
class Unit:
    """One top-level definition (function, class body, constant) or a module's other statements."""

    module: str
    name: str  # "" = the module's top-level statements; "Cls.meth" = a method
    code: str  # normalized syntax
    refs: set[Ref] = field(default_factory=set)
    attrs: set[str] = field(default_factory=set)  # attribute names it uses (obj.meth)
    strings: set[str] = field(default_factory=set)  # string constants (getattr names, file names)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local binding -> target

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}" if self.name else f"{self.module}:<module>"


@dataclass
class Module:
    name: str
    path: Path
    units: dict[str, Unit]  # by name
    bindings: dict[str, tuple[str, str]]  # top-level import: local name -> ("module"|"symbol", target)
    imported: set[str]  # modules its top-level statements import
    eager: set[str]  # units that run on import (decorated definitions)
    classes: set[str]
    external_classes: set[str]  # classes with a base from outside the package


# -- normalization -----------------------------------------------------------------------------

def _is_doc(stmt: object) -> bool:
    """A bare string statement: a docstring, or the string under a dataclass field (its doc)."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    return body[1:] if body and _is_doc(body[0]) else body


def normalized(node: ast.AST | list | object) -> str:
    """A stable text of a syntax tree: no positions, no bare strings (docstrings, attribute docs:
    they do nothing), empty fields left out (so a field a newer Python adds, e.g.
    `type_params=[]`, changes nothing)."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={normalized(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != []]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(normalized(v) for v in node if not _is_doc(v)) + "]"
    return repr(node)


# -- reading a module --------------------------------------------------------------------------

def _chain(node: ast.AST) -> Ref | None:
    """("a", "b", "c") for the expression a.b.c; None when it does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return (node.id, *reversed(parts))
    return None


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _import_bindings(stmts: list[ast.AST], module: str, is_package: bool
                     ) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """Bindings made by the import statements among `stmts` (nested blocks included, functions
    and classes not), and the package modules they import."""
    bindings: dict[str, tuple[str, str]] = {}
    imported: set[str] = set()
    todo = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    continue
                imported.add(alias.name)
                if alias.asname:
                    bindings[alias.asname] = ("module", alias.name)
                else:  # `import forgeline.x.y` binds `forgeline`
                    bindings[PACKAGE] = ("module", PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, is_package, node)
            if source.split(".")[0] != PACKAGE:
                continue
            imported.add(source)
            for alias in node.names:
                if alias.name == "*":
                    bindings[f"*{source}"] = ("star", source)
                else:
                    bindings[alias.asname or alias.name] = ("symbol", f"{source}.{alias.name}")
        else:
            todo.extend(ast.iter_child_nodes(node))
    return bindings, imported


def _uses(nodes: list[ast.AST]) -> tuple[set[Ref], set[str], set[str]]:
    """Whole dotted chains (`a.b.c`, not also `a.b` and `a`), attribute names, short strings."""
    refs: set[Ref] = set()
    attrs: set[str] = set()
    strings: set[str] = set()
    todo = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Name, ast.Attribute)):
            chain = _chain(node)
            if chain:
                refs.add(chain)
            while isinstance(node, ast.Attribute):
                attrs.add(node.attr)
                node = node.value
            if not isinstance(node, ast.Name):
                todo.append(node)  # f().x: the call is code too
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            strings.add(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return refs, attrs, strings


def _unit(module: str, name: str, nodes: list[ast.AST], is_package: bool) -> Unit:
    refs, attrs, strings = _uses(nodes)
    inner: list[ast.AST] = []
    for n in nodes:  # imports inside a function body bind names for that function
        inner.extend(ast.walk(n) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else [n])
    local, _ = _import_bindings([n for n in inner if isinstance(n, (ast.Import, ast.ImportFrom))],
                                module, is_package)
    return Unit(module, name, normalized(nodes), refs, attrs, strings, local)


def _registers(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    """True when a decorator of `node` might do more than wrap it (see PURE_DECORATORS)."""
    for deco in node.decorator_list:
        chain = _chain(deco.func if isinstance(deco, ast.Call) else deco)
        if not chain or chain[-1] not in PURE_DECORATORS:
            return True
    return False


def _targets(stmt: ast.stmt) -> list[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    names = []
    for t in targets:
        names.extend(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def read_module(name: str, path: Path) -> Module:
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    body = _without_docstring(tree.body)
    bindings, imported = _import_bindings(body, name, is_package)
    units: dict[str, Unit] = {}
    eager: set[str] = set()
    external: set[str] = set()
    classes: set[str] = set()
    rest: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name not in units:
            units[stmt.name] = _unit(name, stmt.name, [stmt], is_package)
            if _registers(stmt):
                eager.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef) and stmt.name not in units:
            methods = [s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            shell = ast.ClassDef(**{**{f: getattr(stmt, f, None) for f in stmt._fields},
                                    "body": [s for s in stmt.body if s not in methods]})
            units[stmt.name] = _unit(name, stmt.name, [shell], is_package)
            classes.add(stmt.name)
            for m in methods:
                units[f"{stmt.name}.{m.name}"] = _unit(name, f"{stmt.name}.{m.name}", [m], is_package)
            if _registers(stmt):
                eager.add(stmt.name)
            for base in stmt.bases:
                chain = _chain(base)
                head = chain[0] if chain else ""
                if not (head in units or bindings.get(head, ("", ""))[1].startswith(PACKAGE)):
                    external.add(stmt.name)
        elif (isinstance(stmt, ast.Assign) or (isinstance(stmt, ast.AnnAssign) and stmt.value)) \
                and _targets(stmt) and not set(_targets(stmt)) & set(units):
            names = _targets(stmt)
            unit = _unit(name, names[0], [stmt], is_package)
            for n in names:
                units[n] = unit
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue  # bindings, not code: what they import is followed through `imported`
        else:
            rest.append(stmt)  # including a second definition of a name: it always runs
    units[""] = _unit(name, "", rest, is_package)
    return Module(name, path, units, bindings, imported, eager, classes, external)


# -- the package index and the walk ------------------------------------------------------------

class Index:
    """Every module of the package, read once (a Snakefile parse asks for each stage)."""

    def __init__(self, root: Path = PACKAGE_ROOT):
        self.root = root
        self.paths: dict[str, Path] = {}
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root.parent).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            # a module only inside packages (a .py template in a data folder is data)
            if all(p.isidentifier() for p in parts) and all(
                    (root.parent.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
                self.paths[".".join(parts)] = path
        modules = set(self.paths.values())
        self.data_files = sorted(p for p in root.rglob("*") if p.is_file() and p not in modules
                                 and "__pycache__" not in p.parts and p.suffix != ".pyc")
        self._modules: dict[str, Module] = {}

    def module(self, name: str) -> Module | None:
        if name not in self.paths:
            return None
        if name not in self._modules:
            self._modules[name] = read_module(name, self.paths[name])
        return self._modules[name]

    def walk(self, stage: str) -> tuple[list[Unit], list[Path]]:
        """The units `stage` can run (through the CLI) and the package data files it names."""
        reached: dict[int, Unit] = {}
        imported: set[str] = set()
        classes: set[tuple[str, str]] = set()
        attrs: set[str] = set()
        strings: set[str] = set()
        todo: list[Unit] = []

        def add(unit: Unit | None) -> None:
            if unit is not None and id(unit) not in reached:
                reached[id(unit)] = unit
                todo.append(unit)

        def import_module(name: str) -> None:
            while name and name not in imported:
                mod = self.module(name)
                if mod is None:
                    # `from forgeline.x import y`: only forgeline.x is a module
                    name = name.rpartition(".")[0]
                    continue
                imported.add(name)
                add(mod.units[""])
                for n in mod.eager:
                    reach_name(mod, n)
                for target in mod.imported:
                    import_module(target)
                name = name.rpartition(".")[0]  # importing a module imports its packages

        def whole(mod: Module) -> None:
            import_module(mod.name)
            for n in list(mod.units):
                reach_name(mod, n)

        def reach_name(mod: Module, name: str, rest: tuple[str, ...] = (),
                       attribute: bool = False) -> None:
            """`name` (then attributes `rest`) at module `mod`'s top level; `attribute`: reached
            as `mod.name` from outside, where a package's submodule is a name too."""
            if name in mod.units:
                add(mod.units[name])
                if name in mod.classes:
                    classes.add((mod.name, name))
                    if rest and f"{name}.{rest[0]}" in mod.units:
                        add(mod.units[f"{name}.{rest[0]}"])
                return
            if name in mod.bindings:
                follow(mod.bindings[name], rest)
                return
            if attribute and self.module(f"{mod.name}.{name}") is not None:
                follow(("module", f"{mod.name}.{name}"), rest)
                return
            for kind, target in list(mod.bindings.values()):
                star = self.module(target) if kind == "star" else None
                if star is not None and (name in star.units or name in star.bindings):
                    reach_name(star, name, rest)

        def follow(binding: tuple[str, str], rest: tuple[str, ...]) -> None:
            kind, target = binding
            if kind == "symbol" and self.module(target) is None:
                source, _, name = target.rpartition(".")
                import_module(source)
                mod = self.module(source)
                if mod is not None:
                    reach_name(mod, name, rest, attribute=True)
                return
            import_module(target)  # a module (`from pkg import submodule` too)
            mod = self.module(target)
            if mod is None:
                return
            if rest:
                reach_name(mod, rest[0], rest[1:], attribute=True)
            else:
                whole(mod)  # the module itself used as a value

        def resolve(unit: Unit, ref: Ref) -> None:
            if ref[0] in unit.imports:
                follow(unit.imports[ref[0]], ref[1:])
            else:
                reach_name(self._modules[unit.module], ref[0], ref[1:])

        entry_mod, entry_fn = ENTRY
        import_module(entry_mod)
        reach_name(self.module(entry_mod), entry_fn)
        import_module(stage)
        for fn in STAGE_ENTRY:
            reach_name(self.module(stage), fn)
        while todo:
            while todo:
                unit = todo.pop()
                attrs |= unit.attrs
                strings |= unit.strings
                for target in unit.imports.values():
                    import_module(target[1] if target[0] != "symbol" else target[1].rpartition(".")[0])
                for ref in sorted(unit.refs):
                    resolve(unit, ref)
            # methods: by name, of the classes reached (all of them for a framework's subclass)
            for mod_name, cls in sorted(classes):
                mod = self._modules[mod_name]
                for name, unit in mod.units.items():
                    if name.startswith(f"{cls}."):
                        meth = name.split(".", 1)[1]
                        if (cls in mod.external_classes or meth in attrs or meth in strings
                                or (meth.startswith("__") and meth.endswith("__"))):
                            add(unit)
        files = [p for p in self.data_files if self._named(p, strings)]
        return sorted(reached.values(), key=lambda u: u.key), files

    def _named(self, path: Path, strings: set[str]) -> bool:
        """A data file counts when a string names it, its path, or a folder above it that is not
        a Python package (`"templates"`, not `"policy"`). Modules count through imports."""
        rel = path.relative_to(self.root)
        names = {rel.as_posix(), rel.name}
        for folder in rel.parents:
            if folder != Path(".") and not (self.root / folder / "__init__.py").is_file():
                names |= {folder.as_posix(), folder.name}
        return bool(names & strings)


@lru_cache(maxsize=None)
def _index(root: str) -> Index:
    return Index(Path(root))


def stage_code(stage: str, root: Path = PACKAGE_ROOT, index: Index | None = None) -> dict:
    """The stamp of `stage`: its digest and what it covers (units by name, data files)."""
    index = index or _index(str(root))
    if index.module(stage) is None:
        raise ValueError(f"{stage}: no such module under {root}")
    units, files = index.walk(stage)
    h = hashlib.sha256(f"forgeline-code/{FORMAT}\n{stage}\n".encode())
    for unit in units:
        h.update(f"{unit.key}\0{unit.code}\n".encode())
    for path in files:
        h.update(f"{path.relative_to(root).as_posix()}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return {"stage": stage, "format": FORMAT, "digest": h.hexdigest(),
            "units": [u.key for u in units],
            "data_files": [p.relative_to(root).as_posix() for p in files]}


def stage_digest(stage: str) -> str:
    """A manifest's code digest: from the code cache where the Snakefile's parse left it for
    the package's current bytes (~6 ms; a walk costs ~0.2 s of every job), else walked (the
    cache is not written: a job may run in any folder)."""
    return cached_stage_code(stage, store=False)["digest"]


_TREE_KEYS: dict[tuple, str] = {}


def tree_key(root: str | Path) -> str:
    """sha256 over every file of the package (path and bytes): what all stamps are a function of,
    this module included. Hashing the files is ~100x cheaper than walking them; it is redone
    only when a file's size or mtime changes."""
    files = sorted(p for p in Path(root).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    signature = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    if signature not in _TREE_KEYS:
        h = hashlib.sha256(f"forgeline-tree/{FORMAT}\n".encode())
        for path in files:
            h.update(f"{path.relative_to(root).as_posix()}\0".encode())
            h.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
        _TREE_KEYS.clear()
        _TREE_KEYS[signature] = h.hexdigest()
    return _TREE_KEYS[signature]


_CACHED: dict[str, dict] = {}


def cached_stage_code(stage: str, root: Path = PACKAGE_ROOT, cache: Path = CODE_CACHE,
                      store: bool = True) -> dict:
    """`stage_code(stage)`, kept in `cache` for the package's current bytes (`tree_key`): a
    Snakefile parse with no code changed reads the stamps instead of walking 22 stages (~2 s).
    `store=False`: a stamp not in the cache is walked and not written there."""
    key = tree_key(root)
    if _CACHED.get("tree") != key:
        try:
            data = json.loads(Path(cache).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            data = {}
        _CACHED.clear()
        _CACHED.update(data if data.get("tree") == key else {"tree": key, "stamps": {}})
    stamps = _CACHED["stamps"]
    if stage not in stamps:
        if not store:
            return stage_code(stage, root)
        stamps[stage] = stage_code(stage, root)
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(cache).with_name(f".{Path(cache).name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_CACHED, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, cache)
    return stamps[stage]


def write_stamp(stage: str, stamp_dir: Path = STAMP_DIR, root: Path = PACKAGE_ROOT) -> Path:
    """Write `stamp_dir/<stage>.json` only when its content changes.

    A stamp written for the first time gets an old mtime: the outputs already there (a `dvc pull`
    of a tagged run, a checkout from before stamps existed) are taken as built by this code. From
    then on a change of the code a stage runs gives the stamp a fresh mtime, and Snakemake reruns
    the stage; DVC compares its bytes.
    """
    path = Path(stamp_dir) / f"{stage}.json"
    text = json.dumps(cached_stage_code(stage) if Path(root) == _HERE else stage_code(stage, root),
                      indent=1) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return path
        first = False
    except FileNotFoundError:
        first = True
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    if first:
        os.utime(tmp, (OLD, OLD))
    os.replace(tmp, path)
    return path


# `forgeline code-deps`: the DVC stage that refreshes the stamps before `dvc repro` compares them
# (Snakemake refreshes them itself while it parses the Snakefile), and a way to see what a
# stage's code is.
def add_arguments(parser) -> None:
    parser.add_argument("stages", nargs="+", help="stage modules, e.g. forgeline.train.ppo")
    parser.add_argument("--write", action="store_true",
                        help=f"write {STAMP_DIR}/<stage>.json where the code changed")
    parser.add_argument("--explain", action="store_true",
                        help="list the definitions and data files each stage runs")


def run(cfg, args) -> None:
    for stage in args.stages:
        stamp = cached_stage_code(stage)
        if args.write:
            write_stamp(stage)
        modules = sorted({u.split(":")[0] for u in stamp["units"]})
        print(f"{stage}: {stamp['digest'][:16]}  {len(stamp['units'])} definitions in "
              f"{len(modules)} modules, {len(stamp['data_files'])} data files")
        if args.explain:
            for key in [*stamp["units"], *stamp["data_files"]]:
                print(f"  {key}")


__all__ = ["Index", "STAMP_DIR", "normalized", "stage_code", "stage_digest", "write_stamp"]
