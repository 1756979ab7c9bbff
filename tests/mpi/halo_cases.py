"""A random atom system over a periodic Cartesian grid, and what its halo must hold, computed directly.

Shared by ``test_halo_mpi.py`` (:class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`) and
``test_halo_device_mpi.py`` (:class:`~pympi_gpu.nbody.lj.gpu.halo.DeviceHalo`).
Every rank builds the whole system from one seed; the references below look at
every atom and every periodic image (no stages, no messages): the owner of a
position is ``floor(x p / L)`` per dimension, and a rank's ghosts are every
image ``x + k L`` (``k`` in {-1, 0, 1}^3) inside its brick grown by the cutoff,
less its own atoms; the half shell (half lists) those of them whose offset from
the brick (per dimension -1, 0, +1: below, inside, above) has +1 as its first
nonzero entry.  Atoms within 1e-6 of a brick face, of a face moved by the
cutoff or of the box edge are left out, so that no reference decision hangs on
rounding.
"""

from __future__ import annotations

import itertools

import numpy as np

from pympi_gpu.nbody.lj.domain import brick_of

BOX = 9.7  # a third of it is not a whole number of anything
CUT = 2.0  # thinner than the bricks of 3 ranks (3.23), under half the box
ATOMS = 420
GAP = 1e-6


def cart_with(comm, layout: str):
    """A periodic 3-D Cartesian communicator: the ranks along x, y or z (the others 1 wide)."""
    dims = [1, 1, 1]
    dims["xyz".index(layout)] = comm.Get_size()
    return comm.Create_cart(dims, periods=[True, True, True], reorder=False)


def brick(cart):
    dims, _, coords = cart.Get_topo()
    return brick_of(BOX, dims, coords)


def owner(x, dims):
    """Grid coordinates of the brick owning each (wrapped) position."""
    return np.floor(x * (np.asarray(dims) / BOX)).astype(np.int64)


def _planes(dims):
    """Per dimension, the coordinates no atom may be near: faces, faces +- the cutoff, 0 and L."""
    out = []
    for p in dims:
        faces = np.array([BOX * c / p for c in range(p + 1)])
        out.append(np.concatenate([faces, faces - CUT, faces + CUT, faces - BOX, faces + BOX]))
    return out


def clear(x, dims):
    """Which positions keep GAP from every plane that decides ownership or ghosting."""
    ok = np.ones(len(x), bool)
    for d, planes in enumerate(_planes(dims)):
        ok &= np.min(np.abs(x[:, d, None] - planes[None, :]), axis=1) > GAP
    return ok


def system(dims, seed=7):
    """Global ``(x0, x1, v, ids)``: positions, positions moved (up to 1.4 sigma, some across the box edge),
    velocities; every decision about them unambiguous."""
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(0, BOX, (3 * ATOMS, 3))
    x1 = x0 + rng.uniform(-1.4, 1.4, x0.shape)
    ok = clear(x0, dims) & clear(x1, dims)
    x0, x1 = x0[ok][:ATOMS], x1[ok][:ATOMS]
    assert len(x0) == ATOMS
    v = rng.normal(size=x0.shape)
    return x0, x1, v, np.arange(1, ATOMS + 1, dtype=np.int64) * 3  # ids not 0..n-1: ids, not rows


def wrapped(x):
    """Positions folded into [0, L) (one box at most, as the moves above are)."""
    return np.where(x < 0, x + BOX, np.where(x >= BOX, x - BOX, x))


def mine(x, cart):
    """Which of the (wrapped) global positions this rank's brick owns."""
    dims, _, coords = cart.Get_topo()
    return np.all(owner(x, dims) == np.asarray(coords), axis=1)


def ghosts(x, ids, cart, half_shell=False):
    """The ghost images this rank's halo must hold: ``{(id, image x, y, z): k}``, ``k`` the periodic shift."""
    b = brick(cart)
    lo, hi = np.array(b.lo), np.array(b.hi)
    own = mine(x, cart)
    want = {}
    for k in itertools.product((-1, 0, 1), repeat=3):
        k = np.array(k)
        q = x + k * BOX
        inside = np.all((q >= lo - CUT) & (q < hi + CUT), axis=1)
        if not k.any():
            inside &= ~own
        if half_shell:
            offset = np.where(q >= hi, 1, np.where(q < lo, -1, 0))
            first = np.take_along_axis(offset, np.argmax(offset != 0, axis=1)[:, None], axis=1)[:, 0]
            inside &= first == 1
        for i in np.nonzero(inside)[0]:
            want[(int(ids[i]), *map(float, q[i]))] = k
    return want


def rows_of(pos, gid, start):
    """``{(id, x, y, z): row}`` of rows ``start:`` of a halo's (pos, gid)."""
    return {(int(g), *map(float, p)): start + r for r, (g, p) in enumerate(zip(gid[start:], pos[start:]))}


def pair_forces(pos, gid, nlocal, rc=CUT, half_shell=False):
    """Forces of a smooth repulsion ``(r_i - r_j)(rc^2 - r^2)^2`` from a half list with Newton's third law.

    Owned-owned pairs once (i < j); an owned-ghost pair on this rank only when the owned id
    is the smaller (the full shell) or always (the half shell: the other rank has no ghost
    of it), so each pair is counted on exactly one rank (the images of an atom are more
    than 2 rc apart).  Returns ``(n_all, 3)``: reactions land on the ghost rows.
    """
    f = np.zeros_like(pos)
    d = pos[:nlocal, None, :] - pos[None, :, :]
    r2 = np.sum(d * d, axis=2)
    j = np.arange(len(pos))[None, :]
    i = np.arange(nlocal)[:, None]
    take = (r2 < rc * rc) & (((j < nlocal) & (j > i))
                             | ((j >= nlocal) & (half_shell | (gid[None, :] > gid[:nlocal, None]))))
    fij = np.where(take[..., None], d * ((rc * rc - r2) ** 2)[..., None], 0.0)
    f[:nlocal] += fij.sum(axis=1)
    f -= fij.sum(axis=0)
    return f


def direct_forces(x, rc=CUT):
    """The same forces by the minimum image over all pairs of the whole system: the reference."""
    d = x[:, None, :] - x[None, :, :]
    d -= BOX * np.round(d / BOX)
    r2 = np.sum(d * d, axis=2)
    np.fill_diagonal(r2, np.inf)
    w = np.where(r2 < rc * rc, (rc * rc - r2) ** 2, 0.0)
    return np.sum(d * w[..., None], axis=1)
