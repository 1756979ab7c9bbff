"""Faults, tried and survived: killed ranks, signals, full and read-only disks,
bad checkpoints, interrupted and concurrent studies, shell metacharacters, bad input.

Every case here is a row of the table in docs/faults.md.  Each one drives the
installed commands as a user does, under the real mpiexec of this environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.commands import env, mpiexec_argv, one_message, run, script
from helpers.disks import fill, tmpfs
from helpers.jobs import END_WITHIN, job, kill_last_rank, wait_busy, wait_for_path, wait_for_rank
from helpers.outputs import inflated
from pympi_gpu.nbody.gravity import checkpoint as ckpt

PI = script("pympi-pi")
NBODY = script("pympi-nbody")
SCALE = script("pympi-scale")
LAUNCH = script("pympi-launch")


# ---------------------------------------------------------------- a rank killed


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("app", ["pi", "nbody", "lj"])
def test_sigkill_of_one_rank_ends_the_job(app, ranks):
    """SIGKILL of the last rank in mid-computation: mpiexec ends the job, no rank hangs (LJ: the others
    wait in MPI calls their compiled step kernel makes)."""
    command = ([PI, "5e12", "--threads", "1"] if app == "pi"
               else [NBODY, "30000", "--steps", "100000", "--threads", "1", "--benchmark"] if app == "nbody"
               else [NBODY, "4000", "--model", "lj", "--steps", "1000000", "--threads", "1", "-q"])
    status, ended, rest = kill_last_rank(mpiexec_argv(ranks) + command, ranks)
    print(f"{app} at {ranks} ranks: the job ended {ended:.2f} s after SIGKILL of rank {ranks - 1}")
    assert status != 0
    assert ended < END_WITHIN
    assert rest == [], "ranks left running after the job ended"


# ---------------------------------------------------------------- SIGTERM and checkpoints

def test_sigterm_to_mpiexec_leaves_a_loadable_checkpoint(tmp_path):
    path = tmp_path / "term.npz"
    argv = mpiexec_argv(2) + [NBODY, "2000", "--steps", "1000000", "--threads", "1", "--backend", "numba",
                              "--checkpoint", str(path), "--json"]
    with job(argv) as proc:
        rank0 = wait_for_rank(proc.pid, 0)
        wait_busy(rank0, cpu=2.0)
        os.kill(proc.pid, signal.SIGTERM)  # to mpiexec, as Slurm does at a time limit
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("mpiexec did not end within 60 s of SIGTERM")
    assert proc.returncode == 0, stdout + stderr
    doc = json.loads(stdout)
    assert doc["stopped_by"] and doc["checkpoint"] == str(path)
    meta, arrays = ckpt.read_file(path)
    assert meta["bodies"] == 2000 and meta["step"] == doc["last_step"] > 0
    # and a restart continues from it
    out = run(mpiexec_argv(2) + [NBODY, "2000", "--steps", str(meta["step"] + 1), "--threads", "1",
                                 "--backend", "numba", "--restart", str(path), "--json"], timeout=180, env=env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["first_step"] == meta["step"]


@pytest.mark.parametrize("ranks", [1, 2])
def test_full_filesystem_fails_cleanly_and_keeps_the_previous_checkpoint(tmp_path, ranks):
    with tmpfs(tmp_path / "small") as d:
        path = d / "c.npz"
        first = run(mpiexec_argv(ranks) + [NBODY, "200", "--steps", "2", "--backend", "numpy",
                                           "--checkpoint", str(path)], timeout=180, env=env())
        assert first.returncode == 0, first.stdout + first.stderr
        before = path.read_bytes()
        fill(d)
        p = run(mpiexec_argv(ranks) + [NBODY, "200", "--steps", "3", "--backend", "numpy",
                                       "--checkpoint", str(path), "--restart", str(path)], timeout=180, env=env())
        one_message(p, "No space left on device", status=1)
        assert f"cannot write checkpoint {str(path)!r}" in p.stderr
        assert path.read_bytes() == before  # the previous checkpoint, whole
        assert ckpt.read_file(path)[0]["step"] == 2
        assert sorted(f.name for f in d.iterdir()) == ["c.npz", "filler"]  # no temporary left


@pytest.mark.parametrize("ranks", [1, 2])
def test_read_only_checkpoint_directory_is_refused_and_keeps_the_checkpoint(tmp_path, ranks):
    with tmpfs(tmp_path / "ro") as d:
        path = d / "c.npz"
        first = run([NBODY, "100", "--steps", "1", "--backend", "numpy", "--checkpoint", str(path)],
                    timeout=180, env=env())
        assert first.returncode == 0, first.stdout + first.stderr
        before = path.read_bytes()
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        p = run(mpiexec_argv(ranks) + [NBODY, "100", "--steps", "2", "--backend", "numpy",
                                       "--checkpoint", str(path)], timeout=180, env=env())
        one_message(p, "is not writable")
        assert path.read_bytes() == before


def _bad_checkpoint(kind: str, good: Path, where: Path) -> Path:
    meta, arrays = ckpt.read_file(good)
    path = where / f"{kind}.npz"
    if kind == "truncated":
        path.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    elif kind == "garbage":
        path.write_bytes(np.random.default_rng(1).bytes(4096))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "wrong-n":  # the record says 60 bodies, the arrays hold 50
        ckpt.write_file(path, arrays, dict(meta, bodies=60))
    elif kind == "wrong-precision":  # fp64 arrays in a file that says fp32
        ckpt.write_file(path, {k: v.astype(np.float64) for k, v in arrays.items()}, meta)
    elif kind == "nan":
        ckpt.write_file(path, dict(arrays, x=np.full_like(arrays["x"], np.nan)), meta)
    elif kind == "no-mass":  # a body of mass 0 and one of mass -1
        m = arrays["m"].copy()
        m[:2] = 0.0, -1.0
        ckpt.write_file(path, dict(arrays, m=m), meta)
    elif kind == "bomb":  # a meta record of 1.2 GB deflated into 1.2 MB (here 256 MB into 256 kB)
        inflated(path, good, "meta", 256 << 20)
    elif kind == "not-a-checkpoint":
        with open(path, "wb") as fh:
            np.savez(fh, a=np.arange(3))
    else:  # pragma: no cover
        raise ValueError(kind)
    return path


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("kind, words", [
    ("truncated", "not an .npz archive"),
    ("garbage", "not an .npz archive"),
    ("empty", "not an .npz archive"),
    ("wrong-n", "has shape (50,), expected (60,)"),
    ("wrong-precision", "is float64, expected float32 (fp32)"),
    ("nan", "holds non-finite values"),
    ("no-mass", "array 'm' holds masses that are not positive"),  # was: run, virial ratio nan
    ("bomb", "the 'meta' record holds 256 MiB once inflated, far more than a checkpoint's"),  # was: read whole
    ("not-a-checkpoint", "is not a pympi-nbody checkpoint"),
])
def test_bad_checkpoint_is_refused_with_one_message(tmp_path, ranks, kind, words):
    good = tmp_path / "good.npz"
    p = run([NBODY, "50", "--steps", "1", "--backend", "numpy", "--checkpoint", str(good)], timeout=120, env=env())
    assert p.returncode == 0, p.stderr
    bad = _bad_checkpoint(kind, good, tmp_path)
    bodies = "60" if kind == "wrong-n" else "50"
    p = run(mpiexec_argv(ranks) + [NBODY, bodies, "--steps", "3", "--backend", "numpy", "--restart", str(bad)],
            timeout=120, env=env())
    one_message(p, words)


# ---------------------------------------------------------------- pympi-scale

def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_scale_killed_resumes_and_survives_a_torn_last_line(tmp_path):
    prefix = tmp_path / "killed"
    jsonl = prefix.with_suffix(".jsonl")
    argv = [SCALE, "--ranks", "1,2", "--repeat", "2", "--out", str(prefix), "--", PI, "2e6", "--threads", "1"]
    with job(argv) as proc:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and (not jsonl.exists() or len(_jsonl(jsonl)) < 2):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the node died: no handler runs
    finished = _jsonl(jsonl)
    assert 2 <= len(finished) < 4
    # The machine died inside the next write: half a line, no newline.
    with open(jsonl, "a") as fh:
        fh.write('{"schema":"pympi_gpu.scale.run/1","command":["pympi-pi"],"kind":"str')
    kept = jsonl.read_bytes()
    p = run(argv, env=env(), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{len(finished)} run(s) already done" in p.stderr
    assert jsonl.read_bytes().startswith(kept)  # appended after the torn line, nothing rewritten
    lines = jsonl.read_text().splitlines()
    assert lines[len(finished)].endswith('"kind":"str')  # the torn line stays, on a line of its own
    runs = [json.loads(line) for i, line in enumerate(lines) if i != len(finished)]
    keys = sorted((r["ranks"], r["repeat"]) for r in runs)
    assert keys == [(n, i) for n in (1, 2) for i in range(2)]  # nothing ran twice
    assert json.loads(prefix.with_suffix(".json").read_text())["complete"] is True


def test_two_studies_on_one_prefix_the_second_is_refused(tmp_path):
    prefix = tmp_path / "shared"
    jsonl = prefix.with_suffix(".jsonl")
    first = [SCALE, "--ranks", "1,2", "--repeat", "3", "--out", str(prefix), "--", PI, "4e6", "--threads", "1"]
    with job(first) as proc:
        wait_for_path(jsonl.with_name("shared.jsonl.lock"), proc)
        time.sleep(0.5)
        assert proc.poll() is None
        second = run([SCALE, "--ranks", "1", "--out", str(prefix), "--", PI, "2e6", "--threads", "1"],
                     env=env(), timeout=60)
        one_message(second, "in use by another pympi-scale study")
        assert f"(pid {proc.pid} on " in second.stderr
        stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout + stderr
    runs = _jsonl(jsonl)
    assert len(runs) == 6  # every line whole and of the first study
    assert all(r["command"][1] == "4e6" for r in runs)
    # the lock went with its holder: the next study runs
    third = run([SCALE, "--ranks", "1", "--out", str(tmp_path / "shared"), "--fresh", "--", PI, "2e6",
                 "--threads", "1"], env=env(), timeout=300)
    assert third.returncode == 0, third.stdout + third.stderr


# ---------------------------------------------------------------- pympi-launch

NASTY = ["$(touch {d}/dollar)", "`touch {d}/backtick`", "; touch {d}/semicolon", "| touch {d}/pipe",
         "&& touch {d}/and", "> {d}/redirect", "'", '"', "a b\tc\nd", "*", "~", "${{HOME}}", "\\"]


def test_launch_never_runs_arguments_through_a_shell(tmp_path):
    shell = tmp_path / "shell"  # where a shell running the arguments would create files
    shell.mkdir()
    got = tmp_path / "got"
    got.mkdir()
    args = [a.format(d=shell) for a in NASTY]
    # each rank writes the argv it received to a file of its own (ranks' stdout lines may interleave)
    probe = ("import json, os, sys; rank = os.environ.get('PMI_RANK', '0'); "
             f"open(os.path.join({str(got)!r}, rank + '.json'), 'w').write(json.dumps(sys.argv[1:]))")
    p = run([LAUNCH, "-n", "2", "--launcher", "mpiexec", "--", sys.executable, "-c", probe, *args],
            env=env(), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in got.iterdir()) == ["0.json", "1.json"]
    for f in got.iterdir():
        assert json.loads(f.read_text()) == args  # every rank got every argument byte for byte
    assert list(shell.iterdir()) == []  # and no shell ran any of them
    # the dry run prints a line a shell would read back as the same arguments
    p = run([LAUNCH, "-n", "2", "--launcher", "mpiexec", "--dry-run", "--", "prog", *args], env=env(), timeout=60)
    assert p.returncode == 0, p.stderr
    import shlex

    assert shlex.split(p.stdout)[-len(args):] == args


# ---------------------------------------------------------------- bad input

#: every bad input tried, for both commands, at 1 and 2 ranks: (arguments, words of the message)
BAD_COUNTS = [
    ("１e6", "is not a whole number"),          # fullwidth digit
    ("١٠٠", "is not a whole number"),          # Arabic-Indic digits
    ("0x10", "is not a whole number"),
    ("1e-3", "is not a whole number"),
    ("-1", "'-1' is negative (must be at least 1)"),  # was: No such option '-1'
]
BAD_OPTIONS = [
    (["--threads", "0"], "0 is not in the range 1<=x<=4096"),
    (["--threads", "-1"], "-1 is not in the range 1<=x<=4096"),
    (["--threads", "100000"], "100000 is not in the range 1<=x<=4096"),
    (["--seed", "-1"], "-1 is not in the range 0<=x<=18446744073709551615"),
    (["--seed", str(2**64)], "18446744073709551616 is not in the range"),
    (["--seed", "１"], "is not a valid integer (write it with the digits 0-9)"),
    (["--threads", "٢"], "is not a valid integer (write it with the digits 0-9)"),
    (["--threads", "0x10"], "is not a valid integer"),
]
BAD_INPUTS = ([(app, [count], words) for app in ("pi", "nbody") for count, words in BAD_COUNTS]
              + [(app, ["1000", *opts], words) for app in ("pi", "nbody") for opts, words in BAD_OPTIONS]
              + [("nbody", ["100", "--dt", "１e-3"], "is not a number"),
                 ("nbody", ["1e12"], "1e+12 bodies would need about 128 TB of memory"),
                 ("nbody", ["2e9"], "need about 256 GB of memory on this node"),
                 # issue 31: LJ sized before it starts, and inputs that ended as internal errors
                 ("nbody", ["1e9", "--model", "lj"], "1,000,188,000 atoms"),
                 ("nbody", ["2e8", "--model", "lj"], "bytes an atom with its ghosts and Verlet lists"),
                 ("nbody", ["4000", "--model", "lj", "--density", "1e-320"], "is too small: the fcc cell edge"),
                 ("nbody", ["4000", "--model", "lj", "--density", "1e-9"], "cells of the neighbour search"),
                 ("nbody", ["4000", "--model", "lj", "--cutoff", "1e-3", "--skin", "0"],
                  "cells of the neighbour search"),
                 ("nbody", ["100", "--softening", "1e308"], "where eps^2 overflows fp32"),
                 ("nbody", ["1"], "BODIES (1) must be at least 2"),
                 # issue 60: a step that is zero in the run's precision ran with nothing moving
                 ("nbody", ["100", "--dt", "1e-46"], "--dt 1e-46 is below 1.18e-38, the smallest normal number of "
                                                     "fp32"),
                 ("nbody", ["500", "--model", "lj", "--dt", "1e-320"], "--dt 1e-320 is below 2.23e-308")])
#: inputs refused for the memory they need, and the bytes that takes (a node with more runs them)
NEEDS_MEMORY = {"2e9": 256e9, "1e9": 800e9, "2e8": 160e9}


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("app, args, words", BAD_INPUTS,
                         ids=[f"{a}:{' '.join(x)}" for a, x, _ in BAD_INPUTS])
def test_bad_input_one_message_exit_2(app, args, words, ranks):
    if app == "nbody" and args[0] in NEEDS_MEMORY:
        from pympi_gpu.nbody.memory import available_bytes

        if (available_bytes() or 0) >= NEEDS_MEMORY[args[0]]:
            pytest.skip(f"this node has the memory for {args[0]}")
    cmd = [PI if app == "pi" else NBODY, *args]
    t0 = time.monotonic()
    p = run(mpiexec_argv(ranks) + cmd if ranks > 1 else cmd, timeout=120, env=env())
    one_message(p, words)
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("argv, words", [
    ([SCALE, "--ranks", "１,2", "--", PI, "1e6"], "is not a whole number of ranks"),
    ([SCALE, "--ranks", "1", "--repeat", "٣", "--", PI, "1e6"], "is not a valid integer"),
    ([LAUNCH, "-n", "２", "--", "true"], "is not a valid integer"),
    ([LAUNCH, "-n", "0x2", "--", "true"], "is not a valid integer"),
])
def test_unicode_and_hex_counts_in_scale_and_launch(tmp_path, argv, words):
    p = run(argv, env=env(), timeout=60, cwd=tmp_path)
    one_message(p, words)
    assert list(tmp_path.iterdir()) == []


def test_lj_1e9_is_refused_at_once():
    """`pympi-nbody 1e9 --model lj` ended after 19 s in MemoryError (exit 1); now refused within 5 s."""
    from pympi_gpu.nbody.memory import available_bytes

    if (available_bytes() or 0) >= NEEDS_MEMORY["1e9"]:
        pytest.skip("this node has the memory for 1e9 LJ atoms")
    t0 = time.monotonic()
    p = run([NBODY, "1e9", "--model", "lj"], timeout=120, env=env())
    took = time.monotonic() - t0
    one_message(p, "1,000,188,000 atoms (1x1x1 rank grid) need about")
    assert took < 5.0, f"refused after {took:.1f} s"
