"""``pympi-nbody --model lj --init x.data`` on the GPU backend, under numba's CUDA simulator (a child process:
NUMBA_ENABLE_CUDASIM must be set before numba.cuda is imported), as on the CPU (issue 58, item 5): a data file
of LAMMPS's layout (a box from -L/2, image flags, atoms off the lattice, in no order) runs at 2 ranks on the
device to the numba CPU path's thermo, to round-off."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities

NBODY = script("pympi-nbody")
ARGS = ["--model", "lj", "--steps", "12", "--thermo", "4", "--json", "-q"]


def _doc(argv, env):
    out = run(argv, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _data(path):
    config = LjConfig(cells=4, temperature=3.0)  # 256 atoms, hot: atoms cross bricks on the way
    rng = np.random.default_rng(12)
    lo = -config.box / 2
    x = fcc_positions(4, config.density) + rng.normal(scale=0.03, size=(config.atoms, 3))
    v = velocities(config.atoms, config.temperature, 9)
    order = rng.permutation(config.atoms)
    with open(path, "w") as fh:
        fh.write(f"LAMMPS data file via write_data\n\n{config.atoms} atoms\n1 atom types\n\n"
                 + "".join(f"{lo!r} {-lo!r} {a}lo {a}hi\n" for a in "xyz")
                 + "\nMasses\n\n1 1\n\nPair Coeffs # lj/cut\n\n1 1 1\n\nAtoms # atomic\n\n")
        images = np.zeros((config.atoms, 3), np.int64)
        np.savetxt(fh, np.column_stack([order + 1, np.ones(config.atoms), x[order] + lo, images]),
                   fmt=["%d", "%d", "%.17g", "%.17g", "%.17g", "%d", "%d", "%d"])
        fh.write("\nVelocities\n\n")
        np.savetxt(fh, np.column_stack([order + 1, v[order]]), fmt=["%d", "%.17g", "%.17g", "%.17g"])
    return str(path)


def test_a_data_file_runs_on_the_gpu_as_on_the_cpu(tmp_path):
    data = _data(tmp_path / "x.data")
    cpu = _doc([NBODY, "--init", data, *ARGS, "--backend", "numba", "--threads", "1"],
               env=clean_env(OMP_NUM_THREADS="1"))
    gpu = _doc(mpiexec_argv(2) + [NBODY, "--init", data, *ARGS, "--backend", "gpu"],
               env=clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1"))
    assert gpu["backend"] == "gpu" and gpu["grid"] == [2, 1, 1] and gpu["host_copies_per_step"] == 0
    assert gpu["init"] == cpu["init"] == {"spec": data, "kind": "lammps", "velocities": True}
    assert [t["step"] for t in gpu["thermo"]] == [0, 4, 8, 12]
    for a, b in zip(gpu["thermo"], cpu["thermo"], strict=True):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-11, abs=1e-12), (a["step"], f)
