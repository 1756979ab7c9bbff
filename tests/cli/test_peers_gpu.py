"""benchmarks/peers_gpu.py (issue 59): bench/in.lj from pympi's own state in OpenMM, against pympi-nbody.

OpenMM is no dependency of the package or of its tests: the check skips, with the reason, where it is not
installed (``pip install openmm==8.6.1``).  gamdpy's runs (minutes under the CUDA simulator) are the
benchmark's, not a test's.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest

from helpers.commands import ROOT, env, run, script

spec = importlib.util.spec_from_file_location("peers_gpu", ROOT / "benchmarks" / "peers_gpu.py")
peers = importlib.util.module_from_spec(spec)
sys.modules["peers_gpu"] = peers           # dataclasses look their module up there
spec.loader.exec_module(peers)


def test_the_state_is_the_one_pympi_writes_for_lammps(tmp_path):
    """All three codes start from the state ``write_data`` hands LAMMPS: the same positions, velocities, box."""
    from pympi_gpu.nbody.lj.lammps import write_data

    state = peers.initial_state(500)
    write_data(tmp_path / "data", state.config)
    text = (tmp_path / "data").read_text()
    atoms = text.split("Atoms # atomic\n\n")[1].split("\n\nVelocities")[0]
    vel = text.split("Velocities\n\n")[1]
    assert state.atoms == 500 and f"0.0 {state.box!r} xlo xhi" in text
    assert np.array_equal(np.loadtxt(atoms.splitlines())[:, 2:], state.x)
    assert np.array_equal(np.loadtxt(vel.splitlines())[:, 1:], state.v)


def test_openmm_reference_agrees_with_pympi_at_steps_0_and_100():
    """OpenMM's Reference platform (double precision; sigma 1 nm, epsilon 1 kJ/mol, 1 amu: tau 1 ps), from
    pympi's state with the leapfrog's half-step velocities, has pympi's energies per atom at step 0 and at
    step 100 within 1e-8, through ``NonbondedForce`` and ``CustomNonbondedForce`` alike."""
    pytest.importorskip("openmm", reason="OpenMM is not installed (pip install openmm==8.6.1): the peers' "
                                         "check needs it; the project does not")
    out = run([script("pympi-nbody"), "500", "--model", "lj", "--steps", "100", "--thermo", "100", "--json",
               "--threads", "1"], env=env(), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    ours = json.loads(out.stdout)["thermo"]
    assert [r["step"] for r in ours] == [0, 100]
    state = peers.initial_state(500)
    for force in ("nonbonded", "custom"):
        got = peers.run_openmm(state, 100, "Reference", thermo=100, force=force)
        assert [r["step"] for r in got.thermo] == [0, 100] and got.precision == "double"
        diff = peers.differences(ours, got.thermo)
        assert set(diff) == {"0", "100"}
        worst = max(max(d.values()) for d in diff.values())
        assert worst <= 1e-8, (force, diff)
        assert got.rate > 0 and got.atoms == 500 and got.steps == 100
