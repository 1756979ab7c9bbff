"""The LJ initial state made brick by brick: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

Each rank makes only its brick's atoms (issue 31, item 5), and the state must
be what the whole-lattice start made before, bit for bit, at any rank count:
checked against a copy of that start (:func:`whole_lattice_start`) on
COMM_WORLD's grid and on COMM_SELF (one rank).  The memory a rank allocates
while it starts 4,000,000 atoms is measured with ``tracemalloc``, as the
checkpoint test does: its share and a few blocks, well under the whole
lattice (which the old start held on every rank, several times over).
"""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.nbody.lj.domain import brick_of, make_cart, owner_coords
from pympi_gpu.nbody.lj.system import LjConfig, initial_arrays
from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities

pytestmark = pytest.mark.mpi(min_size=2)


def whole_lattice_start(config: LjConfig, brick):
    """The start before issue 31: every rank made the whole lattice and kept its brick's atoms."""
    x = fcc_positions(config.cells, config.density)
    v = velocities(config.atoms, config.temperature, config.seed)
    mine = np.all(owner_coords(x, config.box, brick.dims) == np.array(brick.coords), axis=1)
    return x[mine].copy(), v[mine].copy(), np.nonzero(mine)[0].astype(np.int64) + 1


def _brick(cart, config):
    return brick_of(config.box, tuple(cart.Get_topo()[0]), cart.Get_coords(cart.Get_rank()))


@pytest.mark.parametrize("world", ["COMM_WORLD", "COMM_SELF"])
@pytest.mark.parametrize("cells, density, temperature, seed", [
    (12, 0.8442, 1.44, 87287),     # LAMMPS's bench/in.lj, 6,912 atoms
    (7, 0.3, 0.0, 1),              # no temperature: every velocity 0 times its sign
    (9, 1.2, 3.0, 2**64 - 1),      # the largest seed
    (30, 0.8442, 1.44, 5),         # 108,000 atoms: more than a block of the streamed sums
])
def test_each_brick_is_the_whole_lattice_start_bit_for_bit(world, cells, density, temperature, seed):
    cart = make_cart(getattr(MPI, world))
    try:
        config = LjConfig(cells=cells, density=density, temperature=temperature, seed=seed)
        brick = _brick(cart, config)
        got = initial_arrays(config, brick, cart)
        want = whole_lattice_start(config, brick)
        for name, a, b in zip("x v ids".split(), got, want):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert a.tobytes() == b.tobytes(), name
        assert cart.allreduce(got[2].size) == config.atoms
    finally:
        cart.Free()


def _peak_extra(fn):
    """(fn's result, the most bytes allocated while it ran beyond those held when it started)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_start_of_4e6_atoms_holds_a_share_not_the_lattice():
    cart = make_cart(MPI.COMM_WORLD)
    try:
        config = LjConfig(cells=100)  # 4,000,000 atoms
        brick = _brick(cart, config)
        (x, v, ids), extra = _peak_extra(lambda: initial_arrays(config, brick, cart))
        share = x.nbytes + v.nbytes + ids.nbytes     # what the rank keeps: 56 bytes an atom
        whole = config.atoms * (24 + 24 + 8)          # the same for every atom
        peaks = cart.allgather((extra, share))
        if cart.Get_rank() == 0:
            print("start-up peak per rank (MB):", [round(e / 1e6, 1) for e, _ in peaks], "whole lattice",
                  round(whole / 1e6, 1))
        for r, (e, s) in enumerate(peaks):
            assert e <= s + 8 * 1024 * 1024, f"rank {r} allocated {e} bytes at peak, its share is {s}"
            assert e < 0.6 * whole
    finally:
        cart.Free()
