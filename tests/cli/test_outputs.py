"""Outputs that belong to their run, and writes that are checked (issue 31, items 3, 4 and 6).

Driven as a user drives ``pympi-nbody`` under mpiexec: a fresh run onto an
old run's trajectory and thermo log is refused and the old files stay byte
for byte; a restart continues only its own run's files; a file that is no
trajectory or log is never truncated; a trajectory or log that fills the disk
ends the run with one message and exit 1, its torn tail cut and the state
saved; a torn row is cut on restart; two jobs on one checkpoint path: the
second is refused.  Rows of docs/faults.md.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess

import ase.io
import gsd.hoomd
import pytest
import yaml

from helpers.commands import env, mpiexec_argv, one_message, run, script
from helpers.disks import fill, tmpfs
from helpers.jobs import job, wait_busy, wait_for_path, wait_for_rank
from helpers.outputs import steps_of
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt

NBODY = script("pympi-nbody")
LJ = ["--model", "lj"]


def nbody(ranks, *args, cwd=None):
    return run(mpiexec_argv(ranks) + [NBODY, *map(str, args), "--threads", "1", "-q"], timeout=300, env=env(),
               cwd=cwd)


def ok(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# ---------------------------------------------------------------- item 3: the probe

@pytest.mark.parametrize("ranks", [2, 3])
def test_a_fresh_run_onto_an_old_runs_files_is_refused_and_they_stay_byte_identical(tmp_path, ranks):
    dump, log = tmp_path / "m.extxyz", tmp_path / "m.csv"
    ok(nbody(ranks, 4000, *LJ, "--steps", 200, "--dump", dump, "--dump-every", 50, "--thermo-file", log))
    before = dump.read_bytes(), log.read_bytes()
    b = nbody(ranks, 4000, *LJ, "--temperature", 3.0, "--steps", 300, "--dump", dump, "--dump-every", 50,
              "--thermo-file", log)
    one_message(b, f"--dump {str(dump)!r} already exists")
    assert "--restart CHECKPOINT" in b.stderr and "remove the file" in b.stderr and "--overwrite" in b.stderr
    g = nbody(ranks, 1000, "--steps", 10, "--dump", tmp_path / "m.extxyz", "--thermo-file", log)  # gravity
    one_message(g, "already exists")
    assert (dump.read_bytes(), log.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv", "m.extxyz"]
    # what the first run recorded: its identity in every frame and on the log's first line
    frames = ase.io.read(str(dump), index=":")
    assert [a.info["step"] for a in frames] == [0, 50, 100, 150, 200]
    assert all(a.info["model"] == "lj" and a.info["n"] == 4000 and a.info["temperature"] == 1.44
               and a.info["pair"] == "lj/cut" and a.info["pair_epsilon"] == 1.0 for a in frames)
    assert log.read_text().startswith("# pympi-nbody model=lj n=4000 box=16.795961913825074 seed=87287 ")


def test_overwrite_replaces_another_runs_files(tmp_path):
    dump, log = tmp_path / "m.gsd", tmp_path / "m.yaml"
    ok(nbody(2, 2048, *LJ, "--steps", 20, "--dump", dump, "--dump-every", 10, "--thermo-file", log))
    ok(nbody(2, 1000, "--steps", 10, "--dump", dump, "--dump-every", 5, "--thermo-file", log, "--overwrite"))
    with gsd.hoomd.open(str(dump)) as f:
        assert [int(fr.configuration.step) for fr in f] == [0, 5, 10] and f[0].particles.N == 1000
        assert bytes(f[0].log["pympi/run"]).decode().startswith("model=gravity n=1000 box=open seed=20240601 ")
    docs = list(yaml.safe_load_all(log.read_text()))
    assert len(docs) == 1 and docs[0]["keywords"][4] == "Virial" and len(docs[0]["data"]) == 2


def test_a_restart_continues_only_its_own_runs_files(tmp_path):
    dump, log, a, b = tmp_path / "m.extxyz", tmp_path / "m.csv", tmp_path / "a.npz", tmp_path / "b.npz"
    ok(nbody(2, 2048, *LJ, "--steps", 20, "--dump", dump, "--dump-every", 10, "--thermo-file", log,
             "--checkpoint", a))
    ok(nbody(2, 2048, *LJ, "--steps", 20, "--temperature", 3.0, "--checkpoint", b))
    before = dump.read_bytes(), log.read_bytes()
    other = nbody(2, 2048, *LJ, "--steps", 40, "--dump", dump, "--dump-every", 10, "--thermo-file", log,
                  "--restart", b)
    one_message(other, "belongs to another run (temperature 1.44 there, 3.0 here)")
    assert (dump.read_bytes(), log.read_bytes()) == before
    ok(nbody(2, 2048, *LJ, "--steps", 40, "--dump", dump, "--dump-every", 10, "--thermo-file", log, "--restart", a))
    assert steps_of(dump) == [0, 10, 20, 30, 40] and steps_of(log) == [0, 20, 40]


@pytest.mark.parametrize("name, text", [("notes.xyz", "my notes\n3 atoms, no frame\n"),
                                        ("notes.gsd", "not a GSD file\n"),
                                        ("notes.csv", "date,weight\n2024-01-01,3\n"),
                                        ("notes.yaml", "shopping: [eggs, milk]\n")])
def test_a_file_of_another_kind_is_never_truncated(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    option = "--thermo-file" if path.suffix in (".csv", ".yaml") else "--dump"
    for extra in ([], ["--overwrite"], ["--restart", tmp_path / "none.npz"]):
        p = nbody(2, 2048, *LJ, "--steps", 2, option, path, *extra)
        if not extra or extra[0] != "--restart":
            one_message(p, f"{option} {str(path)!r} exists and is not a")
            assert "it is never overwritten" in p.stderr
        assert p.returncode == 2 and path.read_text() == text


# ---------------------------------------------------------------- item 4: writes checked

def _fails_on_a_full_disk(tmp_path, dump, args, status=1):
    """Run until the small filesystem of ``dump`` is full: one message, exit status, the state saved."""
    ck = tmp_path / "c.npz"
    p = nbody(2, 500, *LJ, "--steps", 100, "--checkpoint", ck, *args)
    one_message(p, "No space left on device", status=status)
    step = int(p.stderr.split("the state at step ")[1].split()[0])
    assert f"is saved in {ck} (resume with --restart {ck})" in p.stderr
    assert lj_ckpt.read_file(str(ck))[0]["step"] == step
    return step


@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_a_dump_that_fills_the_disk_ends_the_run_whole(tmp_path, suffix):
    with tmpfs(tmp_path / "small", "256k") as d:
        dump = d / f"t{suffix}"
        (d / "filler").write_bytes(b"\0" * (160 if suffix == ".gsd" else 16) * 1024)
        step = _fails_on_a_full_disk(tmp_path, dump, ["--dump", dump, "--dump-every", 10])
        assert step > 0 and step % 10 == 0
        assert steps_of(dump) == list(range(0, step, 10))  # every whole frame before the one that failed
        if suffix == ".extxyz":  # cut back to the last whole frame: the file ends where that frame ends
            assert dump.read_bytes().endswith(b"\n") and ase.io.read(str(dump), index=-1).info["step"] == step - 10
        (d / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,size=1m", str(d)], check=True)
        ok(nbody(2, 500, *LJ, "--steps", step + 20, "--dump", dump, "--dump-every", 10,
                 "--restart", tmp_path / "c.npz"))
        assert steps_of(dump) == list(range(0, step + 21, 10))


def test_a_thermo_log_that_fills_the_disk_ends_the_run_and_a_restart_fills_the_gap(tmp_path):
    with tmpfs(tmp_path / "small", "8k") as d:
        log = d / "t.csv"
        (d / "filler").write_bytes(b"\0" * 4096)
        step = _fails_on_a_full_disk(tmp_path, log, ["--thermo", 1, "--thermo-file", log])
        assert log.read_bytes().endswith(b"\n") and steps_of(log) == list(range(step))
        (d / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,size=64k", str(d)], check=True)
        ok(nbody(2, 500, *LJ, "--steps", 100, "--thermo", 1, "--thermo-file", log, "--restart", tmp_path / "c.npz"))
        assert steps_of(log) == list(range(101))


@pytest.mark.parametrize("suffix", [".csv", ".yaml"])
def test_a_torn_row_is_cut_on_restart(tmp_path, suffix):
    log, ck = tmp_path / f"t{suffix}", tmp_path / "c.npz"
    ok(nbody(2, 2048, *LJ, "--steps", 20, "--thermo", 10, "--thermo-file", log, "--checkpoint", ck))
    with open(log, "a") as fh:  # killed mid-row at step 30: half a row, no newline
        fh.write("30,1.4400" if suffix == ".csv" else "  - [30, 1.44")
    ok(nbody(2, 2048, *LJ, "--steps", 40, "--thermo", 10, "--thermo-file", log, "--restart", ck))
    assert steps_of(log) == [0, 10, 20, 30, 40]
    text = log.read_text()
    assert "1.4400" not in text and "1.44\n" not in text  # the torn row is gone, nothing glued to it
    if suffix == ".csv":
        rows = list(csv.reader(line for line in text.splitlines() if not line.startswith("#")))
        assert all(len(r) == 6 for r in rows)


@pytest.fixture(scope="module")
def continued(tmp_path_factory):
    """A gravity run's checkpoint at step 15 with its frames and rows every 5 steps: a trajectory and a log
    of each format, for a restart to continue."""
    d = tmp_path_factory.mktemp("continued")
    for dump, log in (("d.extxyz", "t.csv"), ("d.gsd", "t.yaml")):
        ok(nbody(2, 200, "--backend", "numpy", "--steps", 15, "--dump", d / dump, "--dump-every", 5, "--thermo", 5,
                 "--thermo-file", d / log, "--checkpoint", d / "c.npz", "--overwrite"))
    return d


def _damage(path, case: str) -> None:
    """What each case of :func:`test_a_file_damaged_before_its_end_is_refused_untouched` does to ``path``."""
    if case in ("an atom line deleted", "step=ten"):
        lines = path.read_bytes().split(b"\n")
        frame = next(i for i, line in enumerate(lines) if b" step=5 " in line)  # the header of step 5's frame
        if case == "step=ten":
            lines[frame] = lines[frame].replace(b" step=5 ", b" step=ten ")
        else:
            del lines[frame + 50]
        path.write_bytes(b"\n".join(lines))
    elif case == "an index entry erased":  # GSD: frame 1's first entry
        import struct

        import numpy as np

        data = bytearray(path.read_bytes())
        at, allocated = struct.unpack_from("<QQ", data, 8)
        frames = np.frombuffer(data, "<u8", count=allocated * 4, offset=at)[::4]
        first = int(np.flatnonzero(frames == 1)[0])
        data[at + 32 * first:at + 32 * (first + 1)] = bytes(32)
        path.write_bytes(bytes(data))
    elif case == "a row damaged":
        path.write_text(path.read_text().replace("\n5,", "\n5,1.5,oops\n6,", 1))
    else:  # a row past the checkpoint
        with open(path, "a") as fh:
            fh.write("  - [999, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, ]\n")


@pytest.mark.parametrize("case, name, ranks, words", [
    ("an atom line deleted", "d.extxyz", 2, "--dump '{path}' is damaged at line 404: '200' (1 word(s)) where an atom "
                                            "line of the frame of line 203"),
    ("step=ten", "d.extxyz", 3, "--dump '{path}' is damaged at line 204: the frame header's step=ten is not a whole "
                                "number"),
    ("an index entry erased", "d.gsd", 2, "--dump '{path}' is damaged at index entry "),
    ("a row damaged", "t.csv", 2, "--thermo-file '{path}' is damaged at line 4: "),
    ("a row past the checkpoint", "t.yaml", 2, "--thermo-file '{path}' holds rows up to step 999, beyond step 15 of "
                                              "the checkpoint"),
])
def test_a_file_damaged_before_its_end_is_refused_untouched(tmp_path, continued, case, name, ranks, words):
    """(issue 60, items 2, 11, 13; was: the extended XYZ cut at the first frame that did not parse, the frames
    after it gone, exit 0 and no word; ``step=ten`` an error on rank 0, exit 1; a row at step 999 made the
    restart skip every row up to it while printing them)"""
    for f in continued.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    path = tmp_path / name
    _damage(path, case)
    before = path.read_bytes()
    option = ["--dump", path, "--dump-every", 5] if name.startswith("d.") else ["--thermo-file", path]
    p = nbody(ranks, 200, "--backend", "numpy", "--steps", 25, "--thermo", 5, *option, "--restart", tmp_path / "c.npz")
    one_message(p, words.format(path=path))
    assert path.read_bytes() == before


@pytest.mark.parametrize("dump, log, ranks", [("d.extxyz", "t.csv", 3), ("d.gsd", "t.yaml", 2)])
def test_a_restart_after_a_kill_past_its_checkpoint_writes_those_rows_and_frames_again(tmp_path, continued, dump,
                                                                                       log, ranks):
    """A run killed (SIGKILL, a lost node) after its checkpoint at step 15 left rows and frames at 20 and 25:
    the restart from that checkpoint cuts them, says so on stderr, and writes them again, so the files end as
    a run that was never killed leaves them (was, after item 11's refusal of a log past the checkpoint: the
    restart refused, exit 2, the user to edit the files by hand)."""
    from helpers.outputs import frames

    killed, straight = tmp_path / "killed", tmp_path / "straight"
    for d in (killed, straight):
        d.mkdir()
        for f in continued.iterdir():
            (d / f.name).write_bytes(f.read_bytes())
    files = ["--dump", dump, "--dump-every", 5, "--thermo", 5, "--thermo-file", log]
    (killed / "c15.npz").write_bytes((killed / "c.npz").read_bytes())
    ok(nbody(ranks, 200, "--backend", "numpy", "--steps", 25, *files, "--restart", "c.npz", "--checkpoint", "c.npz",
             cwd=killed))  # the killed run: its rows and frames to 25, the checkpoint at 15 all that is left
    p = ok(nbody(ranks, 200, "--backend", "numpy", "--steps", 30, *files, "--restart", "c15.npz", cwd=killed))
    assert f"'{dump}': its 2 frames after step 15 (to step 25) cut" in p.stderr, p.stderr
    assert f"'{log}': its 2 rows after step 15 (to step 25) cut" in p.stderr, p.stderr
    ok(nbody(ranks, 200, "--backend", "numpy", "--steps", 30, *files, "--restart", "c.npz", cwd=straight))
    assert (killed / log).read_bytes() == (straight / log).read_bytes()
    got, want = frames(killed / dump), frames(straight / dump)
    assert [f[0] for f in got] == [f[0] for f in want] == [0, 5, 10, 15, 20, 25, 30]
    for a, b in zip(got, want):
        assert all((x == y).all() if hasattr(x, "shape") else x == y for x, y in zip(a, b))


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_second_job_on_one_checkpoint_is_refused(tmp_path, ranks):
    ck = tmp_path / "c.npz"
    ok(nbody(ranks, 4000, *LJ, "--steps", 2, "--checkpoint", ck))
    argv = mpiexec_argv(ranks) + [NBODY, "4000", *LJ, "--steps", "1000000", "--checkpoint", str(ck),
                                  "--checkpoint-every", "10", "--restart", str(ck), "--threads", "1", "-q"]
    with job(argv) as first:
        wait_busy(wait_for_rank(first.pid, 0), cpu=1.0)
        # rank 0 may still be loading the checkpoint under load: busy before it locks
        assert wait_for_path(tmp_path / "c.npz.lock", first), first.poll()
        second = nbody(ranks, 4000, *LJ, "--steps", 1000000, "--checkpoint", ck, "--restart", ck)
        one_message(second, f"checkpoint {str(ck)!r} is being written by another pympi-nbody run (pid ")
        assert first.poll() is None  # the first goes on, its checkpoints and temporaries untouched
        os.kill(first.pid, signal.SIGTERM)
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, out + err
    assert lj_ckpt.read_file(str(ck))[0]["step"] > 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]  # no lock file, no temporary left


# ---------------------------------------------------------------- item 6: targets that cannot be written

@pytest.mark.parametrize("target", ["t.gsd", "t.csv", "t.yaml", "t.extxyz"])
@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_an_unwritable_target_is_refused_before_the_run(tmp_path, target, fault):
    with tmpfs(tmp_path / "small", "64k") as d:
        option = "--dump" if target.endswith(("gsd", "extxyz")) else "--thermo-file"
        if fault == "full":
            fill(d)
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        p = nbody(2, 2048, *LJ, "--steps", 2, option, d / target)
        if fault == "full" and target == "t.extxyz":  # nothing written before the first frame: found there
            one_message(p, "cannot write dump", status=1)
        else:
            one_message(p, "Read-only file system" if fault == "read-only" else "No space left on device")
            assert "error on rank" not in p.stderr and "MPI_Abort" not in p.stderr
        if fault == "full" and target == "t.extxyz":
            assert (d / target).stat().st_size == 0  # holds nothing: a later run may use it
        else:
            assert not (d / target).exists()


# ---------------------------------------------------------------- the rule and the readers


@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_ovito_reads_the_frames_and_the_run_they_name(tmp_path, suffix):
    """OVITO (the ovito module, where installed) reads every frame; the identity is a global attribute."""
    pytest.importorskip("ovito", reason="OVITO's Python module (pip install ovito) is not installed")
    from ovito.io import import_file

    path = tmp_path / f"t{suffix}"
    ok(nbody(2, 2048, *LJ, "--steps", 20, "--dump", path, "--dump-every", 10))
    pipeline = import_file(str(path))
    assert pipeline.num_frames == 3
    data = pipeline.compute(2)
    assert data.particles.count == 2048 and data.cell is not None
    if suffix == ".extxyz":
        assert data.attributes["step"] == 20 and data.attributes["model"] == "lj" and data.attributes["n"] == 2048
    else:
        assert data.attributes["Timestep"] == 20
        assert bytes(data.attributes["pympi/run"]).decode().startswith("model=lj n=2048 ")
