"""The SWE-smith task instance: fields, their types, and normalisation of what upstream varies.

Everything in a record that later names a file, a folder, an image or a command argument is
hostile until checked, and it is checked here, once, at the edge (ingest, and validate's own
reading of its input): ids and repository names are plain names, every path a patch touches is
relative and stays inside the repository, test ids cannot pass for pytest options. What fails
is rejected with category `unsafe_id`, `unsafe_patch` or `unsafe_test_id`.
"""
from __future__ import annotations

import json
import re
from typing import Any

from forgeline.sandbox.snapshot import DEFAULT_OWNER

# Fields every instance must carry, with their normalised type.
REQUIRED_FIELDS: dict[str, type] = {
    "instance_id": str,
    "repo": str,
    "patch": str,
    "FAIL_TO_PASS": list,
    "PASS_TO_PASS": list,
    "problem_statement": str,
    "image_name": str,
}
OPTIONAL_FIELDS: dict[str, type] = {"base_commit": str, "created_at": str}
# Fields that define what a task IS: the semantic digest of a split covers these and only these.
DEFINING_FIELDS = ("instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS", "PASS_TO_PASS",
                   "problem_statement", "image_name")


class InstanceError(ValueError):
    """A record that is not a usable task instance; the message is the rejection reason.

    `category` is a short stable key for reports: wrong_type, missing_field, empty_field,
    empty_problem_statement, empty_fail_to_pass, unsafe_id, unsafe_patch, unsafe_test_id.
    """

    def __init__(self, reason: str, category: str = "invalid"):
        super().__init__(reason)
        self.category = category


def _as_test_list(value: Any, field: str) -> list[str]:
    # SWE-bench stores test lists as JSON-encoded strings; SWE-smith as lists. Accept both.
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise InstanceError(f"{field}: a string that is not a JSON-encoded list",
                                "wrong_type") from None
    # C-level checks (map, set): test lists are long and there are ~60k instances upstream
    if not isinstance(value, list) or not set(map(type, value)) <= {str} \
            or not all(map(str.strip, value)):
        raise InstanceError(f"{field}: expected a list of pytest node ids", "wrong_type")
    return list(value)


MAX_NAME = 255
MAX_PATH = 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # no "/", no leading dot or dash
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DIFF_GIT = re.compile(r"^diff --git a/(.+?) b/(.+)$")
_LINK_MODE = re.compile(r"^(?:new file mode|new mode|deleted file mode|old mode) 120000", re.M)


def parse_patch(patch: str) -> tuple[list[str], list[str]]:
    """(paths a unified git diff touches, sorted; code lines it adds or removes, without +/-).

    Hunk bodies are read by their line counts (as `git apply` does), so a removed line whose
    text starts with "--" is never mistaken for a file header.
    """
    paths: set[str] = set()
    code: list[str] = []
    old_left = new_left = 0
    for line in patch.split("\n"):
        if old_left > 0 or new_left > 0:
            if line.startswith("\\"):  # "\ No newline at end of file"
                continue
            tag, text = line[:1], line[1:]
            if tag == "-":
                old_left -= 1
                code.append(text)
            elif tag == "+":
                new_left -= 1
                code.append(text)
            else:  # context (a blank context line may have lost its leading space)
                old_left -= 1
                new_left -= 1
            continue
        if m := _DIFF_GIT.match(line):
            paths.update((m.group(1), m.group(2)))
        elif line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t")[0].strip()
            if name != "/dev/null":
                paths.add(name[2:] if name.startswith(("a/", "b/")) else name)
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            paths.add(line.split(" ", 2)[2])
        elif m := _HUNK.match(line):
            old_left = int(m.group(2)) if m.group(2) is not None else 1
            new_left = int(m.group(4)) if m.group(4) is not None else 1
    return sorted(paths), code


def unsafe_path(path: str) -> str | None:
    """Why a repository-relative path from a record may not be used on any machine, or None."""
    if not path or len(path) > MAX_PATH:
        return "an empty or over-long path"
    if any(c in path for c in "\0\r\\") or not path.isprintable():
        return "a path with a NUL, control character or backslash"
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "a path that is absolute or leaves the repository (/, ., .., //)"
    if parts[0] == ".git":
        return "a path inside .git"
    return None


def check_names(record: dict) -> None:
    """InstanceError unless instance_id, repo, image_name and every path and test id of the
    (type-normalised) record are safe to use as names, paths and command arguments."""
    iid, repo, image = record["instance_id"], record["repo"], record["image_name"]
    if len(iid) > MAX_NAME or not _NAME.fullmatch(iid) or ".." in iid:
        raise InstanceError(f"instance_id {iid[:80]!r}: not a plain name (letters, digits, . _ -; "
                            f"no '/', no '..', at most {MAX_NAME} characters)", "unsafe_id")
    if len(repo) > MAX_NAME or not _REPO.fullmatch(repo) or ".." in repo:
        raise InstanceError(f"repo {repo[:80]!r}: not NAME, OWNER/NAME or swesmith/OWNER__NAME.COMMIT8",
                            "unsafe_id")
    if len(image) > MAX_NAME or not _IMAGE.fullmatch(image) or ".." in image:
        raise InstanceError(f"image_name {image[:80]!r}: not a docker image reference", "unsafe_id")
    if _LINK_MODE.search(record["patch"]):
        raise InstanceError("patch creates or changes a symbolic link", "unsafe_patch")
    paths, _ = parse_patch(record["patch"])
    if not paths:
        raise InstanceError("patch: no file header (diff --git a/X b/X, --- a/X, +++ b/X)",
                            "unsafe_patch")
    for path in paths:
        why = unsafe_path(path)
        if why:
            raise InstanceError(f"patch touches {path[:120]!r}: {why}", "unsafe_patch")
    files: dict[str, str | None] = {}  # a suite's ids share a few files: check each once
    for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        for test in record[field]:
            file = test.split("::", 1)[0]
            if file not in files:
                files[file] = unsafe_path(file)
            why = files[file] if not test.startswith("-") else "starts with '-' (pytest would read an option)"
            if why or len(test) > MAX_PATH or not test.isprintable():
                raise InstanceError(f"{field}: test id {test[:120]!r}: "
                                    f"{why or 'control characters or over-long'}", "unsafe_test_id")


def normalize_instance(record: Any) -> dict:
    """Return the instance with normalised types, or raise InstanceError saying what is wrong."""
    if not isinstance(record, dict):
        raise InstanceError(f"expected a JSON object, got {type(record).__name__}", "wrong_type")
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        raise InstanceError(f"missing field(s): {', '.join(missing)}", "missing_field")
    out = dict(record)
    for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        out[field] = _as_test_list(record[field], field)
    for field, typ in {**REQUIRED_FIELDS, **OPTIONAL_FIELDS}.items():
        # null is allowed for optional fields only
        if field in out and not isinstance(out[field], typ) and \
                (field in REQUIRED_FIELDS or out[field] is not None):
            got = "null" if out[field] is None else type(out[field]).__name__
            raise InstanceError(f"{field}: expected {typ.__name__}, got {got}", "wrong_type")
    for field in ("instance_id", "repo", "patch", "image_name"):
        if not out[field].strip():
            raise InstanceError(f"{field}: empty", "empty_field")
    if not out["problem_statement"].strip():
        raise InstanceError("problem_statement: empty (upstream leaves many empty; such a task "
                            "cannot be posed to an agent)", "empty_problem_statement")
    if not out["FAIL_TO_PASS"]:
        raise InstanceError("FAIL_TO_PASS: empty (nothing shows the bug)", "empty_fail_to_pass")
    check_names(out)
    return out


def defining_fields(instance: dict) -> dict:
    """The fields in DEFINING_FIELDS, test lists normalised to lists; an absent field is None.

    This is the content of a task as far as a split digest is concerned: extra fields
    (bug_type, mutation, created_at, ...) and key order do not count.
    """
    out = {f: instance.get(f) for f in DEFINING_FIELDS}
    for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if isinstance(out[field], str):
            out[field] = _as_test_list(out[field], field)
    return out


def instance_id(repo_name: str, bug_type: str, digest: str) -> str:
    """SWE-smith's `<owner>__<repo>.<commit8>.<bug_type>__<hash8>` (repo_name: `owner__repo.commit8`)."""
    return f"{repo_name}.{bug_type}__{digest[:8]}"


def repo_key(repo: str) -> str:
    """The snapshot folder (under repos.root) that a record's `repo` names; it also names the
    repository's jobs and result files.

    SWE-smith's `swesmith/OWNER__NAME.<commit8>` -> `OWNER__NAME`, or `NAME` when the owner is
    forgeline (the embedded repositories' folders carry no owner); `OWNER/NAME` and a bare
    `NAME` -> `NAME`.
    """
    owner_repo, _, last = repo.rstrip("/").rpartition("/")
    if owner_repo == "swesmith":
        last = re.sub(r"\.[0-9a-f]{8}$", "", last)
        owner, sep, name = last.partition("__")
        if sep and owner == DEFAULT_OWNER and name:
            return name
    return last
