"""Helper virtual environments: REAL reference packages that cannot live in .venv/ beside
forgeline (harbor needs Python >= 3.12; swesmith 0.0.9 needs swebench 4, forgeline's conformance
check wants swebench 5 too), each in a venv of its own at the repository root, git-ignored.

A venv is made from a requirements file in envs/ that pins every package, once per machine: a
stamp file in the venv holds the file's sha256, so later runs reuse the venv and a changed file
reinstalls into it; a file lock in .forgeline/ keeps two test sessions from installing at once.
`FORGELINE_<NAME>_VENV` moves a venv (e.g. to check a from-scratch install without losing this
one); `FORGELINE_PYTHON3XX` names the interpreter it is made with.

    python tests/venvs.py swebench swesmith      # what `make graders` runs; prints each python
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 1800


class VenvError(RuntimeError):
    """A helper venv could not be made (no suitable Python, or pip failed)."""


@dataclass(frozen=True)
class HelperVenv:
    name: str  # .venv-<name>/, envs/<name>-requirements.txt
    python: tuple[int, int]  # the Python the pins were frozen on; later 3.x are tried after it

    @property
    def path(self) -> Path:
        return Path(os.environ.get(f"FORGELINE_{self.name.upper()}_VENV") or ROOT / f".venv-{self.name}")

    @property
    def requirements(self) -> Path:
        return ROOT / "envs" / f"{self.name}-requirements.txt"

    @property
    def python_env(self) -> str:
        return "FORGELINE_PYTHON%d%d" % self.python


HARBOR = HelperVenv("harbor", (3, 12))
SWEBENCH = HelperVenv("swebench", (3, 11))  # swebench 5.0.2: the SWE-bench grader
SWESMITH = HelperVenv("swesmith", (3, 11))  # swesmith 0.0.9 + swebench 4.1.0
VENVS = {v.name: v for v in (HARBOR, SWEBENCH, SWESMITH)}


def _is_at_least(exe: str | os.PathLike, version: tuple[int, int]) -> bool:
    try:
        return subprocess.run([str(exe), "-c", f"import sys; assert sys.version_info >= {version!r}"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_python(version: tuple[int, int], env_var: str | None = None) -> str | None:
    """A Python >= `version`, that exact minor first: $env_var, python3.X on PATH (a pyenv shim
    may not run), pyenv's installs, /usr/bin, this interpreter, then pyenv's later 3.x, oldest
    first."""
    minor = "%d.%d" % version
    pyenv = os.path.expanduser("~/.pyenv/versions")
    def pyenv_version(path: str) -> tuple[int, ...]:
        return tuple(int(x) for x in Path(path).parts[-3].split(".") if x.isdigit())

    later = sorted((p for p in glob.glob(f"{pyenv}/3.*/bin/python3")
                    if pyenv_version(p)[:2] > version), key=pyenv_version)
    candidates = [os.environ.get(env_var) if env_var else None, shutil.which(f"python{minor}"),
                  *sorted(glob.glob(f"{pyenv}/{minor}*/bin/python{minor}"), reverse=True),
                  f"/usr/bin/python{minor}", sys.executable, *later]
    for exe in filter(None, candidates):
        if _is_at_least(exe, version):
            return exe
    return None


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on `path` (created) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def ensure(venv: HelperVenv) -> Path:
    """The venv's bin/python with its requirements installed: created once and reused (the stamp
    holds the requirements' sha256; a changed file reinstalls into it). VenvError on failure."""
    python = venv.path / "bin" / "python"
    stamp = venv.path / ".forgeline-requirements.sha256"
    want = hashlib.sha256(venv.requirements.read_bytes()).hexdigest()
    with locked(ROOT / ".forgeline" / f"venv-{venv.name}.lock"):
        if stamp.is_file() and stamp.read_text().strip() == want and python.exists():
            return python
        if not (python.exists() and _is_at_least(python, venv.python)):
            base = find_python(venv.python, venv.python_env)
            if base is None:
                raise VenvError(f"no Python >= {'%d.%d' % venv.python} for {venv.path.name} "
                                f"(set {venv.python_env})")
            shutil.rmtree(venv.path, ignore_errors=True)
            subprocess.run([base, "-m", "venv", str(venv.path)], check=True, timeout=300)
        res = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                              "-r", str(venv.requirements)], capture_output=True, text=True,
                             timeout=INSTALL_TIMEOUT_S)
        if res.returncode != 0:
            raise VenvError(f"installing {venv.requirements.name} into {venv.path} failed: "
                            f"{res.stderr[-1500:]}")
        stamp.write_text(want + "\n")
    return python


def main(argv: list[str]) -> int:
    names = argv or sorted(VENVS)
    unknown = [n for n in names if n not in VENVS]
    if unknown:
        print(f"unknown venv(s): {', '.join(unknown)}; known: {', '.join(sorted(VENVS))}",
              file=sys.stderr)
        return 2
    for name in names:
        try:
            print(ensure(VENVS[name]))
        except VenvError as exc:
            print(exc, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
