"""Atomic writes, digests, manifests and the code closure of a stage."""
import json
import subprocess
import sys

import pytest

from forgeline import provenance as prov


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError):
        with prov.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_no_final_file(tmp_path):
    """A process killed mid-write leaves at most a hidden temp file, never the final name."""
    target = tmp_path / "big.jsonl"
    code = ("import os, sys, time\nfrom forgeline import provenance as p\n"
            f"with p.atomic_path({str(target)!r}) as t:\n"
            "    f = open(t, 'w'); f.write('x' * 1000); f.flush()\n"
            "    os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == -9
    assert not target.exists()


def test_write_jsonl_is_canonical(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    prov.write_jsonl(a, [{"b": 1, "a": [1, 2]}])
    prov.write_jsonl(b, [{"a": [1, 2], "b": 1}])
    assert a.read_bytes() == b.read_bytes() == b'{"a":[1,2],"b":1}\n'


def test_tree_digest_ignores_caches_and_order(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    first = prov.tree_digest(tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert prov.tree_digest(tmp_path) == first
    (tmp_path / "pkg" / "m.py").write_text("x = 2\n")
    assert prov.tree_digest(tmp_path) != first


def test_manifest_records_inputs_outputs_code_and_versions(tmp_path):
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("in")
    m = prov.Manifest("demo", params={"k": 1}, seeds={"split": 7}, inputs=[inp],
                      code="forgeline.tasks.split")
    with m.timed("work"):
        out.write_text("out")
    record = m.write(tmp_path / "manifest.json", outputs=[out])
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == record
    assert record["outputs"][0]["sha256"] == prov.sha256_bytes(b"out")
    assert record["inputs"][0]["bytes"] == 2
    assert record["params"] == {"k": 1} and record["seeds"] == {"split": 7}
    assert record["code"]["forgeline"] and record["code"]["stage_digest"]
    assert record["libraries"]["python"]
    assert "work" in record["timings"] and "wall_s" in record["timings"]


def test_manifest_refuses_missing_outputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="outputs missing"):
        prov.Manifest("demo").write(tmp_path / "m.json", outputs=[tmp_path / "nope"])


# -- owned temps, killed writes and the sweep (the fault points of provenance.fault_point) --------

def _killed_at(point: str, name: str, code: str, tmp_path) -> None:
    """Run `code` in a child that SIGKILLs itself at `point` for `name` (FORGELINE_FAULT)."""
    env = {**__import__("os").environ, prov.FAULT_ENV: f"{point}:{name}"}
    proc = subprocess.run([sys.executable, "-c", "from forgeline import provenance as p\n" + code],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def _temps(folder):
    """Hidden entries but .forgeline/ (where a stage run in `folder` indexes its manifests)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".forgeline")


def test_temp_names_say_who_owns_them(tmp_path):
    with prov.atomic_path(tmp_path / "out.json") as tmp:
        assert tmp.name.startswith(".out.json" + prov.owner_tag()) and tmp.name.endswith(".tmp")
        assert prov.is_write_temp(tmp.name)
        assert prov.owner_of(tmp.name)[2] == "running"
        assert prov.sweep_leftovers(tmp_path) == []  # a live owner's temp stays
        tmp.write_text("{}")
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("point", ["file.open", "file.written"])
def test_a_killed_file_write_leaves_an_owned_temp_the_next_write_sweeps(tmp_path, point):
    _killed_at(point, "out.jsonl", "p.write_jsonl('out.jsonl', [{'a': 1}] * 100)", tmp_path)
    assert not (tmp_path / "out.jsonl").exists()
    [left] = _temps(tmp_path)
    assert prov.is_write_temp(left) and prov.owner_of(left)[2] == "gone"
    prov.write_text(tmp_path / "other.txt", "x")  # any write into the folder sweeps it
    assert _temps(tmp_path) == [] and (tmp_path / "other.txt").read_text() == "x"


def test_only_temps_of_gone_owners_on_this_host_are_swept(tmp_path):
    me = prov.owner_tag()
    host, pid, start = me.strip("~").split("~")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    names = {f".a{me}x.tmp": "kept", f".b~{host}~{dead}~{start}~x.tmp": "swept",
             f".c~{host}~{pid}~{int(start) + 1}~x.tmp": "swept",  # this PID, another start: reused
             f".d~elsewhere.node~{dead}~1~x.tmp": "kept",        # another host: cannot tell
             ".e.json.abc.tmp": "kept", "f~x~1~1~.tmp": "kept"}  # no owner tag; not hidden
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text("x")
    swept = {p.name for p in prov.sweep_leftovers(tmp_path)}
    assert swept == {n for n, what in names.items() if what == "swept"}
    assert {p.name for p in tmp_path.iterdir()} == {n for n, what in names.items() if what == "kept"}
    assert prov.owner_of(f".d~elsewhere.node~{dead}~1~x.tmp") == ("elsewhere.node", int(dead), "elsewhere")


def _model(folder, version: str) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(3):
        (folder / f"w{i}.bin").write_text(version * 1000)
    (folder / "manifest.json").write_text(version)


WRITE_MODEL = ("from pathlib import Path\n"
               "with p.atomic_dir('model') as t:\n"
               "    for i in range(3): (t / f'w{i}.bin').write_text('new' * 1000)\n"
               "    (t / 'manifest.json').write_text('new')\n")


@pytest.mark.parametrize("point,left", [("dir.open", "old"), ("dir.built", "old"),
                                        ("dir.replaced", "new")])
def test_replacing_a_folder_is_one_swap_at_any_kill(tmp_path, point, left):
    """Killed anywhere, `model` is the old tree or the new one, whole: never missing, never mixed."""
    _model(tmp_path / "model", "old")
    _killed_at(point, "model", WRITE_MODEL, tmp_path)
    files = {p.name: p.read_text()[:3] for p in (tmp_path / "model").iterdir()}
    assert files == {"w0.bin": left, "w1.bin": left, "w2.bin": left, "manifest.json": left}
    [temp] = _temps(tmp_path)
    assert prov.owner_of(temp)[2] == "gone"
    subprocess.run([sys.executable, "-c", "from forgeline import provenance as p\n" + WRITE_MODEL],
                   cwd=tmp_path, check=True)  # the rerun: sweeps the leftover, writes the new tree
    assert _temps(tmp_path) == []
    assert {p.read_text()[:3] for p in (tmp_path / "model").iterdir()} == {"new"}


def test_replace_by_renames_killed_between_the_renames(tmp_path):
    """Where the file system cannot swap: a kill between the renames leaves no `model` (Snakemake
    sees a missing output) and the old tree under an owned temp name, swept by the next write."""
    _model(tmp_path / "model", "old")
    _model(tmp_path / "new", "new")
    _killed_at("dir.aside", "model",
               "from pathlib import Path\np.replace_by_renames(Path('new'), Path('model'))", tmp_path)
    assert not (tmp_path / "model").exists()
    [aside] = _temps(tmp_path)
    assert (tmp_path / aside / "manifest.json").read_text() == "old"
    subprocess.run([sys.executable, "-c", "from forgeline import provenance as p\n" + WRITE_MODEL],
                   cwd=tmp_path, check=True)
    assert _temps(tmp_path) == [] and (tmp_path / "model" / "manifest.json").read_text() == "new"


def test_exchange_swaps_two_folders(tmp_path):
    _model(tmp_path / "a", "aaa")
    _model(tmp_path / "b", "bbb")
    assert prov.exchange(tmp_path / "a", tmp_path / "b")  # ext4, xfs, btrfs, tmpfs: Linux >= 3.15
    assert (tmp_path / "a" / "manifest.json").read_text() == "bbb"
    assert (tmp_path / "b" / "manifest.json").read_text() == "aaa"


def test_atomic_dir_never_replaces_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an output of this stage"):
        with prov.atomic_dir(tmp_path / "model") as t:
            (t / "manifest.json").write_text("{}")
    assert (tmp_path / "model" / "notes.txt").read_text() == "mine" and _temps(tmp_path) == []
