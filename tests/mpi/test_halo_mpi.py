"""``pympi_gpu.nbody.lj.cpu.halo.Halo`` directly: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

On real periodic Cartesian communicators with the ranks along x, along y and
along z (so the other two dimensions are one brick wide: a brick that is its
own periodic image), and on COMM_SELF (its own image in all three), with a
random system of uneven counts per brick and a box that 3 does not divide.
Checked against references computed from the whole system on every rank
(``halo_cases``), not against another run of the halo:

* ``migrate``: every atom ends on the rank that owns its new position, exactly
  once over all ranks, wrapped into the box, its rows (velocity, id) with it;
* ``borders``: the owned rows first, then exactly the ghost images the rank
  must hold, each image once, with its periodic shift (the full shell, and the
  half shell of half lists);
* ``forward``: after the owned atoms move, every ghost row is its owner's new
  position plus the same shift, and the caller's work runs once per stage;
* ``reverse``: the forces on ghost rows land on their owners: integer-valued
  forces summed exactly, and a half-list pair force with Newton's third law
  across bricks agreeing with the direct all-pairs sum (on the half shell: every
  ghost pair taken, so each pair between bricks must be on one side only).
"""

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.nbody.lj.cpu.halo import Halo

from . import halo_cases as hc

pytestmark = pytest.mark.mpi(min_size=2)

#: the ranks along x, y or z (the other two dimensions one brick wide), or COMM_SELF (1 x 1 x 1)
LAYOUTS = ["x", "y", "z", "self"]


def make_cart(layout):
    base = MPI.COMM_SELF if layout == "self" else MPI.COMM_WORLD
    return hc.cart_with(base, "x" if layout == "self" else layout)


@pytest.fixture(scope="module", params=[(layout, shell, "") for layout in LAYOUTS for shell in ("full", "half")]
                + [(layout, "half", "replanned") for layout in LAYOUTS], ids=lambda p: "-".join(filter(None, p)))
def cpu(request):
    """(cart, what Halo returned) for one layout and shell, shared by the four checks; ``replanned``: the
    halo made a plan before, of one atom fewer a rank, whose message regions the plan checked may keep."""
    layout, shell, replanned = request.param
    cart = make_cart(layout)
    half = shell == "half"
    yield cart, run_halo(cart, lambda c, b: Halo(c, b, hc.CUT, half_shell=half), half_shell=half,
                         replan=bool(replanned))
    cart.Free()


def _start(cart):
    """(global x0, x1, v, ids) and this rank's owned share of x0, v, ids."""
    dims = cart.Get_topo()[0]
    x0, x1, v, ids = hc.system(dims)
    own = hc.mine(x0, cart)
    return (x0, x1, v, ids), (x0[own], v[own], ids[own])


def run_halo(cart, make_halo, half_shell=False, replan=False):
    """Migrate, borders, forward and reverse through ``make_halo(cart, brick)``; what each returned, on the host.

    The same driver serves the device halo's tests (``make_halo`` wraps it in host arrays).
    ``half_shell``: the halo made is the half shell of half lists.  ``replan``: a plan of the owned
    atoms but the last first (``kept``: per remote stage, whether the plan checked kept its messages).
    """
    (x0, x1, v, ids), (ox, ov, oid) = _start(cart)
    halo = make_halo(cart, hc.brick(cart))
    moved = x1[np.isin(ids, oid)]  # this rank's atoms, moved, some out of the box or the brick
    x, rows = halo.migrate(moved, np.column_stack([ov, oid.astype(np.float64)]))
    nlocal = len(x)
    kept = None
    if replan:
        halo.borders(x[:-1], rows[:-1, 3].astype(np.int64))
        before = dict(halo._stages)
    pos, gid = halo.borders(x, rows[:, 3].astype(np.int64))
    if replan:
        kept = {d: halo._stages[d] is stage for d, stage in before.items()}
    # the owned atoms move a little (no rebuild): the ghosts must follow
    step = np.random.default_rng(cart.Get_rank()).uniform(-1e-3, 1e-3, (nlocal, 3))
    fresh = pos.copy()
    fresh[:nlocal] += step
    fresh[nlocal:] = np.nan
    owned = fresh[:nlocal].copy()
    stages = []
    halo.forward(fresh, lambda stage: stages.append(stage))
    # integer forces: sums exact in any order
    fint = np.random.default_rng(100 + cart.Get_rank()).integers(-999, 1000, pos.shape).astype(np.float64)
    fint_after = fint.copy()
    halo.reverse(fint_after)
    fpair = hc.pair_forces(pos, gid, nlocal, half_shell=half_shell)
    fpair_after = fpair.copy()
    halo.reverse(fpair_after)
    return dict(x=x, rows=rows, pos=pos, gid=gid, nlocal=nlocal, fresh=fresh, owned=owned, stages=stages,
                fint=fint, fint_after=fint_after, fpair_after=fpair_after, ghosts=halo.ghosts, half_shell=half_shell,
                kept=kept)


def check_migrate(cart, got):
    """Each atom on the owner of its new position, once; wrapped; its velocity and id with it."""
    (x0, x1, v, ids), _ = _start(cart)
    after = hc.wrapped(x1)
    own = hc.mine(after, cart)
    order = np.argsort(got["rows"][:, 3])
    held = got["rows"][order, 3].astype(np.int64)
    assert np.array_equal(held, ids[own]), "the atoms held after migrating are not those the brick owns"
    assert got["x"][order].tobytes() == after[own].tobytes()
    assert got["rows"][order, :3].tobytes() == v[own].tobytes()
    everyone = np.concatenate(cart.allgather(held))
    assert np.array_equal(np.sort(everyone), ids), "an atom lost or held twice over the ranks"


def check_borders(cart, got):
    """Owned rows first and unchanged; then exactly the images the brick must see, once each."""
    (x0, x1, v, ids), _ = _start(cart)
    n = got["nlocal"]
    assert got["pos"][:n].tobytes() == got["x"].tobytes()
    assert np.array_equal(got["gid"][:n], got["rows"][:, 3].astype(np.int64))
    want = hc.ghosts(hc.wrapped(x1), ids, cart, got["half_shell"])
    have = hc.rows_of(got["pos"], got["gid"], n)
    assert len(have) == len(got["pos"]) - n, "a ghost image held twice"
    missing, extra = sorted(set(want) - set(have))[:5], sorted(set(have) - set(want))[:5]
    assert not missing and not extra, f"ghosts missing {missing}, not expected {extra}"
    assert got["ghosts"] == len(want)
    assert len(want) > 0


def check_forward(cart, got):
    """Every ghost row = its owner's moved position + the ghost's periodic shift; work() ran per stage."""
    (x0, x1, v, ids), _ = _start(cart)
    n = got["nlocal"]
    want = hc.ghosts(hc.wrapped(x1), ids, cart, got["half_shell"])
    # the owners' moved positions, from every rank
    pairs = cart.allgather((got["gid"][:n], got["fresh"][:n]))
    moved = {int(g): p for gids, ps in pairs for g, p in zip(gids, ps)}
    for key, row in hc.rows_of(got["pos"], got["gid"], n).items():
        expect = moved[key[0]] + want[key] * hc.BOX
        assert got["fresh"][row].tobytes() == expect.tobytes(), f"ghost {key} after forward"
    assert got["fresh"][:n].tobytes() == got["owned"].tobytes(), "forward changed an owned row"
    assert got["stages"] == [0, 1, 2]


def check_reverse(cart, got):
    """Owned rows gain every ghost row's force of their id, over all ranks: exactly, and as physics."""
    n = got["nlocal"]
    gid = got["gid"]
    ghost_rows = cart.allgather((gid[n:], got["fint"][n:]))
    total = {int(g): f.copy() for g, f in zip(gid[:n], got["fint"][:n])}
    for gids, fs in ghost_rows:
        for g, f in zip(gids, fs):
            if int(g) in total:
                total[int(g)] += f
    expect = np.array([total[int(g)] for g in gid[:n]]).reshape(n, 3)
    assert got["fint_after"][:n].tobytes() == expect.tobytes(), "ghost forces not added into their owners"
    (x0, x1, v, ids), _ = _start(cart)
    direct = hc.direct_forces(hc.wrapped(x1))
    at = np.searchsorted(ids, gid[:n])
    scale = np.abs(direct).max()
    np.testing.assert_allclose(got["fpair_after"][:n], direct[at], rtol=1e-12, atol=1e-12 * scale)


def test_migrate_sends_each_atom_to_its_owner_once(agree, cpu):
    cart, got = cpu
    agree(cart, lambda: check_migrate(cart, got))


def test_borders_gives_every_ghost_image_once_with_its_shift(agree, cpu):
    cart, got = cpu
    agree(cart, lambda: check_borders(cart, got))


def test_forward_refreshes_ghosts_from_moved_owners(agree, cpu):
    cart, got = cpu
    agree(cart, lambda: check_forward(cart, got))


def test_reverse_adds_ghost_forces_into_their_owners(agree, cpu):
    cart, got = cpu
    agree(cart, lambda: check_reverse(cart, got))


def test_a_plan_keeps_the_messages_that_fit(agree, cpu):
    """Every remote stage keeps its message regions and persistent requests from the plan before, which
    had a few rows fewer (the checks above pass on what it sends, padding and all): one message each way
    where its two neighbours are one rank (2 ranks), two where they are two (3 ranks), each its own region."""
    cart, got = cpu
    if got["kept"] is None:
        pytest.skip("no plan before")

    def check():
        want = {d: True for d in range(3) if cart.Get_topo()[0][d] > 1}
        assert got["kept"] == want

    agree(cart, check)


@pytest.mark.parametrize("made_by", ["python", "kernel"])
def test_exchange_rows_of_any_count(agree, made_by):
    """``_exchange`` as the migration and the ghosts use it, rebuild after rebuild: rows of growing and
    shrinking counts, none included, different on the two sides, each rank's rows arriving whole at
    its neighbours, the upper's then the lower's, after the rows kept at the head of the buffer they
    go to (one message each way on 2 ranks), which is replaced by a larger copy where they do not fit.
    The messages made by mpi4py's calls, or by one compiled call (``numba_calls.exchange_rows``)."""
    from pympi_gpu.nbody.lj.cpu.halo import _KernelExchange, _exchange
    from pympi_gpu.run.phases import PhaseClock

    cart = make_cart("x")
    kernel = _KernelExchange(cart) if made_by == "kernel" else None
    lower, upper = cart.Shift(0, 1)
    me = cart.Get_rank()

    def rows(rank, k, count, part):  # what rank sends in exchange k: count rows, part 0 down, 1 up
        return np.array([[rank, k, part, i, 0.5] for i in range(count)], float).reshape(count, 5)

    counts = [(3, 2), (5, 0), (400, 17), (0, 1), (2, 900), (1, 1)]  # (down, up) in each exchange

    def count(rank, k):  # odd ranks two exchanges ahead: the two sides' counts differ
        return counts[(k + 2 * (rank % 2)) % len(counts)]

    def check():
        for k in range(len(counts)):
            down, up = count(me, k)
            buf = np.zeros((down + up + 1, 5))
            buf[:down], buf[down:down + up] = rows(me, k, down, 0), rows(me, k, up, 1)
            into = np.full((2 + 30, 5), -1.0)  # two rows kept; room for 30 (a split's row included)
            got, (c0, c1) = _exchange(cart, buf, down, down + up, lower, upper, 77, PhaseClock(), into=into, at=2,
                                      kernel=kernel)
            head = np.full((2, 5), -1.0)
            want = np.concatenate([head, rows(upper, k, count(upper, k)[0], 0), rows(lower, k, count(lower, k)[1], 1)])
            assert (c0, c1) == (count(upper, k)[0], count(lower, k)[1])
            assert got.tobytes() == want.tobytes(), f"exchange {k}"
            fits = want.shape[0] + (lower == upper) <= into.shape[0]
            assert (got.base is into) == fits, f"exchange {k}: rows {want.shape[0]}, into {into.shape[0]}"
            got, _ = _exchange(cart, buf, down, down + up, lower, upper, 78, PhaseClock(), kernel=kernel)  # no head
            assert got.tobytes() == want[2:].tobytes(), f"exchange {k}, no head"

    agree(cart, check)
    cart.Free()
