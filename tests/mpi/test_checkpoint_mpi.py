"""Checkpoints that scale: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

A checkpoint streams through rank 0 in blocks and is scattered back block by
block, so no rank ever holds the whole system.  Measured here with
``tracemalloc`` (NumPy reports its array memory to it): the most memory any
rank allocates during a save or a load, beyond what it held before, stays below
its share of the system plus a few blocks, well below the whole system that a
gather to rank 0 would hold.  The data come back bit for bit, to the owner
each row names, in order.
"""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.mpi.decomposition import block_counts, block_starts
from pympi_gpu.nbody.checkpoint import CheckpointError
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt
from pympi_gpu.nbody.lj.domain import make_cart, owner_coords

pytestmark = pytest.mark.mpi(min_size=2)

BLOCK = 997  # rows; N / BLOCK is not whole, so the last block is ragged
SLACK = 256 * 1024  # bytes: Python objects, pickled counts, the zip's bookkeeping


def _shared_path(comm, tmp_path_factory, name):
    path = str(tmp_path_factory.mktemp("ckpt") / name) if comm.Get_rank() == 0 else None
    return comm.bcast(path, root=0)


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


def _all_ranks_within(comm, extra, bound, what):
    worst = comm.allgather((extra, bound))
    for r, (e, b) in enumerate(worst):
        assert e <= b, f"{what}: rank {r} allocated {e} bytes at peak, more than its bound {b}"


def test_gravity_save_and_load_hold_a_share_plus_blocks(tmp_path_factory):
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    n = 60_001
    counts, starts = block_counts(n, size), block_starts(n, size)
    index = starts[rank] + np.arange(counts[rank])
    local = {f: (index * 10 + k).astype(np.float64) * 0.5 for k, f in enumerate(gravity_ckpt.FIELDS)}
    meta = {"step": 7, "time": 0.07, "seed": 1, "init": "plummer", "precision": "fp64", "dt": 0.01,
            "softening": 0.01}
    path = _shared_path(comm, tmp_path_factory, "g.npz")
    row = 8 * len(gravity_ckpt.FIELDS)
    whole, share = n * row, counts[rank] * row

    _, extra = _peak_extra(lambda: gravity_ckpt.save(comm, path, local, meta, block=BLOCK))
    # the keys of the local rows, their order (24 B a row at most) and a few one-array blocks
    _all_ranks_within(comm, extra, 24 * counts[rank] + 4 * BLOCK * 16 + SLACK, "gravity save")
    assert 24 * counts[rank] + 4 * BLOCK * 16 + SLACK < whole // 4

    (got_meta, got), extra = _peak_extra(lambda: gravity_ckpt.load(comm, path, block=BLOCK))
    _all_ranks_within(comm, extra, share + 4 * BLOCK * row + SLACK, "gravity load")
    assert share + 4 * BLOCK * row + SLACK < whole
    assert got_meta["bodies"] == n and got_meta["ranks"] == size and got_meta["step"] == 7
    for f in gravity_ckpt.FIELDS:
        assert got[f].tobytes() == local[f].tobytes()  # bit for bit, in body order
    if rank == 0:  # the file is an ordinary .npz, every body in order
        with np.load(path) as data:
            assert np.array_equal(data["vx"], (np.arange(n) * 10 + 3) * 0.5)


def _lj_system(cart, cells, seed=3):
    """Every rank's share of a random system of 4 cells^3 atoms, owned by the wrong bricks on purpose."""
    n = 4 * cells ** 3
    box = float(cells) * 1.6796
    rng = np.random.default_rng(seed)
    x = rng.uniform(-box, 2 * box, (n, 3))  # some outside the box: the loader folds them to find the owner
    v, f = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    ids = np.arange(1, n + 1)
    held = rng.permutation(n) % cart.Get_size() == cart.Get_rank()  # any split of ids over ranks will do
    return box, {"x": x, "v": v, "f": f, "id": ids}, {"x": x[held], "v": v[held], "f": f[held], "id": ids[held]}


def test_lj_save_and_load_hold_a_share_plus_blocks(tmp_path_factory):
    cart = make_cart(MPI.COMM_WORLD)
    try:
        size, rank, dims = cart.Get_size(), cart.Get_rank(), cart.Get_topo()[0]
        cells = 25
        box, full, owned = _lj_system(cart, cells)
        n = full["id"].size
        meta = {"model": "lj", "step": 40, "cells": cells, "atoms": n, "density": 0.8442, "temperature": 1.44,
                "cutoff": 2.5, "skin": 0.3, "dt": 0.005, "seed": 3}
        path = _shared_path(cart, tmp_path_factory, "lj.npz")
        row = 3 * 3 * 8 + 8
        whole = n * row

        _, extra = _peak_extra(lambda: lj_ckpt.save(cart, path, owned, meta, block=BLOCK))
        bound = 24 * owned["id"].size + 4 * BLOCK * (24 + 8) + SLACK
        _all_ranks_within(cart, extra, bound, "LJ save")
        assert bound < whole // 4

        (got_meta, got), extra = _peak_extra(lambda: lj_ckpt.load(cart, path, lambda m: box, dims, block=BLOCK))
        mine = got["id"].size
        bound = mine * row + 4 * BLOCK * row + SLACK
        _all_ranks_within(cart, extra, bound, "LJ load")
        assert bound < whole
        assert got_meta["atoms"] == n and got_meta["ranks"] == size

        # each rank got exactly the atoms its brick owns, in id order, bit for bit
        coords = owner_coords(np.mod(full["x"], box), box, dims)
        ours = np.all(coords == np.array(cart.Get_coords(rank)), axis=1)
        for k in ("x", "v", "f", "id"):
            assert got[k].tobytes() == full[k][ours].tobytes(), k
        assert cart.allreduce(mine) == n
        if rank == 0:  # one file in id order, read back whole as a user would
            m, arrays = lj_ckpt.read_file(path)
            assert m["step"] == 40
            for k in ("x", "v", "f", "id"):
                assert arrays[k].tobytes() == full[k].tobytes(), k
    finally:
        cart.Free()


def test_lj_load_reads_one_file_while_a_run_replaces_it(tmp_path_factory, monkeypatch):
    """Rank 0 reads an LJ checkpoint twice (counts per brick, then the rows): a run writing its
    checkpoints to that path may replace it between the passes (`--restart c.npz --checkpoint c.npz
    --checkpoint-every K`). Both passes read the file opened first: every rank gets that file's
    atoms. (Reading the new file's rows with the old file's counts sent ranks more rows than they
    had room for: "Message truncated" on one rank.)"""
    import os

    from pympi_gpu.nbody.checkpoint import NpzRows

    cart = make_cart(MPI.COMM_WORLD)
    try:
        rank, dims = cart.Get_rank(), cart.Get_topo()[0]
        box, full, owned = _lj_system(cart, 6)
        meta = {"model": "lj", "step": 40, "cells": 6, "atoms": full["id"].size, "density": 0.8442,
                "temperature": 1.44, "cutoff": 2.5, "skin": 0.3, "dt": 0.005, "seed": 3}
        path = _shared_path(cart, tmp_path_factory, "lj.npz")
        lj_ckpt.save(cart, path, owned, meta, block=BLOCK)
        later = dict(owned, x=owned["x"] + box / 2)  # the other run, some steps on: its atoms in other bricks
        lj_ckpt.save(cart, path + ".next.npz", later, dict(meta, step=50), block=BLOCK)
        if rank == 0:
            first_pass_done = NpzRows.again

            def replaced_meanwhile(self):
                os.replace(path + ".next.npz", path)  # as the run's atomic rename does
                return first_pass_done(self)

            monkeypatch.setattr(NpzRows, "again", replaced_meanwhile)
        got_meta, got = lj_ckpt.load(cart, path, lambda m: box, dims, block=BLOCK)
        assert got_meta["step"] == 40
        coords = owner_coords(np.mod(full["x"], box), box, dims)
        ours = np.all(coords == np.array(cart.Get_coords(rank)), axis=1)
        for k in ("x", "v", "f", "id"):
            assert got[k].tobytes() == full[k][ours].tobytes(), k
        if rank == 0:
            assert lj_ckpt.read_file(path)[0]["step"] == 50  # the path holds the other run's file now
    finally:
        cart.Free()


def test_lj_atom_held_twice_refused_on_every_rank(tmp_path_factory):
    """A row lost or held twice cannot be written in id order: one error on every rank, the old file kept."""
    cart = make_cart(MPI.COMM_WORLD)
    try:
        box, full, owned = _lj_system(cart, 4)
        meta = {"model": "lj", "step": 0, "cells": 4, "atoms": 256, "density": 0.8442, "temperature": 1.44,
                "cutoff": 2.5, "skin": 0.3, "dt": 0.005, "seed": 3}
        path = _shared_path(cart, tmp_path_factory, "twice.npz")
        lj_ckpt.save(cart, path, owned, meta, block=50)
        before = open(path, "rb").read() if cart.Get_rank() == 0 else None
        if cart.Get_rank() == 1:  # atom 1 on rank 1 too
            owned = {k: np.concatenate([full[k][:1], a]) for k, a in owned.items()}
        with pytest.raises(CheckpointError, match="lost or held twice"):
            lj_ckpt.save(cart, path, owned, meta, block=50)
        if cart.Get_rank() == 0:
            assert open(path, "rb").read() == before
        # in rank order (a blown-up state, for inspection) it is written as it is
        lj_ckpt.save(cart, path, owned, dict(meta, atoms=257), block=50, by_id=False)
        if cart.Get_rank() == 0:
            with np.load(path) as data:
                assert data["id"].size == 257
    finally:
        cart.Free()


def test_corrupt_block_refused_on_every_rank(tmp_path_factory):
    """A non-finite value deep in the file, found while scattering: one error on every rank, nobody hangs."""
    comm = MPI.COMM_WORLD
    n = 5000
    path = _shared_path(comm, tmp_path_factory, "bad.npz")
    if comm.Get_rank() == 0:
        arrays = {f: np.ones(n) for f in gravity_ckpt.FIELDS}
        arrays["vz"][4321] = np.nan
        gravity_ckpt.write_file(path, arrays, {"format": gravity_ckpt.FORMAT, "bodies": n, "step": 0,
                                               "time": 0.0, "seed": 1, "init": "plummer", "precision": "fp64",
                                               "dt": 0.01, "softening": 0.01, "ranks": 1})
    comm.Barrier()
    with pytest.raises(CheckpointError, match="'vz' holds non-finite values"):
        gravity_ckpt.load(comm, path, block=1000)
