"""``pympi_gpu.mpi.blocks`` directly: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

Rows spread over the ranks in any order go to rank 0 in key order, block by
block (``gather_rows``), come back from rank 0 to the ranks each row names
(``scatter_rows``), and go from every rank to the ranks each row names
(``exchange_rows``).  Checked against the whole array built on every rank
here: every row arrives once, in order, bit for bit; blocks of 1 row, smaller and
larger than a rank's share; ranks that hold nothing; a lost or doubled row and a
failing sink or producer reported without leaving a rank in a collective; and
the module's memory promise (besides its own rows, a rank holds about a block),
measured with ``tracemalloc``.
"""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.mpi.blocks import exchange_rows, gather_rows, scatter_rows

pytestmark = pytest.mark.mpi(min_size=2)

SLACK = 256 * 1024  # bytes: Python objects, pickled counts


def _whole(total, seed=11):
    """The global array (rows of 3 float64 and an int64 column), the same on every rank."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(total, 3)), rng.integers(-2**62, 2**62, total)


def _holders(total, size, seed, empty=None):
    """The rank that holds each key: random, optionally with rank ``empty`` holding none."""
    owner = np.random.default_rng(seed).integers(0, size, total)
    if empty is not None:
        owner[owner == empty] = (empty + 1) % size
    return owner


def _gathered(comm, key, rows, total, block):
    """(start, rows) of every sink call on rank 0 (None elsewhere)."""
    calls = []
    gather_rows(comm, key, rows, total, block, lambda start, got: calls.append((start, got.copy())))
    return calls if comm.Get_rank() == 0 else None


@pytest.mark.parametrize("block", [1, 7, 40, 1000])  # 1 row; under a share; about a share; over the whole
@pytest.mark.parametrize("layout", ["ranges", "shuffled", "one empty rank"])
def test_gather_in_key_order(agree, block, layout):
    """Every key's row reaches rank 0 once, in key order, in blocks of at most ``block`` rows."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    total = 101 + size  # not a multiple of the blocks or the ranks
    x, tag = _whole(total)
    if layout == "ranges":  # a block split: each rank a contiguous range, in order
        owner = np.repeat(np.arange(size), [len(a) for a in np.array_split(np.arange(total), size)])
    else:
        owner = _holders(total, size, seed=5, empty=size - 1 if layout == "one empty rank" else None)
    key = np.nonzero(owner == rank)[0]
    if layout != "ranges":
        key = np.random.default_rng(rank).permutation(key)  # held in no particular order
    results = [(_gathered(comm, key, rows, total, block), ref)  # (n, 3) float64 and (n,) int64 rows
               for rows, ref in ((x[key], x), (tag[key], tag))]

    def check():
        assert layout != "one empty rank" or (key.size == 0) == (rank == size - 1)
        if rank == 0:
            for calls, ref in results:
                assert [s for s, _ in calls] == list(range(0, total, block))
                assert all(len(r) == min(block, total - s) for s, r in calls)
                got = np.concatenate([r for _, r in calls])
                assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()
    agree(comm, check)


@pytest.mark.parametrize("fault", ["lost", "twice"])
def test_gather_refuses_a_lost_or_doubled_row_after_the_last_block(agree, fault):
    """Rank 0 raises ValueError naming the rows after the last block; the others return.

    The sink has the blocks before the bad one and nothing after it (no file is written on past a hole).
    """
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    total = 60
    key = np.arange(total)[np.arange(total) % size == rank]
    lost = int(np.arange(total)[np.arange(total) % size == size - 1][-1])  # the last rank's last key
    if rank == size - 1:
        key = key[:-1] if fault == "lost" else np.append(key, 0)  # key 0 is rank 0's too
    calls = []
    sink = lambda start, got: calls.append(start)  # noqa: E731

    def check():
        if rank == 0:
            with pytest.raises(ValueError, match="a row lost or held twice"):
                gather_rows(comm, key, key.astype(np.float64), total, 16, sink)
            bad = 16 * (lost // 16) if fault == "lost" else 0  # the block with the bad key
            assert calls == list(range(0, bad, 16))
        else:
            gather_rows(comm, key, key.astype(np.float64), total, 16, sink)  # returns: nobody waits
            assert calls == []
    agree(comm, check)


def test_gather_sink_error_raised_after_the_last_block_and_sink_not_called_again(agree):
    """What the sink raised comes out of rank 0 after the last block; the sink is not called again."""
    comm = MPI.COMM_WORLD
    total, block = 50, 10
    key = np.arange(total)[np.arange(total) % comm.Get_size() == comm.Get_rank()]
    calls = []

    def sink(start, rows):
        calls.append(start)
        if start == 20:
            raise OSError("disk full")

    def check():
        if comm.Get_rank() == 0:
            with pytest.raises(OSError, match="disk full"):
                gather_rows(comm, key, key * 1.0, total, block, sink)
            assert calls == [0, 10, 20]
        else:
            gather_rows(comm, key, key * 1.0, total, block, sink)
    agree(comm, check)


def test_gather_refuses_a_block_below_one():
    """A block of 0 rows is refused on every rank before any communication."""
    with pytest.raises(ValueError, match="block must be >= 1"):
        gather_rows(MPI.COMM_WORLD, np.arange(0), np.zeros(0), 0, 0, lambda s, r: None)


def _scatter_blocks(dest, arrays, block):
    """Root's producer: blocks of ``block`` rows of the global arrays, each row naming its rank."""
    for lo in range(0, dest.size, block):
        yield dest[lo:lo + block], {k: a[lo:lo + block] for k, a in arrays.items()}


@pytest.mark.parametrize("block", [1, 9, 70, 1000])
@pytest.mark.parametrize("empty", [False, True])
def test_scatter_to_the_ranks_each_row_names(agree, block, empty):
    """Each rank receives exactly the rows that name it, in the order the blocks give them."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    total = 131
    x, tag = _whole(total, seed=2)
    dest = _holders(total, size, seed=9, empty=0 if empty else None)  # unsorted within every block
    mine = np.nonzero(dest == rank)[0]
    out = {"x": np.full((mine.size, 3), np.nan), "tag": np.zeros(mine.size, np.int64)}
    blocks = _scatter_blocks(dest, {"x": x, "tag": tag}, block) if rank == 0 else None
    scatter_rows(comm, out, blocks)

    def check():
        assert out["x"].tobytes() == x[mine].tobytes()
        assert out["tag"].tobytes() == tag[mine].tobytes()
        assert (mine.size == 0) == (empty and rank == 0)
    agree(comm, check)


def test_scatter_producer_error_reaches_every_rank(agree):
    """A ``catch`` error while rank 0 produces a block: rank 0 re-raises it, the others raise ``error``."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    out = {"v": np.zeros(10)}

    def blocks():
        yield np.arange(10 * size) % size, {"v": np.arange(10.0 * size)}
        raise KeyError("field 'v' is corrupt")

    def check():
        if rank == 0:
            with pytest.raises(KeyError, match="corrupt"):
                scatter_rows(comm, out, blocks(), catch=(KeyError,), error=LookupError)
        else:
            with pytest.raises(LookupError, match="corrupt") as err:
                scatter_rows(comm, out, None, catch=(KeyError,), error=LookupError)
            assert type(err.value) is LookupError
        assert np.array_equal(out["v"], rank + size * np.arange(10.0))  # the first block had arrived
    agree(comm, check)


def test_scatter_refuses_a_wrong_allocation_on_that_rank(agree):
    """A rank that allocated room for more rows than arrive says so (after the collectives)."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    dest = np.arange(4 * size) % size
    out = {"v": np.zeros(5 if rank == 1 else 4)}  # rank 1 expects a row too many
    blocks = _scatter_blocks(dest, {"v": np.arange(4.0 * size)}, 3) if rank == 0 else None
    def check():
        if rank == 1:
            with pytest.raises(ValueError, match="rank 1: 4 rows arrived for 5 allocated"):
                scatter_rows(comm, out, blocks)
        else:
            scatter_rows(comm, out, blocks)
    agree(comm, check)


# ---------------------------------------------------------------- the memory promise

def _peak_extra(fn):
    """The most bytes allocated while ``fn`` ran beyond those held when it started."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _within(comm, extra, bound, what):
    """Every rank's peak within its bound (checked on every rank, so all fail together)."""
    for r, (e, b) in enumerate(comm.allgather((extra, bound))):
        assert e <= b, f"{what}: rank {r} allocated {e} bytes at peak, beyond its bound {b}"


@pytest.mark.parametrize("ordered", [True, False])
def test_gather_holds_about_a_block_beyond_its_own_rows(agree, ordered):
    """Rank 0 never holds the whole array: a few blocks; the others add at most their keys' order.

    The whole array is 7.2 MB; a block is 96 KiB.
    """
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    total, block, row = 300_000, 4096, 3 * 8
    key = np.arange(rank, total, size)  # interleaved: every block comes from every rank
    if not ordered:
        key = np.random.default_rng(rank).permutation(key)
    rows = np.ones((key.size, 3))
    seen = []
    extra = _peak_extra(lambda: gather_rows(comm, key, rows, total, block, lambda s, r: seen.append(r.shape[0])))
    order = 0 if ordered else 2 * 8 * key.size  # the sort of the keys and its permutation: a share's keys
    bound = order + 4 * block * (row + 8) + SLACK
    _within(comm, extra, bound, "gather_rows")
    assert 4 * block * (row + 8) + SLACK < total * row // 8
    agree(comm, lambda: rank != 0 or sum(seen) == total or pytest.fail(f"{sum(seen)} rows sunk"))


def test_scatter_holds_about_a_block_beyond_its_own_rows():
    """Rank 0 produces one block at a time and holds about two; the others only what they receive."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    total, block, row = 300_000, 4096, 3 * 8
    out = {"x": np.empty((np.count_nonzero(np.arange(total) % size == rank), 3))}

    def blocks():
        for lo in range(0, total, block):
            n = min(block, total - lo)
            dest = (lo + np.arange(n))[::-1] % size  # unsorted: rank 0 routes each block
            yield dest, {"x": np.full((n, 3), 1.0)}

    extra = _peak_extra(lambda: scatter_rows(comm, out, blocks() if rank == 0 else None))
    _within(comm, extra, 4 * block * (row + 8) + SLACK, "scatter_rows")
    assert comm.allreduce(int(np.count_nonzero(out["x"] != 1.0))) == 0


@pytest.mark.parametrize("layout", ["spread", "all to rank 0", "none here"])
def test_exchange_sends_each_row_to_the_rank_it_names(agree, layout):
    """``exchange_rows``: every rank's rows reach the rank each names, once, bit for bit, in the order of the
    sending ranks and, from each, in its own order (a file's parts sent to the bricks that own their atoms)."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    total = 97 + 5 * size
    x, tag = _whole(total, seed=3)
    holder = _holders(total, size, seed=8)
    dest = {"spread": _holders(total, size, seed=9), "all to rank 0": np.zeros(total, np.int64),
            "none here": _holders(total, size, seed=9, empty=size - 1)}[layout]
    mine = np.flatnonzero(holder == rank)
    got = exchange_rows(comm, dest[mine], {"x": x[mine], "tag": tag[mine], "key": mine})

    def check():
        want = np.concatenate([np.flatnonzero((holder == r) & (dest == rank)) for r in range(size)])
        assert got["key"].tolist() == want.tolist()
        assert got["x"].tobytes() == x[want].tobytes() and got["tag"].tobytes() == tag[want].tobytes()
        assert comm.allreduce(got["key"].size) == total

    agree(comm, check)
