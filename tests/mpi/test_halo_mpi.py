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

from pympi_gpu.nbody.lj.cpu.halo import Halo

from . import halo_cases as hc
from .halo_checks import LAYOUTS, CpuHalo, check_borders, check_forward, check_migrate, check_reverse, make_cart, run_halo

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module", params=[(layout, shell, "") for layout in LAYOUTS for shell in ("full", "half")]
                + [(layout, "half", "replanned") for layout in LAYOUTS], ids=lambda p: "-".join(filter(None, p)))
def cpu(request):
    """(cart, what Halo returned) for one layout and shell, shared by the four checks; ``replanned``: the
    halo made a plan before, of one atom fewer a rank, whose message regions the plan checked may keep."""
    layout, shell, replanned = request.param
    cart = make_cart(layout)
    half = shell == "half"
    yield cart, run_halo(cart, lambda c, b: CpuHalo(Halo(c, b, hc.CUT, half_shell=half)), half_shell=half,
                         replan=bool(replanned))
    cart.Free()


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
