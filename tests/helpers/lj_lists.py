"""The reference Verlet lists the LJ model's list builds are held to (tests/unit/test_lj_model.py): a
counting sort into cells and a plain search of each owned atom's stencil in double precision, as the
model's first CPU kernels built them; no run calls them.  The rows' order is the model's: the pairs
within the cutoff first (at the positions of the build), then the rest of the skin."""

import numpy as np
from numba import njit, prange

from pympi_gpu.device.jitcache import guard_cache
from pympi_gpu.nbody.lj.cpu.lists import cell_index

guard_cache()  # cached below: numba's cache mended first (see jitcache)


@njit(nogil=True, cache=True)
def bin_atoms(pos, n_all, lo, inv, ncell):
    """Counting sort of atoms into cells: ``(cell_of, start, atoms)``.

    ``cell_of[i]`` is atom i's cell; the atoms of cell c are
    ``atoms[start[c]:start[c + 1]]``, in increasing index.
    """
    ncells = ncell[0] * ncell[1] * ncell[2]
    cell_of = np.empty(n_all, np.int64)
    start = np.zeros(ncells + 1, np.int64)
    for i in range(n_all):
        c = cell_index(pos, i, lo, inv, ncell)
        cell_of[i] = c
        start[c + 1] += 1
    for c in range(ncells):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    atoms = np.empty(n_all, np.int64)
    for i in range(n_all):
        c = cell_of[i]
        atoms[fill[c]] = i
        fill[c] += 1
    return cell_of, start, atoms


@njit(parallel=True, nogil=True, cache=True)
def neighbor_lists(pos, nlocal, cell_of, start, atoms, ncell, reach, cut2, rc2, half, cap_own, cap_gh):
    """Verlet lists of the owned atoms, padded: ``(own_cnt, own_nbr, gh_cnt, gh_nbr, ok)``: the reference
    (with :func:`bin_atoms`) that the lists a run builds (:func:`~pympi_gpu.nbody.lj.cpu.lists.build`) are
    tested to equal row for row: a plain cell search over the positions in double precision.

    ``own_nbr[i, :own_cnt[i]]`` are the owned neighbours of owned atom i (j > i
    if ``half``), ``gh_nbr[i, :gh_cnt[i]]`` its ghost neighbours (all of them:
    with ``half`` the halo's half shell holds each pair between bricks on one
    side only, see :class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`).  Cells within ``reach`` cells in each
    direction are searched.  With ``half`` the owned atoms must be sorted by cell
    (as :meth:`LjSystem.rebuild` leaves them): the owned atoms of cells before
    atom i's are then skipped unread.  Each row lists the pairs within ``rc2``
    first (at the positions of the build), then the rest, so that the force
    loop's cutoff test mostly goes one way.  ``ok`` is False if some atom has
    more neighbours than the capacities ``cap_own``/``cap_gh`` (the caller
    retries with larger ones).
    """
    own_cnt = np.zeros(nlocal, np.int64)
    gh_cnt = np.zeros(nlocal, np.int64)
    # one spare column: the search writes every candidate, and counts only those kept (no branch)
    own_nbr = np.empty((nlocal, cap_own + 1), np.int32)
    gh_nbr = np.empty((nlocal, cap_gh + 1), np.int32)
    # positions in cell order: the search reads them contiguously
    sp = np.empty((atoms.size, 3))
    for k in prange(atoms.size):
        for d in range(3):
            sp[k, d] = pos[atoms[k], d]
    # end of the owned atoms of each cell (atoms[] lists a cell's atoms by index: owned first)
    ncells = start.size - 1
    own_end = np.empty(ncells, np.int64)
    for cc in prange(ncells):
        k = start[cc]
        while k < start[cc + 1] and atoms[k] < nlocal:
            k += 1
        own_end[cc] = k
    # one pass per cell: a stencil cell's atoms are read once for all the owned atoms of the cell
    for c in prange(ncells):
        m0 = start[c]
        m1 = own_end[c]
        if m1 == m0:
            continue
        cz = c % ncell[2]
        cy = (c // ncell[2]) % ncell[1]
        cx = c // (ncell[1] * ncell[2])
        for ax in range(max(cx - reach, 0), min(cx + reach + 1, ncell[0])):
            for ay in range(max(cy - reach, 0), min(cy + reach + 1, ncell[1])):
                base = (ax * ncell[1] + ay) * ncell[2]
                z0 = base + max(cz - reach, 0)
                z1 = base + min(cz + reach + 1, ncell[2])
                # the row's cells are consecutive: their atoms are one run of atoms[], except that
                # with half lists the owned atoms of cells before c (all j < i, sorted by cell) are skipped
                for cc in range(z0, z1):
                    if half and cc < c:
                        k0 = own_end[cc]
                        k1 = start[cc + 1]
                    elif cc == z0 or (half and cc - 1 < c):
                        k0 = start[cc]
                        k1 = start[z1]
                    else:
                        break
                    for m in range(m0, m1):
                        i = atoms[m]
                        xi = sp[m, 0]
                        yi = sp[m, 1]
                        zi = sp[m, 2]
                        no = own_cnt[i]
                        ng = gh_cnt[i]
                        for k in range(k0, k1):
                            j = atoms[k]
                            dx = xi - sp[k, 0]
                            dy = yi - sp[k, 1]
                            dz = zi - sp[k, 2]
                            inside = dx * dx + dy * dy + dz * dz < cut2
                            keep_own = j > i if half else j != i
                            is_own = j < nlocal
                            own_nbr[i, min(no, cap_own)] = j
                            gh_nbr[i, min(ng, cap_gh)] = j
                            no += inside and is_own and keep_own
                            ng += inside and not is_own
                        own_cnt[i] = no
                        gh_cnt[i] = ng
    over = 0
    nchunk = min(nlocal, 64)
    for t in prange(nchunk):
        tmp = np.empty(max(cap_own, cap_gh) + 1, np.int32)
        for i in range(t * nlocal // nchunk, (t + 1) * nlocal // nchunk):
            if own_cnt[i] > cap_own or gh_cnt[i] > cap_gh:
                over += 1
            else:
                _inside_first(pos, i, own_nbr, own_cnt[i], rc2, tmp)
                _inside_first(pos, i, gh_nbr, gh_cnt[i], rc2, tmp)
    return own_cnt, own_nbr, gh_cnt, gh_nbr, over == 0


@njit(cache=True, inline="always")
def _inside_first(pos, i, nbr, cnt, rc2, tmp):
    """Reorder ``nbr[i, :cnt]``: the neighbours within ``rc2`` of atom i first (stable)."""
    a = 0
    b = 0
    for k in range(cnt):
        j = nbr[i, k]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        near = dx * dx + dy * dy + dz * dz < rc2
        nbr[i, a] = j
        tmp[b] = j
        a += near
        b += not near
    for k in range(b):
        nbr[i, a + k] = tmp[k]
