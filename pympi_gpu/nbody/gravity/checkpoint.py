"""Checkpoints: the whole system in one ``.npz`` file, written atomically.

Rank 0 gathers every body and writes a temporary file in the target's
directory, flushes it to disk (``fsync``) and renames it over the target
(``os.replace``, atomic on POSIX), then syncs the directory: a reader sees the
old checkpoint or the new one, never half of one.  Loading validates
everything (format, sizes, precision, finite values) and reports one clear
error on every rank alike.

Contents: arrays ``x y z vx vy vz ax ay az m`` (N values each, in the run's
precision; the accelerations let a restart continue bit-identically without a
fresh force evaluation) and ``meta``, a JSON string (see :data:`FORMAT`).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np

from pympi_gpu.mpi.decomposition import block_counts, block_starts
from pympi_gpu.nbody.checkpoint import CheckpointError, check_writable, write_file
from pympi_gpu.nbody.gravity.precision import PRECISIONS

__all__ = ["FORMAT", "FIELDS", "CheckpointError", "gather", "save", "load", "read_file", "write_file",
           "check_writable"]

FORMAT = "pympi_gpu.nbody.checkpoint/1"
FIELDS = ("x", "y", "z", "vx", "vy", "vz", "ax", "ay", "az", "m")
_DTYPES = {name: np.dtype(t) for name, t in PRECISIONS.items()}
_META_KEYS = {"format": str, "bodies": int, "step": int, "time": float, "seed": int, "init": str,
              "precision": str, "dt": float, "softening": float, "ranks": int}


def read_file(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and validate a checkpoint file; raise :class:`CheckpointError` if it is unusable."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"restart file {str(path)!r} does not exist")
    if path.is_dir():
        raise CheckpointError(f"restart file {str(path)!r} is a directory")
    try:
        if not zipfile.is_zipfile(path):
            raise CheckpointError(f"{str(path)!r} is not a readable checkpoint: not an .npz archive "
                                  "(truncated, corrupt, or another kind of file)")
        with np.load(path, allow_pickle=False) as data:
            names = set(data.files)
            if "meta" not in names:
                raise CheckpointError(f"{str(path)!r} is not a pympi-nbody checkpoint (no 'meta' record)")
            meta = json.loads(str(data["meta"]))
            missing = [f for f in FIELDS if f not in names]
            if missing:
                raise CheckpointError(f"{str(path)!r} lacks the array(s) {', '.join(missing)}")
            arrays = {f: data[f] for f in FIELDS}
    except CheckpointError:
        raise
    except PermissionError:
        raise CheckpointError(f"restart file {str(path)!r} is not readable (permission denied)") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, json.JSONDecodeError, KeyError) as exc:
        raise CheckpointError(f"{str(path)!r} is not a readable checkpoint (truncated or corrupt?): "
                              f"{exc}") from None
    _validate(str(path), meta, arrays)
    return meta, arrays


def _validate(name: str, meta, arrays) -> None:
    if not isinstance(meta, dict):
        raise CheckpointError(f"{name!r}: the meta record is not a JSON object")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{name!r}: format {meta.get('format')!r}, expected {FORMAT!r}")
    for key, kind in _META_KEYS.items():
        value = meta.get(key)
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise CheckpointError(f"{name!r}: meta field {key!r} is missing or not a {kind.__name__}")
    n = meta["bodies"]
    if n < 1 or meta["step"] < 0 or meta["ranks"] < 1:
        raise CheckpointError(f"{name!r}: meta bodies/step/ranks out of range")
    if meta["precision"] not in _DTYPES:
        raise CheckpointError(f"{name!r}: unknown precision {meta['precision']!r}")
    if not (math.isfinite(meta["dt"]) and meta["dt"] > 0 and math.isfinite(meta["softening"])
            and meta["softening"] > 0):
        raise CheckpointError(f"{name!r}: dt and softening must be finite and > 0")
    dtype = _DTYPES[meta["precision"]]
    for f in FIELDS:
        a = arrays[f]
        if a.shape != (n,):
            raise CheckpointError(f"{name!r}: array {f!r} has shape {a.shape}, expected ({n},)")
        if a.dtype != dtype:
            raise CheckpointError(f"{name!r}: array {f!r} is {a.dtype}, expected {dtype} ({meta['precision']})")
        if not np.isfinite(a).all():
            raise CheckpointError(f"{name!r}: array {f!r} holds non-finite values")


def gather(comm, local: dict[str, np.ndarray], fields=FIELDS) -> dict[str, np.ndarray] | None:
    """Every rank's block of ``fields`` on rank 0, in body order (None elsewhere); collective (Gatherv)."""
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


def save(comm, path: str, local: dict[str, np.ndarray], meta: dict) -> None:
    """Gather every rank's bodies and write them to ``path``; collective over comm.

    ``local`` maps each of :data:`FIELDS` to this rank's host array (its block,
    in rank order).  A failure on rank 0 raises :class:`CheckpointError` on
    every rank.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    full = gather(comm, local)
    error = None
    if rank == 0:
        try:
            write_file(path, full, dict(meta, format=FORMAT, bodies=int(full["x"].size), ranks=size))
        except OSError as exc:
            error = f"cannot write checkpoint {path!r}: {exc.strerror or exc}"
    error = comm.bcast(error, root=0)
    if error:
        raise CheckpointError(error)


def load(comm, path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read ``path`` on rank 0 and give every rank its block; collective over comm.

    The blocks follow the current rank count (which may differ from the
    writer's).  Returns ``(meta, local arrays)``; raises
    :class:`CheckpointError` on every rank if the file is unusable.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    meta, arrays, error = None, None, None
    if rank == 0:
        try:
            meta, arrays = read_file(path)
            if meta["bodies"] < size:
                raise CheckpointError(f"{path!r} holds {meta['bodies']} bodies, fewer than the {size} ranks")
        except CheckpointError as exc:
            error = str(exc)
    meta, error = comm.bcast((meta, error), root=0)
    if error:
        raise CheckpointError(error)
    n = meta["bodies"]
    counts, starts = block_counts(n, size), block_starts(n, size)
    dtype = _DTYPES[meta["precision"]]
    local = {}
    for f in FIELDS:
        out = np.empty(counts[rank], dtype=dtype)
        comm.Scatterv([arrays[f], (counts, starts)] if rank == 0 else None, out, root=0)
        local[f] = out
    return meta, local
