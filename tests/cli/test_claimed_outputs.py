"""Every file a run touches is its own (issue 53), driven as users drive the commands.

A checkpoint never replaces a file of another kind, the run's own thermo log,
a user's file at its lock's name, nor another run's checkpoint; a stop without
``--checkpoint`` writes a file of its own; two runs never share a log or a
trajectory, whenever they start; a closed stdout is a stop request; a
checkpoint's record is judged as the command line is; a full disk during a
checkpoint is one message; ``pympi-scale`` never writes over a file that is not
its study's.  MPICH under mpiexec at 2 and 3 ranks where MPI matters; the
launchers' differences in tests/cli/test_stop_launchers.py and
tests/cli/test_rank_agreement.py.  Rows of docs/faults.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.commands import env, mpiexec_argv, one_message, run, script
from helpers.disks import fill, tmpfs
from helpers.jobs import closed_after, hung_up_after, job, started, wait_busy, wait_for_path, wait_for_rank
from helpers.outputs import steps_of
from helpers.stops import quiet
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt

NBODY, SCALE, PI, LAUNCH = script("pympi-nbody"), script("pympi-scale"), script("pympi-pi"), script("pympi-launch")
LJ = ["--model", "lj"]
#: a run that goes on until it is stopped
ENDLESS = ["--steps", "1000000", "--threads", "1"]


def nbody(ranks, *args, cwd=None, timeout=300):
    return run(mpiexec_argv(ranks) + [NBODY, *map(str, args), "--threads", "1", "-q"], timeout=timeout, env=env(),
               cwd=cwd)


def ok(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


# ---------------------------------------------------------------- a checkpoint never replaces another file

@pytest.mark.parametrize("ranks", [2, 3])
def test_a_checkpoint_never_replaces_a_file_of_another_kind(tmp_path, ranks):
    """(was: `--thermo-file run.csv --checkpoint run.csv` left a zip archive named run.csv, exit 0; a user's
    file, a special file, replaced; the lock's name could delete a user's file)"""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (tmp_path / "d.npz").mkdir()
    os.mkfifo(tmp_path / "f.npz")
    (tmp_path / "c.npz.lock").write_text("the lab's notes on c.npz\n")
    (tmp_path / "t.extxyz").symlink_to(tmp_path / "run.csv")
    cases = [
        (["--thermo-file", tmp_path / "run.csv", "--checkpoint", tmp_path / "run.csv"],
         f"--checkpoint and --thermo-file name one file {str(tmp_path / 'run.csv')!r}"),
        (["--thermo-file", tmp_path / "run.csv", "--dump", tmp_path / "t.extxyz"], "name one file"),
        (["--checkpoint", notes], f"--checkpoint {str(notes)!r} exists and is not a pympi-nbody checkpoint"),
        (["--checkpoint", notes, "--overwrite"], "it is never overwritten"),
        (["--checkpoint", tmp_path / "d.npz"], "is a directory"),
        (["--checkpoint", tmp_path / "f.npz"], "exists and is not a pympi-nbody checkpoint"),
        (["--checkpoint", tmp_path / "c.npz"], "c.npz.lock' is in the way of the lock file of that name"),
    ]
    before = listing(tmp_path)
    for args, words in cases:
        t0 = time.monotonic()
        one_message(nbody(ranks, 864, *LJ, "--steps", 5, *args), words)
        assert time.monotonic() - t0 < 120  # a FIFO is never opened to wait for a writer
    assert listing(tmp_path) == before
    assert notes.read_text() == "my notes\n"
    assert (tmp_path / "c.npz.lock").read_text() == "the lab's notes on c.npz\n"


def test_a_fresh_run_onto_a_checkpoint_is_refused_and_a_restart_or_overwrite_takes_it(tmp_path):
    ck = tmp_path / "c.npz"
    ok(nbody(2, 500, *LJ, "--steps", 20, "--checkpoint", ck))
    kept = ck.read_bytes()
    p = nbody(2, 500, *LJ, "--steps", 10, "--checkpoint", ck)
    one_message(p, f"--checkpoint {str(ck)!r} already exists (a checkpoint at step 20)")
    assert "--restart" in p.stderr and "--overwrite" in p.stderr and ck.read_bytes() == kept
    other = tmp_path / "other.npz"
    ok(nbody(2, 500, *LJ, "--steps", 10, "--temperature", 2.0, "--checkpoint", other))
    one_message(nbody(2, 500, *LJ, "--steps", 30, "--restart", other, "--checkpoint", ck),
                "belongs to another run (temperature 1.44 there, 2.0 here)")
    assert ck.read_bytes() == kept
    ok(nbody(2, 500, *LJ, "--steps", 30, "--restart", ck, "--checkpoint", ck))  # continues its own
    assert lj_ckpt.read_file(str(ck))[0]["step"] == 30
    ok(nbody(2, 500, *LJ, "--steps", 10, "--temperature", 2.0, "--checkpoint", ck, "--overwrite"))
    meta = lj_ckpt.read_file(str(ck))[0]
    assert meta["step"] == 10 and meta["temperature"] == 2.0
    assert meta["run"].startswith("model=lj n=500 box=") and " temperature=2.0 " in meta["run"]
    assert listing(tmp_path) == ["c.npz", "other.npz"]


# ---------------------------------------------------------------- a stop's checkpoint is a file of its own

def test_two_runs_stopped_together_write_two_checkpoints_and_never_an_old_one(tmp_path):
    """(was: both said `checkpoint pympi-nbody-3000.ckpt.npz written`, the file held one of them; a later run
    replaced an earlier one's)"""
    earlier = tmp_path / "pympi-nbody-3000.ckpt.npz"
    argv = [NBODY, "3000", *ENDLESS, "--backend", "numba", "-q"]
    with started(argv, cwd=tmp_path) as a, started(argv, cwd=tmp_path) as b:
        a.wait_for("Step")
        b.wait_for("Step")
        for job in (a, b):
            os.kill(job.proc.pid, signal.SIGTERM)
        written = []
        for job in (a, b):
            out, err, _ = job.finish(120)
            assert job.proc.returncode == 0, out + err
            line = err.strip().splitlines()[-1]
            step = int(line.split("after step ")[1].split(";")[0])
            name = line.split("; checkpoint ")[1].split(" written")[0]
            assert gravity_ckpt.read_file(str(tmp_path / name))[0]["step"] == step
            written.append(name)
    assert sorted(written) == ["pympi-nbody-3000-1.ckpt.npz", "pympi-nbody-3000.ckpt.npz"]
    kept = {name: (tmp_path / name).read_bytes() for name in written}
    with started(argv, cwd=tmp_path) as c:
        c.wait_for("Step")
        os.kill(c.proc.pid, signal.SIGTERM)
        out, err, _ = c.finish(120)
    assert "checkpoint pympi-nbody-3000-2.ckpt.npz written" in err, err
    assert all((tmp_path / name).read_bytes() == data for name, data in kept.items())
    assert earlier.exists() and len(listing(tmp_path)) == 3


# ---------------------------------------------------------------- two runs never share a file

SHARED = {
    "thermo log": (["--thermo", "50", "--thermo-file", "t.csv"], "--thermo-file"),
    "trajectory": (["--dump", "t.extxyz", "--dump-every", "200"], "--dump"),
    "GSD trajectory": (["--dump", "t.gsd", "--dump-every", "200"], "--dump"),
}


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("what", sorted(SHARED))
def test_a_second_run_on_a_log_or_trajectory_is_refused_while_the_first_runs(tmp_path, ranks, what):
    """(was: two runs started together both passed the check, their rows and frames interleaved, exit 0)"""
    args, option = SHARED[what]
    first = mpiexec_argv(ranks) + [NBODY, "864", *LJ, *ENDLESS, *args, "--checkpoint", "a.npz", "-q"]
    with started(first, cwd=tmp_path) as job:
        target = tmp_path / args[-1 if option == "--thermo-file" else 1]
        assert wait_for_path(target, job.proc)  # claimed: made at once, before the compile
        t0 = time.monotonic()
        second = nbody(ranks, 864, *LJ, "--steps", 100, *args, "--checkpoint", "b.npz", cwd=tmp_path)
        one_message(second, f"{option} {args[-1 if option == '--thermo-file' else 1]!r} is being written by "
                            "another pympi-nbody run (pid ")
        assert time.monotonic() - t0 < 60
        wait_busy(wait_for_rank(job.proc.pid, 0), cpu=1.0)
        os.kill(job.proc.pid, signal.SIGTERM)
        out, err, _ = job.finish(120)
    assert job.proc.returncode == 0, out + err
    steps = steps_of(target)
    assert steps == sorted(set(steps)) and steps[0] == 0  # one run's rows or frames, in order
    assert listing(tmp_path) == sorted(["a.npz", target.name])  # b's checkpoint never made, no lock left


def test_two_restarts_from_one_checkpoint_never_share_a_log(tmp_path):
    """(was: both appended to the log, steps going backwards)"""
    ok(nbody(2, 500, *LJ, "--steps", 20, "--thermo", 10, "--thermo-file", "t.csv", "--checkpoint", "c.npz",
             cwd=tmp_path))
    first = mpiexec_argv(2) + [NBODY, "500", *LJ, *ENDLESS, "--thermo", "50", "--thermo-file", "t.csv",
                               "--restart", "c.npz", "--checkpoint", "a.npz", "-q"]
    with started(first, cwd=tmp_path) as job:
        assert wait_for_path(tmp_path / "a.npz.lock", job.proc)  # claimed
        second = nbody(2, 500, *LJ, "--steps", 400, "--thermo", 50, "--thermo-file", "t.csv", "--restart", "c.npz",
                       "--checkpoint", "b.npz", cwd=tmp_path)
        one_message(second, "--thermo-file 't.csv' is being written by another pympi-nbody run (pid ")
        wait_busy(wait_for_rank(job.proc.pid, 0), cpu=1.0)
        os.kill(job.proc.pid, signal.SIGTERM)
        out, err, _ = job.finish(120)
    assert job.proc.returncode == 0, out + err
    steps = steps_of(tmp_path / "t.csv")
    assert steps[:3] == [0, 10, 20] and steps == sorted(set(steps))


# ---------------------------------------------------------------- a closed stdout is a stop request


@pytest.mark.parametrize("how", ["alone", "pympi-launch"])
def test_a_closed_stdout_writes_the_checkpoint_and_ends_non_zero(tmp_path, how):
    """`pympi-nbody ... --thermo 1 --checkpoint c.npz | head -3` (was: exit 1, 141 under a launcher, nothing on
    stderr, no checkpoint, a stale lock).  A launcher handed the pipe itself dies of it and kills the ranks:
    tests/cli/test_stop_launchers.py."""
    app = [NBODY, "500", *LJ, *ENDLESS, "--thermo", "1", "--checkpoint", "c.npz", "-q"]
    argv = app if how == "alone" else [LAUNCH, "-n", "2", "--launcher", "mpiexec", "--", *app]
    status, err = closed_after(argv, tmp_path)
    assert status == 128 + signal.SIGPIPE, err
    said = "SIGPIPE (its output closed)" if how == "alone" else "SIGUSR1 from pympi-launch"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pympi-nbody: stopped by {said} after step "), err
    step = int(lines[0].split("after step ")[1].split(";")[0])
    assert lj_ckpt.read_file(str(tmp_path / "c.npz"))[0]["step"] == step > 0
    assert listing(tmp_path) == ["c.npz"]  # no lock left, no temporary
    quiet(err)


def test_a_closed_stderr_is_a_stop_request_too(tmp_path):
    """stderr's reader leaves (`2> >(head -1)`): the next progress line fails, the run stops and saves."""
    argv = [NBODY, "500", *LJ, *ENDLESS, "--checkpoint", "c.npz"]  # progress lines on stderr, every 0.2 s
    status, out = closed_after(argv, tmp_path, env(PYMPI_PROGRESS_INTERVAL="0.2"), stream="stderr", lines=1)
    assert status == 128 + signal.SIGPIPE, out
    step = int(out.split("stopped    by SIGPIPE after step ")[1].split()[0])
    assert lj_ckpt.read_file(str(tmp_path / "c.npz"))[0]["step"] == step
    assert listing(tmp_path) == ["c.npz"]


@pytest.mark.parametrize("leader", [True, False], ids=["sighup-and-eio", "eio-only"])
def test_a_closed_terminal_writes_the_checkpoint_and_exits_129(tmp_path, leader):
    """The progress bar and the rows on a terminal that hangs up (`setsid script -c "pympi-nbody ..."`, the
    `script` killed, as a dropped ssh session): the run stops after its step with its checkpoint, exit 129
    (was: the next row's write raised EIO, exit 1 within 2 s, no checkpoint).  Whether SIGHUP comes before the
    failed write, or never (a process the hang-up does not signal), a terminal's EIO is a hang-up."""
    argv = [NBODY, "500", *LJ, *ENDLESS, "--thermo", "50", "--checkpoint", "c.npz"]
    status, took, shown = hung_up_after(argv, tmp_path, "thermo", leader=leader)
    assert status == 128 + signal.SIGHUP, shown
    assert took < 30, took
    assert lj_ckpt.read_file(str(tmp_path / "c.npz"))[0]["step"] > 0
    assert listing(tmp_path) == ["c.npz"]  # no lock left, no temporary


# ---------------------------------------------------------------- a checkpoint's record is judged on load

LJ_FAULTS = {  # a meta field changed, and what the refusal says
    "negative skin": ({"skin": -0.5}, "its --skin -0.5 is refused: -0.5 must be >= 0"),
    "infinite temperature": ({"temperature": float("inf")}, "its --temperature inf is refused"),
    "seed out of range": ({"seed": 2 ** 70}, "is not in the range 0<=x<=18446744073709551615"),
    "zero dt": ({"dt": 0.0}, "must be finite and > 0"),
    "dt zero in fp64": ({"dt": 1e-320}, "--dt 1e-320 is below 2.23e-308"),
    "pair style of a number": ({"pair": 3}, "its --pair 3 is refused"),
    "unknown pair style": ({"pair": "lj/nonsense"}, "its --pair 'lj/nonsense' is refused"),
    "coefficients as a list": ({"pair_coeffs": [1, 2]}, "its pair coefficients: not a record"),
    "a negative coefficient": ({"pair_coeffs": {"epsilon": -1.0}}, "epsilon must be > 0"),
    "initial row without momentum": ({"initial": {"step": 0}}, "its initial thermo row is not a record of"),
    "initial row with NaN": ({"initial": "nan"}, "its initial thermo row"),
    "no cells": ({"cells": 0, "atoms": 0}, "meta atoms/cells/step out of range"),
    "no seed": ({"seed": None}, "meta field 'seed' is missing"),
    "lists looked at never": ({"neigh_every": 0}, "its --neigh-every 0 is refused: 0 is not in the range"),
    "lists looked at every 7.5 steps": ({"neigh_every": 7.5}, "its --neigh-every 7.5 is refused: 7.5 is not a whole"),
    "lists checked maybe": ({"neigh_check": "maybe"}, "its --neigh-check 'maybe' is refused"),
}


def _meta_changed(good: Path, out: Path, changes: dict) -> Path:
    with np.load(good) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays.pop("meta")))
    if "initial" in changes and changes["initial"] == "nan":
        changes = {"initial": {**meta["initial"], "etotal": float("nan")}}
    for k, v in changes.items():
        meta.pop(k) if v is None else meta.__setitem__(k, v)
    np.savez(out, meta=np.array(json.dumps(meta)), **arrays)
    return out


@pytest.fixture(scope="module")
def lj_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("lj-ckpt")
    ok(nbody(2, 500, *LJ, "--steps", 10, "--checkpoint", d / "good.npz"))
    return d / "good.npz"


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("fault", sorted(LJ_FAULTS))
def test_a_checkpoint_whose_record_the_command_line_would_refuse_is_refused(tmp_path, lj_checkpoint, ranks, fault):
    """(was: a negative skin ran with wrong energies, exit 0; malformed fields ended in AttributeError or
    KeyError on a rank, exit 1)"""
    changes, words = LJ_FAULTS[fault]
    bad = _meta_changed(lj_checkpoint, tmp_path / "bad.npz", dict(changes))
    p = nbody(ranks, 500, *LJ, "--steps", 20, "--restart", bad)
    one_message(p, "is not a usable checkpoint: ")
    assert words in p.stderr, p.stderr


GRAVITY_FAULTS = {
    "softening 0": ({"softening": 0.0}, "must be finite and > 0"),
    "softening too small": ({"softening": 1e-20}, "--softening 1e-20 is below 1e-15"),
    "unknown init": ({"init": "cube"}, "its --init 'cube' is refused"),
    "dt negative": ({"dt": -1.0}, "must be finite and > 0"),
    "dt zero in fp32": ({"dt": 1e-46}, "--dt 1e-46 is below 1.18e-38, the smallest normal number of fp32"),
    "initial row of strings": ({"initial": {"step": 0, "kinetic": "a", "potential": 1.0, "energy": 1.0,
                                            "momentum": [0, 0, 0]}}, "its initial thermo row's kinetic 'a'"),
}


@pytest.mark.parametrize("fault", sorted(GRAVITY_FAULTS))
def test_a_gravity_checkpoint_is_judged_as_its_command_line(tmp_path, fault):
    ok(nbody(2, 200, "--steps", 2, "--backend", "numpy", "--checkpoint", tmp_path / "g.npz"))
    changes, words = GRAVITY_FAULTS[fault]
    bad = _meta_changed(tmp_path / "g.npz", tmp_path / "bad.npz", dict(changes))
    p = nbody(2, 200, "--steps", 4, "--backend", "numpy", "--restart", bad)
    one_message(p, "is not a usable checkpoint: ")
    assert words in p.stderr, p.stderr


def test_a_coefficient_of_another_pair_style_is_refused_on_restart(tmp_path):
    """(was: `--pair-coeff epsilon=2` on the restart of a Morse run was dropped silently)"""
    ck = tmp_path / "m.npz"
    ok(nbody(2, 500, *LJ, "--pair", "morse", "--steps", 10, "--checkpoint", ck))
    one_message(nbody(2, 500, *LJ, "--steps", 20, "--restart", ck, "--pair-coeff", "epsilon=2"),
                "was run with --pair morse, whose coefficients are d0, alpha, r0: --pair-coeff epsilon does not "
                "apply to it")
    one_message(nbody(2, 500, *LJ, "--steps", 20, "--restart", ck, "--pair-coeff", "d0=2"),
                "was run with the morse coefficients d0=1, not d0=2")
    ok(nbody(2, 500, *LJ, "--steps", 20, "--restart", ck, "--pair-coeff", "d0=1"))  # the recorded value


# ---------------------------------------------------------------- a full disk during a checkpoint

@pytest.mark.parametrize("ranks", [1, 2])
def test_a_disk_that_fills_during_a_checkpoint_is_one_message(tmp_path, ranks):
    """(was: the message, then a 7-line ZipFile traceback; with --on-blowup save exit 1, no word of the
    blow-up)"""
    with tmpfs(tmp_path / "small", "1m") as d:
        ck = d / "c.npz"
        ok(nbody(ranks, 4000, *LJ, "--steps", 10, "--checkpoint", ck))
        kept = ck.read_bytes()
        fill(d)
        p = nbody(ranks, 4000, *LJ, "--steps", 20, "--restart", ck, "--checkpoint", ck)
        one_message(p, f"cannot write checkpoint {str(ck)!r}: No space left on device", status=1)
        assert "Exception ignored" not in p.stderr and ck.read_bytes() == kept
        p = nbody(ranks, 4000, *LJ, "--steps", 20, "--temperature", 1000, "--on-blowup", "save", "--checkpoint",
                  d / "hot.npz")
        one_message(p, "the run blew up at step ", status=3)
        assert "the broken state could not be saved: cannot write checkpoint" in p.stderr
        assert "No space left on device" in p.stderr
        assert listing(d) == ["c.npz", "filler"]


# ---------------------------------------------------------------- a file removed under the run

@pytest.mark.parametrize("ranks, what", [(2, "directory"), (3, "directory"), (2, "log replaced")])
def test_an_output_removed_during_the_run_stops_it_with_the_state_saved(tmp_path, ranks, what):
    """`rm -rf out` under `--checkpoint out/c.npz --thermo-file out/t.csv --dump out/d.extxyz` (was: the next
    checkpoint made out/ again, the rows went to the unlinked log, exit 0): the run finds its files are no
    longer the ones it claimed and stops as where a write fails, exit 1, one message; the directory is never
    made again, so the state goes to the name a stop without --checkpoint takes, and the message says so.  A
    log replaced by another file under its name: the same, the state in the checkpoint still the run's."""
    out = tmp_path / "out"
    out.mkdir()
    argv = mpiexec_argv(ranks) + [NBODY, "864", *LJ, *ENDLESS, "--thermo", "50", "--checkpoint", "out/c.npz",
                                  "--checkpoint-every", "200", "--thermo-file", "out/t.csv", "--dump",
                                  "out/d.extxyz", "--dump-every", "200", "-q"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert wait_for_path(out / "c.npz", proc), proc.communicate()
        if what == "directory":
            subprocess.run(["rm", "-rf", str(out)], check=True)
        else:
            (out / "mine.csv").write_text("a user's file\n")
            os.replace(out / "mine.csv", out / "t.csv")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    if what == "directory":
        words = ("--checkpoint 'out/c.npz' (its lock file), --dump 'out/d.extxyz' and --thermo-file 'out/t.csv' "
                 "were removed during the run with their directory 'out', which a run never makes again; the state "
                 "at step ")
        saved = tmp_path / "pympi-nbody-lj-864.ckpt.npz"
        assert listing(tmp_path) == [saved.name]  # out/ not made again
    else:
        words = "--thermo-file 'out/t.csv' was replaced by another file during the run; the state at step "
        saved = out / "c.npz"
        assert (out / "t.csv").read_text() == "a user's file\n" and listing(out) == ["c.npz", "d.extxyz", "t.csv"]
    one_message(subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), words, status=1)
    step = int(stderr.split(words)[1].split()[0])
    assert f"is saved in {saved.relative_to(tmp_path)} (resume with --restart " in stderr
    assert lj_ckpt.read_file(str(saved))[0]["step"] == step > 200


# ---------------------------------------------------------------- file modes

def modes(d: Path) -> dict[str, str]:
    return {p.name: oct(p.stat().st_mode & 0o777) for p in d.iterdir()}


def test_every_file_a_run_or_study_writes_honours_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path):
    """Under `umask 077` every output is 0600 (was: checkpoints and a study's .json/.csv/.png 0644), and a
    checkpoint the user made 0600 stays so when a restart writes onto it under `umask 022` (was: 0644)."""
    ok(run(mpiexec_argv(2) + [NBODY, "100", "--steps", "2", "--checkpoint", "c.npz", "--thermo-file", "t.csv",
                              "--dump", "d.extxyz", "-q"], cwd=tmp_path, env=env(), umask=0o077))
    ok(run([SCALE, "--ranks", "1", "--out", "s", "--", PI, "1e5"], cwd=tmp_path, env=env(), umask=0o077))
    assert modes(tmp_path) == {name: "0o600" for name in ["c.npz", "t.csv", "d.extxyz", "s.jsonl", "s.json",
                                                          "s.csv", "s.png"]}
    (tmp_path / "c.npz").chmod(0o640)
    ok(run(mpiexec_argv(2) + [NBODY, "100", "--steps", "4", "--restart", "c.npz", "--checkpoint", "c.npz", "-q"],
           cwd=tmp_path, env=env(), umask=0o022))
    assert modes(tmp_path)["c.npz"] == "0o640"


# ---------------------------------------------------------------- pympi-scale writes only its study's files

@pytest.mark.parametrize("name, text, words", [
    ("s.csv", "my,data\n1,2\n", "'s.csv' exists and is not a study's CSV"),
    ("s.json", '{"mine": 1}\n', "'s.json' exists and is not a study's JSON (no schema"),
    ("s.png", "\x89PNG\r\n\x1a\n a photo", "'s.png' exists and is a PNG that no pympi-scale study made"),
    ("s.jsonl", '{"my": "log"}\n', "is not the results file of a pympi-scale study (line 1 is no run of one)"),
    ("s.jsonl.lock", "my lock notes\n", "'s.jsonl.lock' is in the way of the lock file of that name"),
])
def test_a_study_never_writes_over_a_file_that_is_not_its_own(tmp_path, name, text, words):
    """(was: `pympi-scale --out s` replaced a user's s.csv, s.json and s.png and appended to a foreign s.jsonl)"""
    (tmp_path / name).write_bytes(text.encode("latin-1"))
    p = run([SCALE, "--ranks", "1", "--out", "s", "--", PI, "1e5"], cwd=tmp_path, env=env(), timeout=120)
    one_message(p, words)
    assert listing(tmp_path) == [name] and (tmp_path / name).read_bytes() == text.encode("latin-1")


def test_a_study_refuses_a_symbolic_link_to_nothing_at_its_results_file(tmp_path):
    """`s.jsonl` a link to a file that does not exist, as another user may leave in a shared directory (was:
    followed, its target made and written, exit 0): refused as every output is, the target never made."""
    (tmp_path / "s.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    p = run([SCALE, "--ranks", "1", "--out", "s", "--", PI, "1e5"], cwd=tmp_path, env=env(), timeout=120)
    one_message(p, "--out 's.jsonl' is a symbolic link to nothing: it is never followed")
    assert listing(tmp_path) == ["s.jsonl"] and (tmp_path / "s.jsonl").is_symlink()


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_two_studies_whose_results_files_are_one_file_never_run_together(tmp_path, link):
    """`--out a` and `--out b` with b.jsonl a hard or symbolic link to a.jsonl (was: both ran, every line
    written twice): the lock is on the file itself, so the second is refused at once."""
    (tmp_path / "a.jsonl").touch()
    (tmp_path / "b.jsonl").hardlink_to(tmp_path / "a.jsonl") if link == "hard" else \
        (tmp_path / "b.jsonl").symlink_to("a.jsonl")
    study = [SCALE, "--ranks", "1", "--", PI, "1e9", "--threads", "1"]
    with job(study[:1] + ["--out", "a"] + study[1:], cwd=tmp_path) as first:
        assert wait_for_path(tmp_path / "a.jsonl.lock", first)
        second = run(study[:1] + ["--out", "b"] + study[1:], cwd=tmp_path, env=env(), timeout=120)
        one_message(second, f"b.jsonl is in use by another pympi-scale study (pid {first.pid} on ")
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 1  # the first's one run, once
    assert "b.json" not in listing(tmp_path)


def test_a_study_resumes_over_its_own_reports(tmp_path):
    ok(run([SCALE, "--ranks", "1", "--out", "s", "--", PI, "1e5"], cwd=tmp_path, env=env(), timeout=120))
    assert listing(tmp_path) == ["s.csv", "s.json", "s.jsonl", "s.png"]  # the lock went with the study
    ok(run([SCALE, "--ranks", "1,2", "--out", "s", "--", PI, "1e5"], cwd=tmp_path, env=env(), timeout=120))
    assert len(json.loads((tmp_path / "s.json").read_text())["points"]) == 2


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_study_on_an_unwritable_out_is_refused_naming_it(tmp_path, fault):
    """(was: OSError, exit 1, no file named)"""
    with tmpfs(tmp_path / "small", "64k") as d:
        if fault == "full":
            fill(d)
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        p = run([SCALE, "--ranks", "1", "--out", str(d / "s"), "--", PI, "1e5"], env=env(), timeout=120)
        one_message(p, "Read-only file system" if fault == "read-only" else "No space left on device")
        assert str(d / "s.jsonl") in p.stderr
        assert listing(d) == ([] if fault == "read-only" else ["filler"])


def test_a_study_whose_plot_fills_the_disk_names_it_and_keeps_the_rest(tmp_path):
    with tmpfs(tmp_path / "small", "64k") as d:
        p = run([SCALE, "--ranks", "1", "--out", str(d / "s"), "--", PI, "1e5"], env=env(), timeout=120)
        one_message(p, f"cannot write {d / 's.png'}: No space left on device", status=1)
        assert listing(d) == ["s.csv", "s.json", "s.jsonl"]
        assert json.loads((d / "s.json").read_text())["complete"] is True
