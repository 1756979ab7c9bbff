"""LJ checkpoints: the whole system in one ``.npz`` file, in atom-id order.

Arrays: ``x v f`` ``(N, 3)`` float64 and ``id`` ``(N,)`` int64 (1..N); ``x0``
``(N, 3)``, the positions at the last rebuild (the Verlet lists' and the
displacement test's reference: ``x`` is ``x0`` plus the moves since, not
folded into the box), from which a restart rebuilds the run's lists, ghosts
and order of atoms before it moves the atoms to ``x``, so that it continues
bit for bit (a file without it, written before, restarts from ``x``);
``meta`` a JSON string (:data:`FORMAT`, the run's parameters, the step, the
step of the last rebuild, the step-0 thermo).  :func:`save` streams the owned atoms through rank 0 in id
order, a block of ids at a time (:func:`pympi_gpu.nbody.checkpoint.save_rows`:
temporary file, fsync, atomic rename); :func:`load` reads the file block by
block on rank 0 and scatters each block to the bricks that own its atoms.  No
rank holds more than its share plus a block.  Refused with
:class:`~pympi_gpu.nbody.checkpoint.CheckpointError`; a gravity checkpoint
given to ``--model lj`` (or the reverse) is refused by its format string.
"""

from __future__ import annotations

import math

import numpy as np

from pympi_gpu.mpi.blocks import scatter_rows
from pympi_gpu.nbody.checkpoint import (BLOCK_ROWS, CheckpointError, NpzRows, check_writable, save_rows,
                                       unusable)
from pympi_gpu.nbody.lj.box import Edges, edges, finite
from pympi_gpu.nbody.lj.domain import owner_coords, wrap

__all__ = ["FORMAT", "CheckpointError", "check_writable", "gather", "save", "read_file", "load", "box_of"]

FORMAT = "pympi_gpu.nbody.lj.checkpoint/1"
FIELDS = ("x", "v", "f", "id")
#: the positions at the last rebuild: an array of checkpoints written since issue 60, used where it is there
REFERENCE = "x0"
_META = {"step": int, "cells": int, "atoms": int, "density": float, "temperature": float, "cutoff": float,
         "skin": float, "dt": float, "seed": int, "ranks": int}


def gather(comm, owned: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Every rank's atoms on rank 0, sorted by id (None elsewhere); collective over comm.

    For trajectory frames and verification; checkpoints stream through :func:`save` instead.
    """
    parts = comm.gather(owned, root=0)
    if comm.Get_rank() != 0:
        return None
    full = {k: np.concatenate([p[k] for p in parts]) for k in owned}
    order = np.argsort(full["id"], kind="stable")
    return {k: a[order] for k, a in full.items()}


def save(comm, path: str, owned: dict[str, np.ndarray], meta: dict, block: int = BLOCK_ROWS,
         by_id: bool = True) -> None:
    """Write every rank's owned atoms to ``path`` in id order; collective over comm.

    ``by_id=False`` writes them in rank order instead, as they are (for a
    blown-up state whose atoms may be lost or held twice: for inspection, not
    for ``--restart``).  A failure on rank 0 raises :class:`CheckpointError`
    on every rank.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    counts = comm.allgather(int(owned["id"].size))
    total = sum(counts)
    key = owned["id"] - 1 if by_id else sum(counts[:rank]) + np.arange(counts[rank], dtype=np.int64)
    names = FIELDS + ((REFERENCE,) if REFERENCE in owned else ())
    save_rows(comm, path, key, {k: owned[k] for k in names}, total, dict(meta, format=FORMAT, ranks=size), block)


def read_file(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and validate a whole LJ checkpoint (one process); raise :class:`CheckpointError` if unusable."""
    with NpzRows(path) as f:
        names = _validate_header(f)
        arrays = next(f.blocks(names, block=f.meta["atoms"]))[1]
        _validate_rows(f.path, 0, arrays, _reach(f.meta))
    return f.meta, {k: a.copy() for k, a in arrays.items()}


def _reach(meta: dict) -> float:
    """How far an atom can be from its position at the last rebuild: the cutoff plus the skin (a run stops
    before an atom moves farther than its ghosts reach)."""
    return meta["cutoff"] + meta["skin"]


def _validate_header(f: NpzRows) -> tuple[str, ...]:
    """The meta record and each array's shape and dtype (not the values); returns the arrays to read."""
    path, meta = f.path, f.meta
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise unusable(path, f"format {got!r}, expected {FORMAT!r} (an LJ checkpoint)")
    for key, kind in _META.items():
        value = meta.get(key)
        if isinstance(value, bool) or not (isinstance(value, kind) or (kind is float and isinstance(value, int))):
            raise unusable(path, f"meta field {key!r} is missing or not a {kind.__name__}")
    n = meta["atoms"]
    if "init" in meta:  # a run started from a file: its atoms and box are the file's
        init, box = meta["init"], meta.get("box")
        if not (isinstance(init, dict) and isinstance(init.get("spec"), str) and init.get("kind") in
                ("lammps", "extxyz", "gsd") and isinstance(init.get("velocities"), bool)):
            raise unusable(path, f"meta field 'init' is not a record of the file the run started from: {init!r}")
        if recorded_box(box) is None:
            raise unusable(path, "meta field 'box' is missing or not three finite edges > 0 (or one, a cube's)")
        if meta["cells"] != 0 or n < 1 or meta["step"] < 0:
            raise unusable(path, "meta atoms/cells/step out of range")
    elif meta["cells"] < 1 or n != 4 * meta["cells"] ** 3 or meta["step"] < 0:
        raise unusable(path, "meta atoms/cells/step out of range")
    if not all(math.isfinite(meta[k]) and meta[k] > 0 for k in ("density", "cutoff", "dt")):
        raise unusable(path, "density, cutoff and dt must be finite and > 0")
    built = meta.get("built_at", 0)
    if isinstance(built, bool) or not isinstance(built, int) or not 0 <= built <= meta["step"]:
        raise unusable(path, "meta field 'built_at' is not a step from 0 to the checkpoint's")
    if not math.isfinite(meta["skin"]) or meta["skin"] < 0:  # worded as the command line's refusal of --skin
        skin = meta["skin"]
        raise unusable(path, f"its --skin {skin!r} is refused: {skin!r} must be " + (
            "finite" if skin >= 0 else ">= 0"))
    names = FIELDS + ((REFERENCE,) if f.holds(REFERENCE) else ())
    f.open(names, rows=n)
    for k in ("x", "v", "f", REFERENCE):
        if k not in names:
            continue
        if f.shape[k] != (n, 3) or f.dtype[k] != np.float64:
            raise unusable(path, f"array {k!r} is not ({n}, 3) finite float64")
    if f.shape["id"] != (n,) or f.dtype["id"].kind not in "iu":
        raise unusable(path, f"array 'id' is not 1..{n}")
    return names


def _validate_rows(path: str, first: int, rows: dict[str, np.ndarray], reach: float) -> None:
    """The values of rows ``first..``: finite, the ids in order, the positions within ``reach`` of those at
    the last rebuild."""
    for k in ("x", "v", "f", REFERENCE):
        if k in rows and not np.isfinite(rows[k]).all():
            raise unusable(path, f"array {k!r} holds non-finite values")
    m = rows["id"].size
    if not np.array_equal(rows["id"], np.arange(first + 1, first + m + 1)):
        raise unusable(path, "array 'id' is not 1..N in order")
    if REFERENCE in rows and m and np.abs(rows["x"] - rows[REFERENCE]).max() > reach:
        raise unusable(path, f"array {REFERENCE!r} is not where the atoms were at the last rebuild (farther "
                             f"than the cutoff + skin, {reach:.4g}, from 'x')")


def load(comm, path: str, box_of, dims, block: int = BLOCK_ROWS) -> tuple[dict, dict[str, np.ndarray]]:
    """Read ``path`` block by block on rank 0 and give every rank the atoms of its brick; collective over comm.

    ``box_of(meta)`` is the box of the file's system (its three edges), ``dims`` the rank
    grid and comm a Cartesian communicator whose coordinates name the bricks.
    Each rank gets its atoms in id order, those of its brick at the last
    rebuild (``x0``) where the file says (else at ``x``), so that the ranks
    own what they owned then.  Raises :class:`CheckpointError` on every rank if
    the file is unusable.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    meta = counts = error = f = names = None
    if rank == 0:
        ranks_of = np.empty(tuple(int(d) for d in dims), np.int64)  # brick coordinates -> rank
        for c in np.ndindex(*ranks_of.shape):
            ranks_of[c] = comm.Get_cart_rank(list(c))
        try:
            f = NpzRows(path)  # a first pass over the positions: how many atoms each brick gets
            names = _validate_header(f)
            owner = _owner(names)
            meta, box = f.meta, _finite_box(path, box_of, f.meta)
            counts = np.zeros(size, np.int64)
            for first, rows in f.blocks((owner,), block):
                if not np.isfinite(rows[owner]).all():
                    raise unusable(path, f"array {owner!r} holds non-finite values")
                counts += np.bincount(_dest(rows[owner], box, dims, ranks_of), minlength=size)
            # the second pass reads the same file: were the path replaced between the passes (a run
            # checkpointing there), other positions would go to other bricks than counted
            f = f.again()
            if _validate_header(f) != names:
                raise unusable(path, "its arrays changed between two reads")
        except CheckpointError as exc:
            error = str(exc)
            if f is not None:
                f.close()
                f = None
    meta, names, error = comm.bcast((meta, names, error), root=0)
    if error:
        raise CheckpointError(error)
    mine = comm.scatter(counts.tolist() if rank == 0 else None, root=0)
    local = {k: np.empty((mine, 3)) for k in names if k != "id"}
    local["id"] = np.empty(mine, np.int64)
    box, reach = box_of(meta), _reach(meta)

    def blocks(f):
        for first, rows in f.blocks(names, block):
            _validate_rows(path, first, rows, reach)
            yield _dest(rows[_owner(names)], box, dims, ranks_of), rows

    try:
        scatter_rows(comm, local, blocks(f) if rank == 0 else None, catch=(CheckpointError,), error=CheckpointError)
    finally:
        if f is not None:
            f.close()
    return meta, local


def box_of(meta: dict) -> Edges:
    """The box of a checkpoint's system, its three edges: a file start's recorded box, else its lattice's cube."""
    from pympi_gpu.nbody.lj.config import LjConfig

    if "init" in meta:
        return recorded_box(meta["box"])
    return LjConfig(cells=meta["cells"], density=meta["density"]).box


def recorded_box(value) -> Edges | None:
    """The edges of a meta record's ``box``: three finite numbers > 0, or one (a cube's edge, as checkpoints
    written before the box had three edges hold it); None where it is neither."""
    if isinstance(value, (list, tuple)) and len(value) == 3:
        values = list(value)
    elif isinstance(value, (int, float)):
        values = [value] * 3
    else:
        return None
    if any(isinstance(e, bool) or not isinstance(e, (int, float)) for e in values):
        return None
    box = edges(values)
    return box if finite(box) else None


def _owner(names) -> str:
    """The positions that say which brick owns an atom: those of the last rebuild, where the file has them."""
    return REFERENCE if REFERENCE in names else "x"


def _finite_box(path: str, box_of, meta: dict) -> Edges:
    """The box of a checkpoint's system, refused where its density gives none (an overflow, a zero edge)."""
    try:
        box = edges(box_of(meta))
    except (OverflowError, ZeroDivisionError):
        box = (math.inf,) * 3
    if not finite(box):
        raise unusable(path, f"its density {meta['density']!r} gives no finite box")
    return box


def _dest(x: np.ndarray, box, dims, ranks_of: np.ndarray) -> np.ndarray:
    """The rank owning each position (folded into the box first)."""
    c = owner_coords(wrap(x, box), box, dims)
    return ranks_of[c[:, 0], c[:, 1], c[:, 2]]
