"""Gravity checkpoints: the whole system in one ``.npz`` file, in body order.

Written by :func:`pympi_gpu.nbody.checkpoint.save_rows`: the ranks' blocks
stream through rank 0 a block of rows at a time into a temporary file that is
fsync'd and renamed over the target (a reader sees the old checkpoint or the
new one, never half of one).  :func:`load` reads the file block by block on
rank 0 and scatters each block to the ranks that own its bodies (the block
split of the current rank count, which may differ from the writer's),
validating as it goes (format, sizes, precision, finite values): one clear
error on every rank alike.  No rank holds more than its share plus a block.

Contents: arrays ``x y z vx vy vz ax ay az m`` (N values each, in the run's
precision; the accelerations let a restart continue bit-identically without a
fresh force evaluation) and ``meta``, a JSON string (see :data:`FORMAT`).
"""

from __future__ import annotations

import math
import os

import numpy as np

from pympi_gpu.mpi.blocks import scatter_rows
from pympi_gpu.mpi.decomposition import block_counts, block_starts
from pympi_gpu.nbody.checkpoint import (BLOCK_ROWS, CheckpointError, NpzRows, check_writable, save_rows,
                                       unusable, write_file)
from pympi_gpu.nbody.gravity.precision import PRECISIONS

__all__ = ["FORMAT", "FIELDS", "CheckpointError", "gather", "save", "load", "read_file", "write_file",
           "check_writable"]

FORMAT = "pympi_gpu.nbody.checkpoint/1"
FIELDS = ("x", "y", "z", "vx", "vy", "vz", "ax", "ay", "az", "m")
_DTYPES = {name: np.dtype(t) for name, t in PRECISIONS.items()}
_META_KEYS = {"format": str, "bodies": int, "step": int, "time": float, "seed": int, "init": str,
              "precision": str, "dt": float, "softening": float, "ranks": int}


def read_file(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and validate a whole checkpoint file (one process); raise :class:`CheckpointError` if unusable."""
    with NpzRows(path) as f:
        _validate_header(f)
        n = f.meta["bodies"]
        arrays = next(f.blocks(FIELDS, block=n))[1]
        _validate_rows(f.path, arrays)
    return f.meta, {k: a.copy() for k, a in arrays.items()}


def _validate_header(f: NpzRows) -> None:
    """The meta record and each array's shape and dtype (not the values)."""
    name, meta = f.path, f.meta
    if not isinstance(meta, dict):
        raise unusable(name, "the meta record is not a JSON object")
    if meta.get("format") != FORMAT:
        raise unusable(name, f"format {meta.get('format')!r}, expected {FORMAT!r}")
    for key, kind in _META_KEYS.items():
        value = meta.get(key)
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise unusable(name, f"meta field {key!r} is missing or not a {kind.__name__}")
    n = meta["bodies"]
    if n < 1 or meta["step"] < 0 or meta["ranks"] < 1:
        raise unusable(name, "meta bodies/step/ranks out of range")
    if meta["precision"] not in _DTYPES:
        raise unusable(name, f"unknown precision {meta['precision']!r}")
    if not (math.isfinite(meta["dt"]) and meta["dt"] > 0 and math.isfinite(meta["softening"])
            and meta["softening"] > 0):
        raise unusable(name, "dt and softening must be finite and > 0")
    dtype = _DTYPES[meta["precision"]]
    f.open(FIELDS, rows=n)
    for k in FIELDS:
        if f.shape[k] != (n,):
            raise unusable(name, f"array {k!r} has shape {f.shape[k]}, expected ({n},)")
        if f.dtype[k] != dtype:
            raise unusable(name, f"array {k!r} is {f.dtype[k]}, expected {dtype} ({meta['precision']})")


def _validate_rows(name: str, rows: dict[str, np.ndarray]) -> None:
    for k in FIELDS:
        if not np.isfinite(rows[k]).all():
            raise unusable(name, f"array {k!r} holds non-finite values")
    if not (rows["m"] > 0).all():  # a body of no mass, or a negative one, has no physics (nor virial ratio)
        raise unusable(name, "array 'm' holds masses that are not positive")


def gather(comm, local: dict[str, np.ndarray], fields=FIELDS) -> dict[str, np.ndarray] | None:
    """Every rank's block of ``fields`` on rank 0, in body order (None elsewhere); collective (Gatherv).

    For a trajectory frame; checkpoints stream through :func:`save` instead.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    counts = comm.allgather(int(local["x"].size))
    displs = [sum(counts[:r]) for r in range(size)]
    full = {}
    for f in fields:
        a = np.ascontiguousarray(local[f])
        out = np.empty(sum(counts), dtype=a.dtype) if rank == 0 else None
        comm.Gatherv(a, [out, (counts, displs)] if rank == 0 else None, root=0)
        full[f] = out
    return full if rank == 0 else None


def save(comm, path: str, local: dict[str, np.ndarray], meta: dict, block: int = BLOCK_ROWS) -> None:
    """Write every rank's bodies to ``path``, streamed through rank 0 in blocks; collective over comm.

    ``local`` maps each of :data:`FIELDS` to this rank's host array (its block,
    in rank order).  A failure on rank 0 raises :class:`CheckpointError` on
    every rank.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    counts = comm.allgather(int(local["x"].size))
    total = sum(counts)
    key = sum(counts[:rank]) + np.arange(counts[rank], dtype=np.int64)
    save_rows(comm, path, key, {f: local[f] for f in FIELDS}, total,
              dict(meta, format=FORMAT, bodies=total, ranks=size), block)


def load(comm, path: str, block: int = BLOCK_ROWS) -> tuple[dict, dict[str, np.ndarray]]:
    """Read ``path`` on rank 0 block by block and give every rank its block of bodies; collective over comm.

    The blocks follow the current rank count (which may differ from the
    writer's).  Returns ``(meta, local arrays)``; raises
    :class:`CheckpointError` on every rank if the file is unusable.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    meta, error, reader = None, None, None
    if rank == 0:
        try:
            reader = NpzRows(path)
            _validate_header(reader)
            meta = reader.meta
            if meta["bodies"] < size:
                raise CheckpointError(f"{path!r} holds {meta['bodies']} bodies, fewer than the {size} ranks")
        except CheckpointError as exc:
            error = str(exc)
            if reader is not None:
                reader.close()
    meta, error = comm.bcast((meta, error), root=0)
    if error:
        raise CheckpointError(error)
    n = meta["bodies"]
    counts, starts = block_counts(n, size), np.array(block_starts(n, size))
    dtype = _DTYPES[meta["precision"]]
    local = {f: np.empty(counts[rank], dtype=dtype) for f in FIELDS}

    def blocks():
        for first, rows in reader.blocks(FIELDS, block):
            _validate_rows(reader.path, rows)
            index = first + np.arange(rows["x"].size)
            yield np.searchsorted(starts, index, side="right") - 1, rows

    try:
        scatter_rows(comm, local, blocks() if rank == 0 else None, catch=(CheckpointError,), error=CheckpointError)
    finally:
        if reader is not None:
            reader.close()
    return meta, local
