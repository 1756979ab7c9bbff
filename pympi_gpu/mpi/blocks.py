"""Rows of a distributed array moved to and from one rank in bounded blocks.

A checkpoint of ``N`` rows spread over the ranks has to pass through one
writer, and back from one reader, without any rank ever holding all ``N``
rows (past ~27 M atoms a gathered system no longer fits the 2 GiB count limit
of MPI-3 libraries, and long before that rank 0's memory).  Here:

* :func:`gather_rows` streams every rank's rows to the root in the order of a
  global key ``0..N-1``, one block of at most ``block`` keys at a time (one
  ``Gatherv`` per block);
* :func:`scatter_rows` streams blocks from the root to the ranks each row
  names (one ``Scatterv`` per block and array) into arrays they allocated
  for their own count;
* :func:`exchange_rows` sends every rank's rows to the ranks each row names
  (one ``Alltoallv`` per array): a file read in parts by all ranks, each
  part's atoms sent to the bricks that own them.

Besides its own rows, a rank holds at most a block's worth: the root the
received block and the block in key order, the others the part of a block
they send or receive.  mpi4py infers the datatypes from the NumPy buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

__all__ = ["gather_rows", "scatter_rows", "exchange_rows"]


def _counts_and_displs(counts, row: int) -> tuple[list[int], list[int]]:
    elements = [int(c) * row for c in counts]
    displs = np.concatenate(([0], np.cumsum(elements[:-1], dtype=np.int64))).tolist() if elements else []
    return elements, displs


def gather_rows(comm, key: np.ndarray, array: np.ndarray, total: int, block: int,
                sink: Callable[[int, np.ndarray], None], root: int = 0) -> None:
    """Stream the rows of ``array`` to ``root`` in the order of ``key``; collective over comm.

    Parameters
    ----------
    key : ``(n,)`` integers, the global index in ``[0, total)`` of each local row;
        over all ranks every index occurs exactly once.
    array : ``(n, ...)`` this rank's rows (same dtype and row shape on every rank).
    total, block : the number of global rows, and the most rows moved at once.
    sink : on ``root``, called as ``sink(start, rows)`` for the rows of keys
        ``[start, start + len(rows))``, block after block in order.

    Raises on ``root`` only, after the last block (so no rank is left waiting in
    a collective): :class:`ValueError` if a block's keys are not each present
    exactly once over the ranks, or whatever ``sink`` raised; ``sink`` is not
    called again after it has raised.  The caller agrees the outcome on all
    ranks.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    rank = comm.Get_rank()
    key = np.asarray(key, dtype=np.int64)
    if key.size < 2 or bool(np.all(key[1:] > key[:-1])):  # already in order (a block split): no copies
        order, sorted_key = None, key
    else:
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
    row_shape = array.shape[1:]
    row = int(np.prod(row_shape, dtype=np.int64))
    failure = None
    for start in range(0, total, block):
        stop = min(start + block, total)
        lo, hi = np.searchsorted(sorted_key, [start, stop])
        counts = comm.gather(int(hi - lo), root=root)
        send_keys = np.ascontiguousarray(sorted_key[lo:hi])
        send_rows = np.ascontiguousarray(array[lo:hi] if order is None else array[order[lo:hi]])
        if rank == root:
            got = sum(counts)
            keys = np.empty(got, np.int64)
            rows = np.empty((got, *row_shape), array.dtype)
            comm.Gatherv(send_keys, [keys, _counts_and_displs(counts, 1)], root=root)
            comm.Gatherv(send_rows, [rows, _counts_and_displs(counts, row)], root=root)
            if failure is not None:
                continue
            try:
                ordered = _in_key_order(keys, rows, start, stop)
                del rows  # the block is held once while sink writes it
                sink(start, ordered)
            except Exception as exc:  # reported after the last block; the others must not hang
                failure = exc
        else:
            comm.Gatherv(send_keys, None, root=root)
            comm.Gatherv(send_rows, None, root=root)
    if failure is not None:
        raise failure


def _in_key_order(keys: np.ndarray, rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The rows of one gathered block put in the order of their keys ``[start, stop)``.

    Raises ValueError where a key is missing or present twice (a row lost or held twice).
    """
    got = keys.size
    in_order = got == stop - start and keys[0] == start and keys[-1] == stop - 1
    if in_order and bool(np.all(keys[1:] > keys[:-1])):
        return rows  # arrived in order (each rank holds a range of keys): no copy
    seen = np.bincount(keys - start, minlength=stop - start) if got else np.zeros(0, np.int64)
    if got != stop - start or seen.size != stop - start or not np.all(seen == 1):
        raise ValueError(f"rows {start}..{stop - 1}: {got} rows for {stop - start} keys "
                         "(a row lost or held twice)")
    ordered = np.empty_like(rows)
    ordered[keys - start] = rows
    return ordered


def scatter_rows(comm, out: dict[str, np.ndarray], blocks: Iterable[tuple[np.ndarray, dict[str, np.ndarray]]] | None,
                 root: int = 0, catch: tuple[type[BaseException], ...] = (), error: type[Exception] = RuntimeError
                 ) -> None:
    """Fill every rank's ``out`` arrays with the rows the root's ``blocks`` send it; collective over comm.

    Parameters
    ----------
    out : this rank's arrays by name, allocated with exactly the number of rows
        it will receive (the same names, dtypes and row shapes on every rank).
    blocks : on ``root``, an iterable of ``(dest, arrays)``: ``dest`` ``(m,)``
        the rank of each row, ``arrays`` the rows of each name of ``out``;
        ``None`` elsewhere.  Each rank receives its rows in the order the blocks
        give them.
    catch, error : an exception of a ``catch`` type raised while the root
        produces a block stops the transfer on every rank: the root re-raises
        it, the others raise ``error`` with its message.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    names = list(out)
    filled = 0
    iterator = iter(blocks) if rank == root else None
    while True:
        header = None
        if rank == root:
            try:
                dest, arrays = next(iterator)
                header = "block"
            except StopIteration:
                header = "done"
            except catch as exc:
                comm.bcast(("error", str(exc)), root=root)
                raise
        else:
            dest = arrays = None
        header = comm.bcast((header, None) if rank == root else None, root=root)
        if header[0] == "done":
            break
        if header[0] == "error":
            raise error(header[1])
        if rank == root:
            dest = np.asarray(dest, dtype=np.int64)
            sorted_already = dest.size < 2 or bool(np.all(dest[1:] >= dest[:-1]))
            route = None if sorted_already else np.argsort(dest, kind="stable")
            counts = np.bincount(dest, minlength=size).tolist()
        else:
            counts = None
        count = comm.scatter(counts, root=root)
        for name in names:
            target = out[name][filled:filled + count]
            row = int(np.prod(target.shape[1:], dtype=np.int64))
            if rank == root:
                rows = np.asarray(arrays[name])
                send = np.ascontiguousarray(rows if route is None else rows[route])
                comm.Scatterv([send, _counts_and_displs(counts, row)], target, root=root)
            else:
                comm.Scatterv(None, target, root=root)
        filled += count
    for name in names:
        if out[name].shape[0] != filled:
            raise ValueError(f"rank {rank}: {filled} rows arrived for {out[name].shape[0]} allocated")


def exchange_rows(comm, dest: np.ndarray, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Send each of this rank's rows to the rank ``dest`` names; returns the rows sent here.  Collective.

    ``arrays`` holds ``(m, ...)`` rows by name (the same names, dtypes and row
    shapes on every rank), ``dest`` ``(m,)`` the rank of each row.  The rows
    arrive in the order of the sending ranks, each rank's in the order it
    held them.  One ``Alltoall`` of the counts and an ``Alltoallv`` per array.
    """
    size = comm.Get_size()
    dest = np.asarray(dest, dtype=np.int64)
    route = np.argsort(dest, kind="stable")
    send_counts = np.bincount(dest, minlength=size).astype(np.int64)
    recv_counts = np.empty(size, np.int64)
    comm.Alltoall(send_counts, recv_counts)
    got = int(recv_counts.sum())
    out = {}
    for name, rows in arrays.items():
        rows = np.asarray(rows)
        shape = rows.shape[1:]
        recv = np.empty((got, *shape), rows.dtype)
        sends = _counts_and_displs(send_counts, int(np.prod(shape, dtype=np.int64)))
        recvs = _counts_and_displs(recv_counts, int(np.prod(shape, dtype=np.int64)))
        comm.Alltoallv([np.ascontiguousarray(rows[route]), sends], [recv, recvs])
        out[name] = recv
    return out
