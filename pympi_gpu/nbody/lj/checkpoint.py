"""LJ checkpoints: the whole system in one ``.npz`` file, in atom-id order.

The file is written by :func:`pympi_gpu.nbody.checkpoint.write_file` (a
temporary file, fsync, atomic rename) and refused with
:class:`~pympi_gpu.nbody.checkpoint.CheckpointError`.  Arrays: ``x v f``
``(N, 3)`` float64 and ``id`` ``(N,)`` int64 (1..N); ``meta`` a JSON string
(:data:`FORMAT`, the run's parameters, the step, the step-0 thermo).  A
gravity checkpoint given to ``--model lj`` (or the reverse) is refused by its
format string.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np

from pympi_gpu.nbody.checkpoint import CheckpointError, check_writable, write_file
from pympi_gpu.nbody.lj.domain import owner_coords, wrap

__all__ = ["FORMAT", "CheckpointError", "check_writable", "gather", "save", "read_file", "load"]

FORMAT = "pympi_gpu.nbody.lj.checkpoint/1"
_META = {"step": int, "cells": int, "atoms": int, "density": float, "temperature": float, "cutoff": float,
         "skin": float, "dt": float, "seed": int, "ranks": int}


def gather(comm, owned: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Every rank's atoms on rank 0, sorted by id (None elsewhere); collective over comm."""
    parts = comm.gather(owned, root=0)
    if comm.Get_rank() != 0:
        return None
    full = {k: np.concatenate([p[k] for p in parts]) for k in owned}
    order = np.argsort(full["id"], kind="stable")
    return {k: a[order] for k, a in full.items()}


def save(comm, path: str, owned: dict[str, np.ndarray], meta: dict) -> None:
    """Gather the system and write it to ``path``; collective over comm.

    A failure on rank 0 raises :class:`CheckpointError` on every rank.
    """
    full = gather(comm, owned)
    error = None
    if comm.Get_rank() == 0:
        try:
            write_file(path, full, dict(meta, format=FORMAT, ranks=comm.Get_size()))
        except OSError as exc:
            error = f"cannot write checkpoint {path!r}: {exc.strerror or exc}"
    error = comm.bcast(error, root=0)
    if error:
        raise CheckpointError(error)


def read_file(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and validate an LJ checkpoint; raise :class:`CheckpointError` if it is unusable."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"restart file {path!r} does not exist or is not a file")
    try:
        if not zipfile.is_zipfile(p):
            raise CheckpointError(f"{path!r} is not a readable checkpoint: not an .npz archive")
        with np.load(p, allow_pickle=False) as data:
            if "meta" not in data.files:
                raise CheckpointError(f"{path!r} is not a pympi-nbody checkpoint (no 'meta' record)")
            meta = json.loads(str(data["meta"]))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                got = meta.get("format") if isinstance(meta, dict) else None
                raise CheckpointError(f"{path!r}: format {got!r}, expected {FORMAT!r} (an LJ checkpoint)")
            missing = [k for k in ("x", "v", "f", "id") if k not in data.files]
            if missing:
                raise CheckpointError(f"{path!r} lacks the array(s) {', '.join(missing)}")
            arrays = {k: data[k] for k in ("x", "v", "f", "id")}
    except CheckpointError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, json.JSONDecodeError, KeyError) as exc:
        raise CheckpointError(f"{path!r} is not a readable checkpoint (truncated or corrupt?): {exc}") from None
    for key, kind in _META.items():
        value = meta.get(key)
        if isinstance(value, bool) or not (isinstance(value, kind) or (kind is float and isinstance(value, int))):
            raise CheckpointError(f"{path!r}: meta field {key!r} is missing or not a {kind.__name__}")
    n = meta["atoms"]
    if n != 4 * meta["cells"] ** 3 or meta["step"] < 0:
        raise CheckpointError(f"{path!r}: meta atoms/cells/step out of range")
    for k in ("x", "v", "f"):
        a = arrays[k]
        if a.shape != (n, 3) or a.dtype != np.float64 or not np.isfinite(a).all():
            raise CheckpointError(f"{path!r}: array {k!r} is not ({n}, 3) finite float64")
    if arrays["id"].shape != (n,) or not np.array_equal(arrays["id"], np.arange(1, n + 1)):
        raise CheckpointError(f"{path!r}: array 'id' is not 1..{n}")
    if not all(math.isfinite(meta[k]) and meta[k] > 0 for k in ("density", "cutoff", "dt")):
        raise CheckpointError(f"{path!r}: density, cutoff and dt must be finite and > 0")
    return meta, arrays


def load(comm, path: str, box_of, dims) -> tuple[dict, dict[str, np.ndarray]]:
    """Read ``path`` on rank 0 and give every rank the atoms of its brick; collective over comm.

    ``box_of(meta)`` is the box edge of the file's system, ``dims`` the rank
    grid and ``coords`` (from comm, a Cartesian communicator) this brick.
    Raises :class:`CheckpointError` on every rank if the file is unusable.
    """
    meta = arrays = error = None
    if comm.Get_rank() == 0:
        try:
            meta, arrays = read_file(path)
        except CheckpointError as exc:
            error = str(exc)
    meta, error = comm.bcast((meta, error), root=0)
    if error:
        raise CheckpointError(error)
    n = meta["atoms"]
    if comm.Get_rank() != 0:
        arrays = {k: np.empty((n, 3)) for k in ("x", "v", "f")}
        arrays["id"] = np.empty(n, np.int64)
    for k in ("x", "v", "f", "id"):
        comm.Bcast(arrays[k], root=0)
    box = box_of(meta)
    x = wrap(arrays["x"], box)
    coords = np.array(comm.Get_coords(comm.Get_rank()))
    mine = np.all(owner_coords(x, box, dims) == coords, axis=1)
    return meta, {k: a[mine].copy() for k, a in arrays.items()}
