"""A start from a file (``--init``): every rank gets its brick's atoms, no rank the whole system.

As LAMMPS's ``read_data``: one rank reads the file, a round of rows at a
time, and every rank keeps the atoms its brick owns; here the reading rank
deals each round's rows to all the ranks (text lines, or a GSD chunk's
rows), each parses its part (:mod:`~pympi_gpu.nbody.lj.readers`) and sends
every atom to the rank whose brick holds its folded position
(:func:`~pympi_gpu.mpi.blocks.exchange_rows`).  Rank ``r`` also keeps the
directory of the ids ``r N / P`` to ``(r + 1) N / P``: which rank owns each,
and on which line it was read, so that an id read twice is found (and named,
with both lines) without any rank holding all ids, and a LAMMPS ``Velocities``
row, keyed by id, is sent on to the atom's rank.  Two atoms at one place are
found on the rank that owns them (their folded positions are the same, so
their brick is).

The state is the same at any rank count: positions folded as
:func:`~pympi_gpu.nbody.lj.domain.wrap` folds them, each rank's atoms in id
order, and velocities the file's, or drawn as the lattice start draws them
(:func:`~pympi_gpu.nbody.lj.system.drawn_velocities`: the ids run 1..N, and
atom ``i``'s velocity at a temperature and seed is the lattice start's atom
``i``'s).  A refusal (:class:`~pympi_gpu.nbody.lj.readers.InitError`) is
raised on every rank, with the first rank's message: every check made on
some ranks is agreed before anyone goes on.
"""

from __future__ import annotations

import numpy as np

from pympi_gpu.mpi.blocks import exchange_rows
from pympi_gpu.nbody.lj import readers
from pympi_gpu.nbody.lj.domain import owner_coords, wrap
from pympi_gpu.nbody.lj.readers import Block, Header, InitError

__all__ = ["read_header", "load", "InitError", "read_bytes"]


def read_header(comm, text: str) -> Header:
    """The header of ``--init text`` (``PATH`` or ``PATH@FRAME``), read and checked by rank 0 and handed to
    every rank; collective over comm.  :class:`InitError` on every rank if the file cannot start a run."""
    header = error = None
    if comm.Get_rank() == 0:
        try:
            reader = readers.open_file(readers.parse_spec(text))
            header = reader.header
            reader.close()
        except InitError as exc:
            error = str(exc)
        except OSError as exc:
            error = f"--init {text!r} cannot be read: {exc.strerror or exc}"
    header, error = comm.bcast((header, error), root=0)
    if error:
        raise InitError(error)
    return header


def read_bytes(header: Header, ranks: int) -> float:
    """The most bytes a rank holds while the file is read, besides its share of the atoms: the reading rank's round
    (its text or rows, and the parts pickled to send them), a part parsed and on its way, the directory."""
    line = 110.0 if header.kind != "gsd" else 40.0  # a row as text (17 digits a number) or as GSD's float32s
    round_rows = min(readers.ROUND_ROWS, header.atoms)
    return round_rows * 3 * line + 4 * 80.0 * round_rows / ranks + 24.0 * header.atoms / ranks


def _agree(comm, error: str | None) -> None:
    """Raise :class:`InitError` on every rank with the first rank's error, if any rank has one; collective."""
    errors = comm.allgather(error)
    first = next((e for e in errors if e), None)
    if first:
        raise InitError(first)


def _ranks_of(cart) -> np.ndarray:
    """The rank of every brick, by its grid coordinates."""
    dims = tuple(int(d) for d in cart.Get_topo()[0])
    ranks = np.empty(dims, np.int64)
    for c in np.ndindex(*dims):
        ranks[c] = cart.Get_cart_rank(list(c))
    return ranks


class _Directory:
    """The ids ``base..base + span - 1`` this rank answers for: the rank owning each, the line it was read on, and
    how many velocities it was given."""

    def __init__(self, comm, atoms: int):
        self.comm, self.atoms = comm, atoms
        rank, size = comm.Get_rank(), comm.Get_size()
        self.base = rank * atoms // size + 1
        span = (rank + 1) * atoms // size + 1 - self.base
        self.owner = np.full(span, -1, np.int32)
        self.row = np.zeros(span, np.int64)
        self.velocity_row = np.full(span, -1, np.int64)

    def of(self, ids: np.ndarray) -> np.ndarray:
        """The rank answering for each id: the last ``r`` whose first id ``r N // P + 1`` is at most it."""
        return (ids * self.comm.Get_size() - 1) // self.atoms

    def enter(self, header: Header, owned: dict, chunk: int = 1 << 16) -> None:
        """Every rank's atoms (``id``, ``row``) entered with their owner, ``chunk`` rows of each rank at a time:
        an id read twice is refused, naming its rows; collective."""
        from mpi4py import MPI

        me, ids, rows = self.comm.Get_rank(), owned["id"], owned["row"]
        error = None
        for first in range(0, self.comm.allreduce(ids.size, op=MPI.MAX) or 1, chunk):
            part = slice(first, first + chunk)
            got = exchange_rows(self.comm, self.of(ids[part]),
                                {"id": ids[part], "row": rows[part], "owner": np.full(ids[part].size, me, np.int32)})
            if error is None:
                error = self._enter(header, got)
        _agree(self.comm, error)

    def _enter(self, header: Header, got: dict) -> str | None:
        k = got["id"] - self.base
        seen = np.flatnonzero(self.owner[k] >= 0)
        order = np.argsort(k, kind="stable")
        again = np.flatnonzero(k[order][1:] == k[order][:-1])
        if seen.size or again.size:
            i, j = (seen[0], None) if seen.size else (order[again[0]], order[again[0] + 1])
            a, b = sorted((int(self.row[k[i]] if j is None else got["row"][j]), int(got["row"][i])))
            unit = "particles" if header.kind == "gsd" else "lines"
            return (f"--init {header.name}: atom id {int(got['id'][i])} is given twice ({unit} {a:,} and {b:,}): "
                    "each atom needs an id of its own")
        self.owner[k] = got["owner"]
        self.row[k] = got["row"]
        return None

    def route_velocities(self, header: Header, block: Block) -> dict:
        """A round of velocity rows (each rank's part) sent to the ranks of their atoms, through the directory; a
        row for an atom given one already is refused, naming both lines; collective."""
        got = exchange_rows(self.comm, self.of(block.ids), {"id": block.ids, "v": block.v, "row": block.rows})
        k = got["id"] - self.base
        error = None
        order = np.argsort(k, kind="stable")
        ks = k[order]
        seen = self.velocity_row[k] >= 0
        again = np.flatnonzero(ks[1:] == ks[:-1]) if ks.size > 1 else np.zeros(0, np.int64)
        if seen.any():
            i = int(np.flatnonzero(seen)[0])
            a, b = int(self.velocity_row[k[i]]), int(got["row"][i])
            error = f"atom {int(got['id'][i])}'s velocity is given twice (lines {a:,} and {b:,})"
        elif again.size:
            i, j = order[again[0]], order[again[0] + 1]
            a, b = sorted((int(got["row"][i]), int(got["row"][j])))
            error = f"atom {int(got['id'][i])}'s velocity is given twice (lines {a:,} and {b:,})"
        else:
            self.velocity_row[k] = got["row"]
        _agree(self.comm, error and f"--init {header.name}: {error}")
        return exchange_rows(self.comm, self.owner[k], {"id": got["id"], "v": got["v"]})


def load(cart, text: str, header: Header, *, rows: int | None = None) -> dict[str, np.ndarray]:
    """This rank's atoms of ``--init text``: ``{"x", "v", "id"}`` in id order, positions folded into
    the box (``[0, L_d)`` along each axis ``d``), ``v`` None where the file gives none; collective over the Cartesian communicator ``cart``,
    whose coordinates name the bricks.

    ``header`` is :func:`read_header`'s; ``rows`` the rows read in one round (default
    :data:`~pympi_gpu.nbody.lj.readers.ROUND_ROWS`).  Raises :class:`InitError` on every rank if the file
    cannot start a run.
    """
    reader = pieces = error = None
    if cart.Get_rank() == 0:
        try:
            reader = readers.open_file(readers.parse_spec(text))
            if reader.header != header:
                raise InitError(f"--init {header.name} changed while it was read")
            pieces = reader.pieces(cart.Get_size(), rows or readers.ROUND_ROWS)
        except InitError as exc:
            error = str(exc)
        except OSError as exc:
            error = f"--init {text!r} cannot be read: {exc.strerror or exc}"
    try:
        _agree(cart, error)
        mine = _rounds(cart, header, pieces)
    finally:
        if reader is not None:
            reader.close()
    mine.setdefault("v", None)
    _agree(cart, _one_place(header, mine, mine.pop("row")))
    return mine


def _rounds(cart, header: Header, pieces) -> dict:
    """Every round of the file (rank 0's ``pieces``): each rank parses its part and sends its atoms to their
    bricks, a LAMMPS section's velocities through the directory, straight into their atoms' rows.  This rank's
    atoms in id order (``x``, ``id``, ``row``, and ``v`` where the file gives them); collective."""
    ranks_of = _ranks_of(cart)
    dims, lo, box = ranks_of.shape, np.asarray(header.lo, np.float64), header.box
    owned, mine, directory = [], None, None
    while (block := _next_block(cart, header, pieces)) is not None:
        if block.x is not None:  # atoms (with their velocities, where the format puts them on the same row)
            x = wrap(block.x - lo, box)
            c = owner_coords(x, box, dims)
            arrays = {"x": x, "id": block.ids, "row": block.rows}
            if block.v is not None:
                arrays["v"] = block.v
            owned.append(exchange_rows(cart, ranks_of[c[:, 0], c[:, 1], c[:, 2]], arrays))
        else:  # a LAMMPS Velocities section's rows, keyed by id: through the directory to their atoms
            if directory is None:
                mine = _in_id_order(_joined(owned))
                directory = _Directory(cart, header.atoms)
                directory.enter(header, mine)
                mine["v"] = np.zeros_like(mine["x"])  # every row written: N rows, none twice (the directory's)
            got = directory.route_velocities(header, block)
            mine["v"][np.searchsorted(mine["id"], got["id"])] = got["v"]
    if mine is None:
        mine = _in_id_order(_joined(owned))
        _Directory(cart, header.atoms).enter(header, mine)
    return mine


def _in_id_order(atoms: dict) -> dict:
    """``atoms``' rows sorted by id, a column at a time (each unsorted column freed as it goes)."""
    order = np.argsort(atoms["id"], kind="stable")
    for name in list(atoms):
        atoms[name] = atoms[name][order]
    return atoms


def _next_block(cart, header: Header, pieces) -> Block | None:
    """This rank's part of the next round, parsed and checked (None: no round is left); a refusal on any rank,
    rank 0's reading included, on every rank; collective."""
    message = None
    if cart.Get_rank() == 0:
        size = cart.Get_size()
        try:
            message = [("piece", p) for p in next(pieces)]
        except StopIteration:
            message = [("done", None)] * size
        except InitError as exc:
            message = [("error", str(exc))] * size
        except OSError as exc:
            message = [("error", f"--init {header.name} cannot be read: {exc.strerror or exc}")] * size
    status, payload = cart.scatter(message, root=0)
    if status == "error":
        raise InitError(payload)
    if status == "done":
        return None
    error = block = None
    try:
        block = readers.parse(header, payload)
        readers.check_rows(header, block)
    except InitError as exc:
        error = str(exc)
    _agree(cart, error)
    return block


def _joined(parts: list[dict]) -> dict:
    """The rows of ``parts`` (dicts of arrays) one after the other; ``parts`` is emptied a column at a time, so
    that the rows are held about once, not twice."""
    if not parts:
        return {"x": np.zeros((0, 3)), "id": np.zeros(0, np.int64), "row": np.zeros(0, np.int64)}
    out = {}
    for name in list(parts[0]):
        out[name] = np.concatenate([p.pop(name) for p in parts])
    parts.clear()
    return out


def _one_place(header: Header, atoms: dict, rows: np.ndarray) -> str | None:
    """Two of this rank's atoms at one place (their folded positions equal), or None."""
    x = atoms["x"]
    if x.shape[0] < 2:
        return None
    order = np.lexsort((x[:, 2], x[:, 1], x[:, 0]))
    alike = np.ones(x.shape[0] - 1, bool)
    for c in range(3):  # a column at a time: a rank holds little besides its atoms
        column = x[order, c]
        alike &= column[1:] == column[:-1]
    same = np.flatnonzero(alike)
    if not same.size:
        return None
    i, j = order[same[0]], order[same[0] + 1]
    unit = "particles" if header.kind == "gsd" else "lines"
    a, b = sorted(((int(atoms["id"][i]), int(rows[i])), (int(atoms["id"][j]), int(rows[j]))))
    where = ", ".join(f"{float(c):.17g}" for c in x[i])
    return (f"--init {header.name}: atoms {a[0]} and {b[0]} ({unit} {a[1]:,} and {b[1]:,}) are at one place "
            f"({where} in the box): the force between them is infinite")
