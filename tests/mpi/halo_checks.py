"""The halo's driver and its checks against the whole system, shared by the CPU halo's tests
(test_halo_mpi.py) and the device halo's (test_halo_device_mpi.py): collective over the cart given."""

import numpy as np
from mpi4py import MPI

from . import halo_cases as hc

#: the ranks along x, y or z (the other two dimensions one brick wide), or COMM_SELF (1 x 1 x 1)
LAYOUTS = ["x", "y", "z", "self"]


class CpuHalo:
    """The CPU :class:`~pympi_gpu.nbody.lj.cpu.halo.Halo` driven from Python, stage by stage, as the device
    halo's adapter (test_halo_device_mpi.py) drives that one: the migration and the ghost plan through the
    halo's own methods, the forward and reverse passes through the kernels the step's compiled program
    calls (``forward_stages``, ``reverse_stages``, ``ghosts_in``) over the plan and its persistent
    requests, started and waited for by mpi4py where the program calls MPI itself."""

    def __init__(self, halo):
        self.halo = halo

    @property
    def ghosts(self):
        return self.halo.ghosts

    @property
    def _stages(self):
        return self.halo._stages

    def migrate(self, x, rows):
        """Owned positions ``x`` and what travels with them (``rows``) to the bricks that own them: ``(x, rows)``."""
        both = self.halo.migrate_rows(np.column_stack([np.asarray(x, dtype=np.float64), rows]))
        return np.ascontiguousarray(both[:, :3]), np.ascontiguousarray(both[:, 3:])

    def borders(self, x, ids):
        """The ghost plan of owned positions ``x``, ids ``ids``: ``(pos, gid)``, owned rows then ghosts."""
        n = x.shape[0]
        pos = np.empty((max(2 * n, 64), 3))
        gid = np.empty(pos.shape[0], np.int64)
        pos[:n] = x
        gid[:n] = ids
        pos, gid, n_all = self.halo.build(pos, gid, n)
        return pos[:n_all], gid[:n_all]

    def forward(self, pos, work=None):
        """Refresh the ghost rows of ``pos`` from their owners, stage by stage; ``work(stage)`` while that
        stage's messages travel."""
        forward(self.halo, pos, work)

    def reverse(self, f):
        reverse(self.halo, f)


def forward(halo, pos, work=None):
    """The step's forward pass over ``halo``'s plan (see :class:`CpuHalo`)."""
    from pympi_gpu.nbody.lj.cpu import kernels as kc

    none = np.empty((0, 3))
    for d in range(3):
        stage = halo._stages.get(d)
        if stage is None:
            kc.forward_stages(pos, halo.pidx, halo.poff, halo.pshift, halo.pstart, d, d + 1, none, 0)
        else:
            kc.forward_stages(pos, halo.pidx, halo.poff, halo.pshift, halo.pstart, d, d + 1,
                              *kc.stage_region(halo.fsend, halo.soff, d))
            MPI.Prequest.Startall(stage.fwd)
        if work is not None:
            work(d)
        if stage is not None:
            MPI.Request.Waitall(stage.fwd)
            kc.ghosts_in(pos, halo.pstart, halo.nrecv, d, halo.frecv, halo.roff, False)


def reverse(halo, f):
    """The step's reverse pass over ``halo``'s plan: the forces on the ghost rows of ``f`` ``(n_all, 3)``
    added into the rows they came from, stage by stage z, y, x (the ghost rows left as they were)."""
    from pympi_gpu.nbody.lj.cpu import kernels as kc

    none = np.empty((0, 3))
    d1 = 3
    for d in (2, 1, 0):
        stage = halo._stages.get(d)
        if stage is None:
            continue
        if d + 1 < d1:  # the brick's own images above this stage, together
            kc.reverse_stages(f, halo.pidx, halo.poff, halo.pstart, d + 1, d1, none, 0)
        kc.ghosts_in(f, halo.pstart, halo.nrecv, d, halo.rsend, halo.roff, True)
        MPI.Prequest.Startall(stage.rev)
        MPI.Request.Waitall(stage.rev)
        kc.reverse_stages(f, halo.pidx, halo.poff, halo.pstart, d, d + 1, *kc.stage_region(halo.rrecv, halo.soff, d))
        d1 = d
    if d1 > 0:
        kc.reverse_stages(f, halo.pidx, halo.poff, halo.pstart, 0, d1, none, 0)


def make_cart(layout):
    base = MPI.COMM_SELF if layout == "self" else MPI.COMM_WORLD
    return hc.cart_with(base, "x" if layout == "self" else layout)


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
