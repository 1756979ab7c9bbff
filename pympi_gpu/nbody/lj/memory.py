"""How much host memory an LJ run needs on each rank, so that a run too large is refused before it allocates.

What a rank holds (:class:`~pympi_gpu.nbody.lj.system.LjSystem`), for a brick
of ``atoms / ranks`` atoms of the lattice:

- each owned atom: velocity, reference position of the rebuild test (24 bytes
  each), id (8), the counts of its two Verlet lists (16) and the lists
  themselves, int32 rows of ``cap + 1`` entries each, with the half lists'
  ``cap = 0.75 shell + 16`` for ``shell = 4/3 pi (cutoff + skin)^3 density``
  neighbours (the full lists of a multi-threaded rank hold more);
- each owned atom and each ghost (the atoms within ``cutoff + skin`` of the
  brick): position, force (24 each), id (8), and while the lists are built its
  cell, its place in the cell order, a sorted copy and the search's copy of
  the stencils (8 + 8 + 32 + 32): 136 bytes;
- each cell of the neighbour search's grid (cells of at least half the
  ``cutoff + skin``, over the brick and its halo): 24 bytes.

On the GPU backend the lists and the state live in device memory and the
host holds the initial atoms (56 bytes an atom).  The estimate is a floor:
numba's, MPI's and Python's own buffers come on top.  It is pure arithmetic:
the refusal comes at once, whatever the size (``pympi-nbody 1e9 --model lj``).

The device's buffers (:class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms`) are
made once at the first capacities :func:`first_rows` and :func:`cell_width`
give (the lists' widths are the cell grid's, :class:`~pympi_gpu.nbody.lj.domain.CellGrid`),
which :func:`gpu_need` prices: each owned row its velocity, reference position, a
second set of rows to sort from, the per-atom energy and virial, its cell, a
copy of its state kept for the steps made again, and its two Verlet list rows
(int32); each row, owned or ghost, its position, force, id and the ghosts'
plan (``GPU_ROW``); each cell two buckets of int32 rows; where a stage
travels, its messages.  The CUDA context and CuPy's pool come on top.
"""

from __future__ import annotations

import dataclasses
import math

from pympi_gpu.nbody.lj.box import text
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.domain import CellGrid, brick_of
from pympi_gpu.nbody.memory import available_bytes, human_bytes

__all__ = ["Need", "need", "too_large", "READ", "first_rows", "cell_width", "gpu_need", "gpu_too_large"]

#: bytes of each owned atom besides its lists, of each atom in the brick or its halo, of each search cell
OWNED, HELD, CELL = 24 + 24 + 8 + 16, 24 + 24 + 8 + 8 + 8 + 32 + 32, 24
#: bytes an atom costs the host on the GPU backend: its initial position, velocity and id
GPU_HOST = 24 + 24 + 8
#: bytes each owned atom's rows hold while a file is read besides its state (position, velocity, id, line, and
#: their copies while the rounds are joined and sorted)
READ = 2 * (24 + 24 + 8 + 8)
#: device bytes of each owned row besides its lists (v, x0, the sort's x v f id, e, w, cell, the list counts,
#: the kept x v f x0 id), of each row owned or ghost (x, f, id, its faces, the ghosts' sources and shifts, the
#: class counts' share), of each row of a travelling stage's messages (and each owned row's in a migration)
GPU_OWNED = 24 + 24 + 3 * 24 + 8 + 8 + 8 + 8 + 16 + 4 * 24 + 8
GPU_ROW = 24 + 24 + 8 + 4 + 8 + 8 + 24 + 4
GPU_MESSAGE_ROW, GPU_MIGRATING = 64, 80


@dataclasses.dataclass(frozen=True)
class Need:
    """One rank's floor, in bytes and in the counts it comes from."""

    owned: float
    ghosts: float
    cells: float
    list_entries: int
    bytes: float


def need(config: LjConfig, dims, gpu: bool = False) -> Need:
    """The host bytes the rank with the average brick of a ``dims`` grid needs (see the module's docstring)."""
    ranks = math.prod(int(d) for d in dims)
    owned = config.atoms / ranks
    reach = config.cutneigh
    widths = [e / int(d) for e, d in zip(config.box, dims)]
    ghosts = config.density * (math.prod(w + 2 * reach for w in widths) - math.prod(widths))
    cells = math.prod(max(1, math.floor(2 * (w + 2 * reach) / reach)) for w in widths)
    cap = int(0.75 * 4.0 / 3.0 * math.pi * reach ** 3 * config.density) + 16
    if gpu:
        total = GPU_HOST * owned
    else:
        total = owned * (OWNED + 2 * 4 * (cap + 1)) + HELD * (owned + ghosts) + CELL * cells
    return Need(owned=owned, ghosts=ghosts, cells=cells, list_entries=cap + 1, bytes=total)


def too_large(config: LjConfig, dims, ranks_on_node: int, gpu: bool = False,
              available: int | None = None, reading: float = 0.0) -> str | None:
    """Why this run does not fit in this node's memory (None if it does, or if the node does not say).

    ``ranks_on_node`` ranks share this node's ``available`` bytes (default:
    its MemAvailable).  ``reading``: what a rank holds besides its atoms while
    a file is read (:func:`~pympi_gpu.nbody.lj.start.read_bytes`), and each
    atom then its :data:`READ` bytes of rows on their way to their brick.
    """
    available = available_bytes() if available is None else available
    if available is None:
        return None
    n = need(config, dims, gpu)
    if reading:
        n = dataclasses.replace(n, bytes=n.bytes + reading + READ * n.owned)
    node = n.bytes * ranks_on_node
    if node <= available:
        return None
    atoms, grid = config.atoms, "x".join(str(int(d)) for d in dims)
    if CELL * n.cells > n.bytes / 2:  # the search grid dominates: say what makes it so fine
        why = (f"{n.cells:.3g} cells of the neighbour search per rank: cutoff + skin {config.cutneigh:g} sigma "
               f"in a box of {text(config.box, '.4g')} sigma; raise --cutoff/--skin or --density")
    elif gpu:
        why = f"{GPU_HOST} bytes an atom on the host" + (" and its rows while the file is read" if reading else "")
    else:
        why = (f"{n.bytes / (n.owned or 1):.3g} bytes an atom with its ghosts and Verlet lists of "
               f"{n.list_entries:.3g} entries; use fewer atoms or more nodes")
    return (f"{atoms:,} atoms ({grid} rank grid) need about {human_bytes(node)} of memory on this node "
            f"({ranks_on_node} rank(s) x {human_bytes(n.bytes)}; {why}), but it has {human_bytes(available)} "
            "available")


def first_rows(config: LjConfig, owned: float, widths, travels: bool) -> tuple[int, int]:
    """The first capacities of a brick's device buffers: ``(atoms, rows)``, its owned rows (a quarter to spare
    where atoms migrate) and its rows owned and ghosts (the ghosts within ``cutoff + skin`` of a brick of these
    ``widths`` at the config's density, a quarter to spare)."""
    atoms = int(owned) + int(owned) // 4 + 64 if travels else max(int(owned), 1)
    ghosts = config.density * (math.prod(w + 2 * config.cutneigh for w in widths) - math.prod(widths))
    return atoms, atoms + int(1.25 * ghosts) + 64


def cell_width(config: LjConfig, grid) -> int:
    """The first width of a cell's bucket: the atoms a cell of the search grid (a
    :class:`~pympi_gpu.nbody.lj.domain.CellGrid`) holds on average at the config's density, twice over and
    some: a liquid's cells seldom hold more (a full one is grown)."""
    mean = config.density * math.prod(1.0 / float(grid.inv[d]) for d in range(3))
    return int(2.0 * mean + 4.0 * math.sqrt(mean)) + 8


def gpu_need(config: LjConfig, dims) -> float:
    """The device bytes of the rank with the first brick of a ``dims`` grid, with the lists ``config`` asks for
    (see the module's docstring)."""
    brick = brick_of(config.box, dims, (0, 0, 0))
    grid = CellGrid.of(config, brick)
    travels = math.prod(int(d) for d in dims) > 1
    atoms, rows = first_rows(config, config.atoms / math.prod(int(d) for d in dims),
                             [brick.hi[d] - brick.lo[d] for d in range(3)], travels)
    total = atoms * (GPU_OWNED + 4 * sum(grid.capacity)) + rows * GPU_ROW + \
        grid.cells * (2 * 4 * cell_width(config, grid) + 24)
    if travels:
        total += rows * GPU_MESSAGE_ROW + atoms * GPU_MIGRATING
    return float(total)


def gpu_too_large(config: LjConfig, dims, sharing: int, free: int | None) -> str | None:
    """Why this run's buffers do not fit this rank's GPU (None if they do, or if ``free`` is not known):
    ``sharing`` ranks use the GPU, which has ``free`` bytes free."""
    if free is None:
        return None
    each = gpu_need(config, dims)
    if each * sharing <= free:
        return None
    grid = "x".join(str(int(d)) for d in dims)
    owned = config.atoms / math.prod(int(d) for d in dims)
    return (f"{config.atoms:,} atoms ({grid} rank grid) need about {human_bytes(each * sharing)} of GPU memory "
            f"on this GPU ({sharing} rank(s) x {human_bytes(each)}, {each / max(owned, 1):.3g} bytes an atom with "
            f"its ghosts and Verlet lists), but it has {human_bytes(free)} free; use fewer atoms or more GPUs")
