"""``pympi-nbody --model lj --init x.data`` on the GPU backend, under numba's CUDA simulator (a child process:
NUMBA_ENABLE_CUDASIM must be set before numba.cuda is imported), as on the CPU (issue 58, item 5): a data file
of LAMMPS's layout (a box from -L/2, image flags, atoms off the lattice, in no order) runs at 2 ranks on the
device to the numba CPU path's thermo, to round-off; and one of an orthogonal box of three edges (issue 58,
item 1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lattice import FCC_BASIS, fcc_positions, velocities

NBODY = script("pympi-nbody")
ARGS = ["--model", "lj", "--steps", "12", "--thermo", "4", "--json", "-q"]


def _doc(argv, env):
    out = run(argv, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _data(path, cells=(4, 4, 4)):
    """The fcc lattice of ``cells`` (along x, y, z) at bench/in.lj's density, hot (atoms cross bricks on the
    way), moved a little off its sites, in LAMMPS's layout."""
    config = LjConfig(cells=4, temperature=3.0)
    rng = np.random.default_rng(12)
    a = (4.0 / config.density) ** (1.0 / 3.0)
    corners = np.stack(np.meshgrid(*[np.arange(c, dtype=np.float64) for c in cells], indexing="ij"), -1)
    x = (corners.reshape(-1, 1, 3) + FCC_BASIS[None]).reshape(-1, 3) * a
    if cells == (4, 4, 4):
        assert x.tobytes() == fcc_positions(4, config.density).tobytes()
    n = len(x)
    x += rng.normal(scale=0.03, size=(n, 3))
    lo = [-c * a / 2 for c in cells]
    v = velocities(n, config.temperature, 9)
    order = rng.permutation(n)
    with open(path, "w") as fh:
        fh.write(f"LAMMPS data file via write_data\n\n{n} atoms\n1 atom types\n\n"
                 + "".join(f"{low!r} {-low!r} {d}lo {d}hi\n" for low, d in zip(lo, "xyz"))
                 + "\nMasses\n\n1 1\n\nPair Coeffs # lj/cut\n\n1 1 1\n\nAtoms # atomic\n\n")
        images = np.zeros((n, 3), np.int64)
        np.savetxt(fh, np.column_stack([order + 1, np.ones(n), x[order] + lo, images]),
                   fmt=["%d", "%d", "%.17g", "%.17g", "%.17g", "%d", "%d", "%d"])
        fh.write("\nVelocities\n\n")
        np.savetxt(fh, np.column_stack([order + 1, v[order]]), fmt=["%d", "%.17g", "%.17g", "%.17g"])
    return str(path)


@pytest.mark.parametrize("cells", [(4, 4, 4), (5, 3, 4)], ids=["cube", "orthogonal"])
def test_a_data_file_runs_on_the_gpu_as_on_the_cpu(tmp_path, cells):
    """256 atoms in a cube; 240 in 8.40 x 5.04 x 6.72 sigma (three edges: the migration along x, the ghosts'
    shifts and the folds along each axis by its own edge)."""
    data = _data(tmp_path / "x.data", cells)
    cpu = _doc([NBODY, "--init", data, *ARGS, "--backend", "numba", "--threads", "1"],
               env=clean_env(OMP_NUM_THREADS="1"))
    gpu = _doc(mpiexec_argv(2) + [NBODY, "--init", data, *ARGS, "--backend", "gpu"],
               env=clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1"))
    assert gpu["backend"] == "gpu" and gpu["grid"] == [2, 1, 1] and gpu["host_copies_per_step"] == 0
    assert gpu["init"] == cpu["init"] == {"spec": data, "kind": "lammps", "velocities": True}
    assert [t["step"] for t in gpu["thermo"]] == [0, 4, 8, 12]
    assert gpu["box"] == cpu["box"] and len(set(cpu["box"])) == (1 if cells == (4, 4, 4) else 3)
    assert gpu["rebuilds"] > 1  # atoms migrated (and were folded) on the device
    for a, b in zip(gpu["thermo"], cpu["thermo"], strict=True):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-11, abs=1e-12), (a["step"], f)
