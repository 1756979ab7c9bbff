"""``pympi_gpu.nbody.lj.gpu.halo.DeviceHalo`` under numba's CUDA simulator, at 2 and 3 ranks.

``tests/cli/test_mpi_suite.py`` runs this file with ``NUMBA_ENABLE_CUDASIM=1`` (marker
``cudasim``), where the device arrays are NumPy's.  The device halo promises the
same stages, hops and order of rows as the CPU's :class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`:
on the same system (``halo_cases``: ranks along x, y or z, and COMM_SELF; the
full shell and the half shell of half lists), with both transports (device
arrays straight to MPI, or staged through host memory), migrate, borders,
forward and reverse give the CPU halo's answers row for row, bit for bit, and
the same references as ``test_halo_mpi.py`` hold.  Only the public methods are
used; what comes to the host is read from the copy counter.
"""

import numpy as np
import pytest

from pympi_gpu.nbody.lj.cpu.halo import Halo

from . import halo_cases as hc
from .halo_checks import LAYOUTS, check_borders, check_forward, check_migrate, check_reverse, make_cart, run_halo

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.cudasim]

TRANSPORTS = ["device", "host"]


class OnTheHost:
    """A DeviceHalo driven with host arrays: each call copies in, runs on the device, copies back."""

    def __init__(self, cart, brick, transport, half_shell):
        from pympi_gpu.device.buffers import DeviceArrays
        from pympi_gpu.nbody.lj.gpu.halo import DeviceHalo

        self.dev = DeviceArrays(simulated=True)
        self.halo = DeviceHalo(cart, brick, hc.CUT, self.dev, transport, half_shell=half_shell)
        self.counted = 0  # the copies made here, by this adapter, which the halo must not be charged for

    def _host(self, a):
        self.counted += 1
        return np.array(self.dev.to_host(a, "atoms"))

    def migrate(self, x, rows):
        x, rows = self.halo.migrate(self.dev.from_host(x), self.dev.from_host(rows))
        return self._host(x), self._host(rows)

    def borders(self, x, ids):
        pos, gid = self.halo.borders(self.dev.from_host(x), self.dev.from_host(ids))
        return self._host(pos), self._host(gid)

    def forward(self, pos, work=None):
        d = self.dev.from_host(pos)
        self.halo.forward(d, work)
        pos[...] = self._host(d)

    def reverse(self, f):
        d = self.dev.from_host(f)
        self.halo.reverse(d)
        f[...] = self._host(d)

    @property
    def ghosts(self):
        return self.halo.ghosts


@pytest.fixture(scope="module", params=[(layout, shell) for layout in LAYOUTS for shell in ("full", "half")],
                ids=lambda p: "-".join(p))
def layout(request):
    """(the ranks' layout, the half shell?)"""
    return request.param[0], request.param[1] == "half"


@pytest.fixture(scope="module")
def cpu(layout):
    cart = make_cart(layout[0])
    yield run_halo(cart, lambda c, b: Halo(c, b, hc.CUT, half_shell=layout[1]), half_shell=layout[1])
    cart.Free()


@pytest.fixture(scope="module", params=TRANSPORTS)
def device(request, layout):
    """(cart, what DeviceHalo returned, its adapter) for one layout and transport."""
    cart = make_cart(layout[0])
    adapters = []

    def make(c, b):
        adapters.append(OnTheHost(c, b, request.param, layout[1]))
        return adapters[-1]

    yield cart, run_halo(cart, make, half_shell=layout[1]), adapters[0]
    cart.Free()


def test_same_rows_as_the_cpu_halo(agree, cpu, device):
    """Migration, ghosts, forward and reverse: the CPU halo's arrays, bit for bit, in its row order."""
    cart, got, _ = device

    def check():
        for key in ("x", "rows", "pos", "gid", "fresh", "fint_after", "fpair_after"):
            assert got[key].shape == cpu[key].shape, key
            assert got[key].tobytes() == cpu[key].tobytes(), f"{key} differs from the CPU halo's"
        assert got["stages"] == cpu["stages"] and got["ghosts"] == cpu["ghosts"]
    agree(cart, check)


@pytest.mark.parametrize("check", [check_migrate, check_borders, check_forward, check_reverse],
                         ids=["migrate", "borders", "forward", "reverse"])
def test_against_the_references(agree, device, check):
    cart, got, _ = device
    agree(cart, lambda: check(cart, got))


def test_what_comes_to_the_host(agree, device):
    """No atom array comes to the host; halo messages do only with the host transport, when there are any."""
    cart, _, adapter = device
    copies = adapter.dev.copies

    def check():
        assert copies["atoms"] == adapter.counted  # only the adapter's own copies
        talks = cart.Get_size() > 1
        if adapter.halo.transport == "device":
            assert copies["message"] == 0
        else:
            assert (copies["message"] > 0) == talks
    agree(cart, check)
