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
from .halo_checks import LAYOUTS, CpuHalo, check_borders, check_forward, check_migrate, check_reverse, make_cart, run_halo

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.cudasim]

TRANSPORTS = ["device", "host"]


class OnTheHost:
    """A DeviceHalo driven with host arrays: each call copies in, runs on the device, copies back.

    The halo works in the rebuild's device buffers (:class:`~pympi_gpu.nbody.lj.gpu.rebuild.DeviceBuild`),
    made here for this system's cell grid, with room for every atom of the system: the owned atoms in two
    sets ``(x, v, f, gid)`` (the migration writes from one into the other), the rows owned and ghosts.
    """

    def __init__(self, cart, brick, transport, half_shell):
        from types import SimpleNamespace

        from pympi_gpu.device.buffers import DeviceArrays
        from pympi_gpu.nbody.lj.gpu.halo import DeviceHalo
        from pympi_gpu.nbody.lj.gpu.rebuild import Capacity, DeviceBuild
        from pympi_gpu.nbody.lj.system import CellGrid

        self.dev = DeviceArrays(simulated=True)
        config = SimpleNamespace(box=hc.BOX, cutneigh=hc.CUT, cutoff=hc.CUT, density=hc.ATOMS / hc.BOX ** 3,
                                 newton=half_shell, neigh_policy=(1, True))
        grid = CellGrid.of(config, brick)
        system = SimpleNamespace(config=config, grid=grid, rebuild_distance2=1.0, move_limit2=hc.CUT ** 2)
        room = 27 * hc.ATOMS  # every image of every atom
        self.build = DeviceBuild(self.dev, system, Capacity(atoms=room, rows=room, cell=hc.ATOMS,
                                                             widths=list(grid.capacity)))
        self.halo = DeviceHalo(cart, brick, hc.CUT, self.dev, transport, half_shell=half_shell, build=self.build)
        xp = self.dev.xp
        self.sets = [(xp.zeros((room, 3)), xp.zeros((room, 3)), xp.zeros((room, 3)), xp.zeros(room, np.int64))
                     for _ in range(2)]
        self.n = 0
        self.counted = 0  # the copies made here, by this adapter, which the halo must not be charged for

    def _host(self, a):
        self.counted += 1
        return np.array(self.dev.to_host(a, "atoms"))

    def _grow(self, rows, keep):
        raise AssertionError(f"the adapter's {self.sets[0][0].shape[0]} rows are too few for {rows}")

    def migrate(self, x, rows):
        x0, v, _, gid = self.sets[0]
        n = len(x)
        for host, dev in ((x, x0), (rows[:, :3], v), (rows[:, 3].astype(np.int64), gid)):
            self.dev.into_device(np.ascontiguousarray(host), dev[:n])
        n, which, _ = self.halo.migrate(self.sets, n)
        x, v, _, gid = self.sets[which]
        return self._host(x[:n]), np.column_stack([self._host(v[:n]), self._host(gid[:n]).astype(np.float64)])

    def borders(self, x, ids):
        pos, _, _, gid = self.sets[0]
        n = self.n = len(x)
        self.dev.into_device(np.ascontiguousarray(x), pos[:n])
        self.dev.into_device(np.ascontiguousarray(ids, np.int64), gid[:n])
        self.build.ghosts_of(n)
        self.halo.borders(pos, gid, n, self._grow, counted=False)
        held = self.halo.settle(self.build.read(), n)
        return self._host(pos[:held]), self._host(gid[:held])

    def forward(self, pos, work=None):
        d = self.sets[0][0]
        self.dev.into_device(pos, d[:len(pos)])
        self.halo.forward(d, work)
        pos[...] = self._host(d[:len(pos)])

    def reverse(self, f):
        d = self.sets[1][0]
        self.dev.into_device(f, d[:len(f)])
        self.halo.reverse(d)
        f[...] = self._host(d[:len(f)])

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
    yield run_halo(cart, lambda c, b: CpuHalo(Halo(c, b, hc.CUT, half_shell=layout[1])), half_shell=layout[1])
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
