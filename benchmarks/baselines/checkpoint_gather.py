"""The checkpoints before issue 19 item 4, kept as the benchmark's baseline (same file contents).

Gravity: every array gathered whole on rank 0 (``Gatherv``), written with
``numpy.savez``; loaded whole on rank 0 and scattered (``Scatterv``).
LJ: the owned atoms pickled to rank 0 (``comm.gather``), sorted by id and
written with ``numpy.savez``; loaded whole on rank 0 and broadcast to every
rank (``Bcast``), each keeping the atoms of its brick.  Loading validates the
values as the old ``read_file`` did (finite; for LJ the ids 1..N).
"""

import json

import numpy as np

from pympi_gpu.mpi.decomposition import block_counts, block_starts
from pympi_gpu.nbody.lj.domain import owner_coords, wrap
from pympi_gpu.run.fileio import atomic_open


def _write(path, arrays, meta):
    with atomic_open(path) as fh:
        np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)


def gravity_save(comm, path, local, meta, fields):
    counts = comm.allgather(int(local["x"].size))
    displs = [sum(counts[:r]) for r in range(comm.Get_size())]
    full = {}
    for f in fields:
        out = np.empty(sum(counts), local[f].dtype) if comm.Get_rank() == 0 else None
        comm.Gatherv(local[f], [out, (counts, displs)] if out is not None else None, root=0)
        full[f] = out
    if comm.Get_rank() == 0:
        _write(path, full, meta)
    comm.Barrier()


def gravity_load(comm, path, fields, dtype):
    size, rank = comm.Get_size(), comm.Get_rank()
    arrays = None
    if rank == 0:
        with np.load(path) as data:
            arrays = {f: data[f] for f in fields}
        assert all(np.isfinite(a).all() for a in arrays.values())
    n = comm.bcast(arrays["x"].size if rank == 0 else None, root=0)
    counts, starts = block_counts(n, size), block_starts(n, size)
    local = {}
    for f in fields:
        local[f] = np.empty(counts[rank], dtype)
        comm.Scatterv([arrays[f], (counts, starts)] if rank == 0 else None, local[f], root=0)
    return local


def lj_save(comm, path, owned, meta):
    parts = comm.gather(owned, root=0)
    if comm.Get_rank() == 0:
        full = {k: np.concatenate([p[k] for p in parts]) for k in owned}
        order = np.argsort(full["id"], kind="stable")
        _write(path, {k: a[order] for k, a in full.items()}, meta)
    comm.Barrier()


def lj_load(comm, path, box, dims):
    arrays = None
    if comm.Get_rank() == 0:
        with np.load(path) as data:
            arrays = {k: data[k] for k in ("x", "v", "f", "id")}
        assert all(np.isfinite(arrays[k]).all() for k in ("x", "v", "f"))
        assert np.array_equal(arrays["id"], np.arange(1, arrays["id"].size + 1))
    n = comm.bcast(arrays["id"].size if arrays else None, root=0)
    if arrays is None:
        arrays = {k: np.empty((n, 3)) for k in ("x", "v", "f")}
        arrays["id"] = np.empty(n, np.int64)
    for k in ("x", "v", "f", "id"):
        comm.Bcast(arrays[k], root=0)
    mine = np.all(owner_coords(wrap(arrays["x"], box), box, dims) == np.array(comm.Get_coords(comm.Get_rank())),
                  axis=1)
    return {k: a[mine].copy() for k, a in arrays.items()}
