"""The start from a file (``--init``, issue 58) at 2 and 3 ranks: run under ``mpiexec -n 2`` and ``-n 3`` with
``--with-mpi``.

Every rank gets its brick's atoms of the file, bit for bit what one rank reads alone (COMM_SELF), in rounds of
a few rows as of the whole file, for each format; an id read twice, or two atoms at one place, found on the
ranks that see them and refused on every rank; and
the memory a rank allocates while it reads 108,000 atoms in rounds of 8,192 rows, measured with
``tracemalloc``: at most three times its share (its rows on their way, their columns joined and sorted, the
directory), and on the reading rank a round of the file's lines more (measured at 3 ranks: 2.3 times the
share, the reading rank 3.2 MB more), not the whole system.
"""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.nbody.lj import start
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.domain import make_cart, owner_coords
from pympi_gpu.nbody.lj.lammps import write_data
from pympi_gpu.nbody.lj.readers import InitError

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture
def shared_dir(tmp_path):
    """One directory for every rank (rank 0's)."""
    return MPI.COMM_WORLD.bcast(str(tmp_path), root=0)


def _written(path, write):
    if MPI.COMM_WORLD.Get_rank() == 0:
        write(path)
    MPI.COMM_WORLD.Barrier()
    return str(path)


def _files(d):
    """The same 864 atoms (moved off the lattice, in a box from -L/2) as a data file, an extxyz and a GSD frame."""
    from pympi_gpu.nbody.dump import open_dump
    from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities

    config = LjConfig(cells=6)
    rng = np.random.default_rng(4)
    x = fcc_positions(6, config.density) + rng.normal(scale=0.05, size=(config.atoms, 3))
    v = velocities(config.atoms, 1.0, 2)
    order = rng.permutation(config.atoms)
    ids = np.arange(1, config.atoms + 1)

    def data(path):
        lo = -config.box[0] / 2
        with open(path, "w") as fh:
            fh.write(f"moved\n\n{config.atoms} atoms\n1 atom types\n\n"
                     + "".join(f"{lo!r} {-lo!r} {a}lo {a}hi\n" for a in "xyz") + "\nMasses\n\n1 1\n\nAtoms\n\n")
            np.savetxt(fh, np.column_stack([ids[order], np.ones(config.atoms), x[order] + lo]),
                       fmt=["%d", "%d", "%.17g", "%.17g", "%.17g"])
            fh.write("\nVelocities\n\n")
            np.savetxt(fh, np.column_stack([ids, v]), fmt=["%d", "%.17g", "%.17g", "%.17g"])

    def dump(path):
        writer = open_dump(path, config.box, config.identity())
        writer.write(0, 0.0, ids[order], x[order], v[order])
        writer.close()

    return {"lammps": _written(f"{d}/x.data", data), "extxyz": _written(f"{d}/x.extxyz", dump),
            "gsd": _written(f"{d}/x.gsd", dump)}


@pytest.mark.parametrize("kind", ["lammps", "extxyz", "gsd"])
@pytest.mark.parametrize("rows", [None, 37])
def test_each_brick_gets_its_atoms_of_the_file_bit_for_bit(agree, shared_dir, kind, rows):
    path = _files(shared_dir)[kind]
    world = MPI.COMM_WORLD
    cart, alone = make_cart(world), MPI.COMM_SELF.Create_cart([1, 1, 1], periods=[True] * 3)
    try:
        header = start.read_header(cart, path)
        got = start.load(cart, path, header, rows=rows)
        whole = start.load(alone, path, header)
        dims, coords = tuple(cart.Get_topo()[0]), cart.Get_coords(cart.Get_rank())
        mine = np.all(owner_coords(whole["x"], header.box, dims) == np.array(coords), axis=1)

        def check():
            assert got["id"].tolist() == whole["id"][mine].tolist()
            assert got["x"].tobytes() == whole["x"][mine].tobytes()
            assert got["v"].tobytes() == whole["v"][mine].tobytes()
            assert cart.allreduce(got["id"].size) == header.atoms

        agree(world, check)
    finally:
        cart.Free()
        alone.Free()


@pytest.mark.parametrize("row, words", [
    ("3 1 0.5 0.5 0.5", "atom id 3 is given twice (lines 18 and 814)"),
    ("1 1 -5.0388 -5.0388 -5.0388", "are at one place"),
])
def test_a_refusal_some_ranks_see_is_every_ranks(agree, shared_dir, row, words):
    """The directory of ids and the owners' check of places: found where the atoms are, refused on every rank."""
    from pympi_gpu.nbody.lj.lattice import fcc_positions

    config = LjConfig(cells=6)
    lo = -config.box[0] / 2

    def data(path):
        x = fcc_positions(6, config.density) + lo
        lines = [f"{i + 1} 1 {a!r} {b!r} {c!r}" for i, (a, b, c) in enumerate(x.tolist())]
        lines[798] = row if "given twice" in words else f"799 1 {lo!r} {lo!r} {lo!r}"
        with open(path, "w") as fh:
            fh.write(f"t\n\n{config.atoms} atoms\n1 atom types\n\n"
                     + "".join(f"{lo!r} {-lo!r} {a}lo {a}hi\n" for a in "xyz")
                     + "\nMasses\n\n1 1\n\nAtoms # atomic\n\n" + "\n".join(lines) + "\n")

    path = _written(f"{shared_dir}/bad.data", data)
    cart = make_cart(MPI.COMM_WORLD)
    try:
        header = start.read_header(cart, path)
        with pytest.raises(InitError) as info:
            start.load(cart, path, header, rows=50)
        agree(MPI.COMM_WORLD, lambda: words in str(info.value) or pytest.fail(str(info.value)))
        assert MPI.COMM_WORLD.allgather(str(info.value)) == [str(info.value)] * MPI.COMM_WORLD.Get_size()
    finally:
        cart.Free()


def _peak_extra(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_reading_108000_atoms_holds_a_share_and_a_round():
    world = MPI.COMM_WORLD
    config = LjConfig(cells=30)  # 108,000 atoms
    d = world.bcast(__import__("tempfile").mkdtemp() if world.Get_rank() == 0 else None, root=0)
    path = _written(f"{d}/big.data", lambda p: write_data(p, config))
    cart = make_cart(world)
    try:
        header = start.read_header(cart, path)
        rows = 8192
        got, extra = _peak_extra(lambda: start.load(cart, path, header, rows=rows))
        share = sum(a.nbytes for a in got.values())          # what the rank keeps: 56 bytes an atom
        whole = config.atoms * (24 + 24 + 8)
        text = rows * 110                                     # a round of the file's lines
        peaks = cart.allgather((extra, share))
        if cart.Get_rank() == 0:
            print("read peak per rank (MB):", [round(e / 1e6, 1) for e, _ in peaks], "whole", round(whole / 1e6, 1))
        for r, (e, s) in enumerate(peaks):
            assert e <= 3 * s + 4 * text, f"rank {r} allocated {e} bytes at peak, its share is {s}"
        # the reading rank holds a round of the file besides what every rank holds, not the file
        assert peaks[0][0] - max(e for e, _ in peaks[1:]) <= 4 * text
    finally:
        cart.Free()
        if world.Get_rank() == 0:
            __import__("shutil").rmtree(d)
