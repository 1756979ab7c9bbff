"""Thermostats (``--thermostat nvt|langevin``), run as users run them, against LAMMPS on the same input.

Nose-Hoover (``fix nvt temp T T TDAMP``) is deterministic: from the same data file its thermo after 100 steps
agrees with LAMMPS's to the round-off the dynamics amplifies.  Langevin's random forces come from our own
counter-based stream (LAMMPS's is per rank), so the two agree in their statistics: the mean temperature
(a short run here; ``benchmarks/thermostats.py`` runs 20,000 steps).  Each restarts bit for bit, runs at 1, 2
and 3 ranks to the same thermo (to round-off, as NVE runs do: the forces are summed in another order; the
Langevin forces themselves are the same numbers at any rank count), and its MPI calls made by Python give
what the kernels' give, bit for bit.  The thermostats' own formulas: tests/unit/test_thermostats.py; the GPU
engine: tests/gpu/test_thermostats_gpu.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script
from helpers.lammps import lammps_executable, run_state
from pympi_gpu.nbody.lj.config import LjConfig

BATHS = ("nvt", "langevin")
KEYS = ("temp", "e_pair", "ke", "etotal", "press")


def nbody(ranks: int, *args, **kw):
    return run(mpiexec_argv(ranks) + [script("pympi-nbody"), *map(str, args)], **kw)


def doc_of(out) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def options(bath: str, *more) -> tuple:
    return ("--model", "lj", "--thermostat", bath, "--threads", "1", "-q", "--json", *more)


def refused(out, says: str) -> None:
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.fixture(scope="module")
def lmp():
    return lammps_executable()


def test_bad_thermostat_options_are_refused():
    for args, says in ((("--thermostat", "berendsen"), "Invalid value for '--thermostat'"),
                       (("--tdamp", "0.5"), "--tdamp applies to a thermostat (--thermostat nvt, langevin)"),
                       (("--thermostat", "nvt", "--tdamp", "0"), "must be > 0"),
                       (("--thermostat", "nvt", "--temperature", "0"), "which must be > 0"),
                       (("--thermostat", "langevin", "--verify"), "run it without --verify")):
        refused(run([script("pympi-nbody"), "500", "--model", "lj", *args, "--steps", "1"]), says)
    refused(run([script("pympi-nbody"), "500", "--thermostat", "nvt", "--steps", "1"]),
            "--thermostat applies to --model lj only")


@pytest.mark.parametrize("ranks", [1, 3])
def test_nvt_agrees_with_lammps(lmp, tmp_path, ranks):
    """From the same data file, 100 steps of fix nvt temp 1.44 1.44 0.5 in both codes: every column and
    econserve within 1e-8 relative (measured: about 1e-12, the 12 digits LAMMPS prints, at 1 and 3 ranks)."""
    config = LjConfig(cells=6, thermostat="nvt", tdamp=0.5)
    theirs = run_state(lmp, config, tmp_path, 100, 50)
    ours = doc_of(nbody(ranks, config.atoms, *options("nvt", "--tdamp", 0.5), "--steps", 100, "--thermo", 50))
    assert ours["thermostat"] == "nvt" and ours["tdamp"] == 0.5
    assert [r["step"] for r in ours["thermo"]] == [r["step"] for r in theirs] == [0, 50, 100]
    for a, b in zip(ours["thermo"], theirs):
        for k in (*KEYS, "econserve"):
            assert a[k] == pytest.approx(b[k], rel=1e-8), (a["step"], k)
    # the chain has moved energy: econserve is the conserved one, etotal is not
    first, last = ours["thermo"][0], ours["thermo"][-1]
    assert abs(last["etotal"] - first["etotal"]) > 100 * abs(last["econserve"] - theirs[-1]["econserve"])


def test_langevin_holds_the_temperature_as_lammps_does(lmp, tmp_path):
    """500 atoms held at 1.5 (damp 0.5: 100 steps) from the lattice, where half the kinetic energy goes into the
    pairs' at once, for 4,000 steps: the mean temperature of the second half within 3 % of the target in both
    codes, and the two means within 3 % of each other (benchmarks/thermostats.py: 20,000 steps, within 2 %
    and the codes' run-to-run spread)."""
    config = LjConfig(cells=5, temperature=1.5, thermostat="langevin", tdamp=0.5)
    steps, every = 4000, 20
    theirs = run_state(lmp, config, tmp_path, steps, every)
    ours = doc_of(nbody(1, config.atoms, *options("langevin", "--tdamp", 0.5, "--temperature", 1.5),
                        "--steps", steps, "--thermo", every))
    assert min(r["temp"] for r in ours["thermo"]) < 1.0  # it fell, and was brought back
    mean = {}
    for name, rows in (("pympi", ours["thermo"]), ("lammps", theirs)):
        mean[name] = float(np.mean([r["temp"] for r in rows if r["step"] > steps // 2]))
        assert mean[name] == pytest.approx(1.5, rel=0.03), (name, mean)
    assert mean["pympi"] == pytest.approx(mean["lammps"], rel=0.03), mean


@pytest.mark.parametrize("bath", BATHS)
def test_restart_continues_bit_for_bit(tmp_path, bath):
    """60 steps with a checkpoint at 30, or 30 steps and 30 more restarted from it (2 ranks): the same thermo
    and the same atoms, bit for bit; the checkpoint fixes the thermostat, its damping and its state."""
    ck, whole, end = tmp_path / "c.npz", tmp_path / "all.npz", tmp_path / "end.npz"
    args = (864, *options(bath, "--tdamp", 0.25, "--temperature", 1.2), "--thermo", 10)
    through = doc_of(nbody(2, *args, "--steps", 60, "--checkpoint", whole, "--checkpoint-every", 30))
    first = doc_of(nbody(2, *args, "--steps", 30, "--checkpoint", ck))
    meta = json.loads(str(np.load(ck)["meta"]))
    assert meta["thermostat"] == bath and meta["tdamp"] == 0.25
    assert ("thermostat_state" in meta) == (bath == "nvt")
    resumed = doc_of(nbody(2, 864, "--model", "lj", "--threads", "1", "-q", "--json", "--thermo", 10, "--steps", 60,
                           "--restart", ck, "--checkpoint", end))
    assert resumed["thermostat"] == bath and resumed["tdamp"] == 0.25 and first["thermo"][-1]["step"] == 30
    assert resumed["thermo"][1:] == through["thermo"][4:]
    a, b = np.load(whole), np.load(end)
    for k in ("x", "v", "f", "id"):
        assert np.array_equal(a[k], b[k]), k
    other = "langevin" if bath == "nvt" else "nvt"
    for wrong, says in ((("--thermostat", other), f"was run with --thermostat {bath}"),
                        (("--tdamp", "0.5"), "was run with --tdamp 0.25")):
        refused(nbody(1, 864, "--model", "lj", *wrong, "--steps", 60, "--restart", ck), says)


@pytest.mark.parametrize("bath", BATHS)
def test_ranks_agree_and_python_makes_the_kernels_calls(bath):
    """864 atoms at 1 and 3 ranks: the same thermo to round-off after 60 steps (as NVE's; 2 ranks: the restart
    test's); at 3 ranks the step's MPI calls made from Python (PYMPI_COMPILED_MPI=0) give the kernels' thermo
    bit for bit."""
    args = (864, *options(bath, "--temperature", 1.3), "--steps", 60, "--thermo", 20)
    one, three = doc_of(nbody(1, *args)), doc_of(nbody(3, *args))
    python = doc_of(nbody(3, *args, env=clean_env(PYMPI_COMPILED_MPI="0")))
    assert three["step_mpi"] == "kernels" and python["step_mpi"] == "python"
    assert python["thermo"] == three["thermo"]
    for a, b in zip(one["thermo"], three["thermo"], strict=True):
        for k in (*KEYS, *(("econserve",) if bath == "nvt" else ())):
            assert a[k] == pytest.approx(b[k], rel=1e-10, abs=1e-12), (a["step"], k)
