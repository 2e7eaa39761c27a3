"""The SWE-smith task instance: fields, their types, and normalisation of what upstream varies."""
from __future__ import annotations

import json
from typing import Any

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
    empty_problem_statement, empty_fail_to_pass.
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


def instance_id(repo: str, commit: str, bug_type: str, digest: str) -> str:
    """`<repo>.<commit8>.<bugtype>__<hash8>`, SWE-smith's naming."""
    return f"{repo}.{commit[:8]}.{bug_type}__{digest[:8]}"


def repo_key(repo: str) -> str:
    """The repository's short name, which names its snapshot folder, image and jobs.

    SWE-smith writes `repo` as `owner/name` or `swesmith/owner__name.commit8`; forgeline's own
    bugs use the bare folder name. All three map to the last path component.
    """
    return repo.rstrip("/").rsplit("/", 1)[-1]
