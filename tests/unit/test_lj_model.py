"""LJ model, serial: lattice, velocities, brick geometry, neighbour lists and forces against direct sums."""

import dataclasses
import functools
import math

import numpy as np
import pytest

from helpers import lj_lists as ref_lists
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.domain import brick_of, grid_problem, owner_coords, wrap
from pympi_gpu.nbody.lj.lattice import cell_edge, cells_for, dof, fcc_positions, temperature, velocities
from pympi_gpu.nbody.lj.verify import reference_forces


def test_cells_for_rounds_to_nearest_fcc_cube():
    assert cells_for(32000) == 20 and cells_for(256000) == 40 and cells_for(4) == 1
    assert cells_for(1_000_000) == 63  # 4 * 63^3 = 1,000,188 is nearer than 4 * 62^3 = 953,312
    with pytest.raises(ValueError, match="too few"):
        cells_for(3)


def test_fcc_lattice_density_and_spacing():
    pos = fcc_positions(3, 0.8442)
    a = cell_edge(0.8442)
    assert pos.shape == (108, 3)
    assert len(pos) / (3 * a) ** 3 == pytest.approx(0.8442, rel=1e-14)
    d = pos[:, None, :] - pos[None, :, :]
    d -= 3 * a * np.round(d / (3 * a))
    r = np.sqrt((d ** 2).sum(-1))[np.triu_indices(108, 1)]
    assert r.min() == pytest.approx(a / math.sqrt(2), rel=1e-12)  # nearest neighbours of fcc
    assert np.sum(np.isclose(r, a / math.sqrt(2))) == 108 * 12 // 2
    with pytest.raises(ValueError):
        cell_edge(0.0)


def test_velocities_temperature_and_momentum():
    v = velocities(500, 1.44, 87287)
    assert np.abs(v.sum(axis=0)).max() < 1e-12
    assert temperature(v) == pytest.approx(1.44, rel=1e-14)
    assert dof(500) == 1497
    assert np.array_equal(v, velocities(500, 1.44, 87287))
    assert not np.array_equal(v, velocities(500, 1.44, 1))


def test_bricks_tile_the_box():
    box, dims = 10.0, (3, 2, 1)
    x = np.random.default_rng(1).random((2000, 3)) * box
    owners = owner_coords(x, box, dims)
    for c in np.ndindex(*dims):
        b = brick_of(box, dims, c)
        inside = np.all((x >= b.lo) & (x < b.hi), axis=1)
        assert np.array_equal(inside, np.all(owners == c, axis=1))
    assert grid_problem(box, dims, 2.8) is None
    why = grid_problem(8.0, (3, 1, 1), 2.8)
    assert "thinner than the cutoff + skin" in why and "3x1x1" in why
    assert np.array_equal(wrap(np.array([[-1e-300, 10.0, 3.5]]), box), [[0.0, 0.0, 3.5]])


def test_the_rank_grid_is_mpis_for_a_cube_and_the_least_brick_surface_for_other_boxes():
    """A cube as MPI_Dims_create splits it (every count to 64); a slab along its long axis; a box too thin along
    an axis for MPI's grid split where it can carry the halo; ties to MPI's grid."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.domain import grid_dims

    for ranks in range(1, 65):
        assert grid_dims(ranks, (7.5, 7.5, 7.5), 2.8) == tuple(MPI.Compute_dims(ranks, 3)) == grid_dims(ranks)
    assert grid_dims(3, (10.0, 10.0, 30.0)) == (1, 1, 3)
    assert grid_dims(4, (10.0, 10.0, 30.0)) == (1, 1, 4)     # bricks 10 x 10 x 7.5: less surface than 2x1x2
    assert grid_dims(8, (40.0, 20.0, 10.0)) == (4, 2, 1)
    assert grid_dims(3, (6.72, 10.08, 10.08), 2.8) == (1, 1, 3)  # MPI's 3x1x1: bricks 2.24 thick along x
    assert grid_dims(6, (20.0, 20.0, 20.0 + 1e-9)) == (3, 2, 1)  # a near-cube: MPI's grid, the tie's
    for ranks, box in ((6, (9.0, 30.0, 12.0)), (12, (3.0, 40.0, 40.0))):
        dims = grid_dims(ranks, box, 2.8)
        assert math.prod(dims) == ranks and grid_problem(box, dims, 2.8) is None


def test_bricks_tile_an_orthogonal_box():
    """Three edges: each axis cut by its own edge, folded by it, and each checked against cutoff + skin."""
    box, dims = (10.0, 6.0, 30.0), (2, 1, 3)
    x = np.random.default_rng(1).random((3000, 3)) * box
    owners = owner_coords(x, box, dims)
    for c in np.ndindex(*dims):
        b = brick_of(box, dims, c)
        assert b.box == box and b.hi == tuple(e * (k + 1) / d for e, k, d in zip(box, c, dims))
        inside = np.all((x >= b.lo) & (x < b.hi), axis=1)
        assert np.array_equal(inside, np.all(owners == c, axis=1))
    assert grid_problem(box, dims, 2.8) is None
    assert grid_problem(box, (1, 3, 1), 2.8) == (
        "the box (10 x 6 x 30 sigma) cut into a 1x3x1 rank grid makes bricks 2 sigma thick along y, thinner than "
        "the cutoff + skin (2.8); use fewer ranks or more atoms")
    assert grid_problem(box, (1, 1, 10), 2.8) is None  # 3 sigma along z
    assert np.array_equal(wrap(np.array([[-1e-300, 6.0, 31.5], [10.0, -0.5, 29.0]]), box),
                          [[0.0, 0.0, 1.5], [0.0, 5.5, 29.0]])
    cube = brick_of(7.5, (2, 1, 1), (1, 0, 0))
    assert cube.box == (7.5, 7.5, 7.5) and cube == brick_of((7.5, 7.5, 7.5), (2, 1, 1), (1, 0, 0))


def test_the_volume_of_a_cube_is_its_edge_cubed():
    """A cubic box's volume (the pressure's) is ``L ** 3``, as before the box had three edges: ``L * L * L``
    differs from it in the last bit for some edges."""
    from pympi_gpu.nbody.lj.box import edges, text, volume

    config = LjConfig(cells=10)
    assert config.volume == config.box[0] ** 3 == (10 * (4.0 / 0.8442) ** (1.0 / 3.0)) ** 3
    assert volume((2.0, 3.0, 5.0)) == 30.0 and edges(4) == (4.0, 4.0, 4.0)
    assert any(volume(e) != e * e * e for e in np.random.default_rng(0).uniform(5, 50, 200))
    assert text((10.0, 6.0, 30.0)) == "10 x 6 x 30" and text(config.box) == "16.796"


def _random_system(n=300, box=7.0, seed=3, cut=2.8, half_shell=False):
    """Atoms in [0, box)^3 kept 0.8 sigma apart, sorted by cell (as a rebuild leaves them),
    plus all 26 periodic images as ghosts (``half_shell``: the 13 whose offset's first nonzero entry
    is +1, as the halo of half lists holds them).  Copies of one drawing per arguments: the drawing
    (a quarter of a million distances in Python) took 2 s, in each of 40 tests."""
    return tuple(a.copy() for a in _drawn_system(n, box, seed, cut, half_shell))


@functools.cache
def _drawn_system(n, box, seed, cut, half_shell):
    rng = np.random.default_rng(seed)
    pts = []
    while len(pts) < n:
        p = rng.random(3) * box
        if all(np.linalg.norm((p - q) - box * np.round((p - q) / box)) > 0.8 for q in pts):
            pts.append(p)
    own = np.array(pts)
    ncell = int(2 * (box + 2 * cut) / cut)
    c = np.minimum(((own + cut) * (ncell / (box + 2 * cut))).astype(int), ncell - 1)
    own = own[np.lexsort((c[:, 2], c[:, 1], c[:, 0]))]
    offsets = [np.array(s) - 1 for s in np.ndindex(3, 3, 3) if s != (1, 1, 1)]
    shifts = [(o + 1) * box for o in offsets if not half_shell or o[np.flatnonzero(o)[0]] == 1]
    ghosts = np.vstack([own + (s - box) for s in shifts])
    return own, np.vstack([own, ghosts])


@pytest.mark.parametrize("half", [True, False])
def test_neighbor_lists_match_brute_force(half):
    box, cut = 7.0, 2.8
    own, pos = _random_system(box=box)
    n = len(own)
    ncell = np.full(3, int(2 * (box + 2 * cut) / cut), np.int64)
    lo = np.full(3, -cut)
    inv = ncell / (box + 2 * cut)
    cell_of, start, atoms = ref_lists.bin_atoms(pos, len(pos), lo, inv, ncell)
    oc, on, gc, gn, ok = ref_lists.neighbor_lists(pos, n, cell_of, start, atoms, ncell, 2, cut * cut, 2.5 ** 2, half,
                                           4, 4)
    assert not ok  # capacities of 4 are too small: the caller must retry
    oc, on, gc, gn, ok = ref_lists.neighbor_lists(pos, n, cell_of, start, atoms, ncell, 2, cut * cut, 2.5 ** 2, half,
                                           200, 200)
    assert ok
    d2 = ((pos[:n, None, :] - pos[None, :, :]) ** 2).sum(-1)
    for i in range(n):
        want = set(np.nonzero(d2[i] < cut * cut)[0]) - {i}
        got_own = set(on[i, :oc[i]])
        got_gh = set(gn[i, :gc[i]])
        assert len(got_own) == oc[i] and len(got_gh) == gc[i]  # no repeats
        assert got_gh == {j for j in want if j >= n}
        assert got_own == {j for j in want if j < n and (j > i or not half)}
        # the pairs within the force cutoff come first in each row
        for row, cnt in ((on[i], oc[i]), (gn[i], gc[i])):
            near = d2[i, row[:cnt]] < 2.5 ** 2
            assert not np.any(near[1:] & ~near[:-1])


def _same_rows(got, ref, n):
    """The lists ``got`` (``(own_cnt, own_nbr, gh_cnt, gh_nbr)``) hold ``ref``'s n rows, entry for entry."""
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[2], ref[2])
    for i in range(n):
        assert np.array_equal(got[1][i, :got[0][i]], ref[1][i, :ref[0][i]])
        assert np.array_equal(got[3][i, :got[2][i]], ref[3][i, :ref[2][i]])


@pytest.mark.parametrize("half", [True, False])
@pytest.mark.parametrize("box", [7.0, 9.3])
@pytest.mark.parametrize("simd", [16, 8, 4])
@pytest.mark.parametrize("block", [1, 2, 4])
def test_serial_lists_equal_the_parallel_build_row_for_row(half, box, simd, block, monkeypatch):
    """The one-thread engine's build (lists_cpu) lists the same neighbours in the same order, row for
    row, as neighbor_lists (the GPU's build is held to the latter), with each scan (sixteen lanes and a
    compress, eight or four lanes and a table: LLVM compiles the vector code for any CPU), and
    whatever the cells a gather serves (1, or blocks of 2 or 4 that do not divide a column's 9 or 10
    cells); a row too long for the first widths is built again wider, not cut."""
    from pympi_gpu.nbody.lj.cpu import lists as lists_cpu
    from pympi_gpu.nbody.lj.cpu.lists import VerletLists
    from pympi_gpu.nbody.lj.system import CellGrid

    monkeypatch.setattr(lists_cpu, "SIMD", simd)
    monkeypatch.setattr(lists_cpu, "BLOCK", block)

    cut = 2.8
    own, pos = _random_system(box=box, seed=3)
    n = len(own)
    ncell = np.full(3, int(2 * (box + 2 * cut) / cut), np.int64)
    grid = CellGrid(lo=np.full(3, -cut), inv=ncell / (box + 2 * cut), ncell=ncell, reach=2, capacity=(4, 4))
    cell_of, start, atoms = ref_lists.bin_atoms(pos, len(pos), grid.lo, grid.inv, grid.ncell)
    ref = ref_lists.neighbor_lists(pos, n, cell_of, start, atoms, ncell, 2, cut * cut, 2.5 ** 2, half, 300, 300)
    assert ref[-1]
    lists = VerletLists((4, 4))
    for _ in range(2):  # the second build reuses the buffers the first grew
        got = lists.build(pos, n, grid, cut * cut, 2.5 ** 2, half)
        _same_rows(got, ref, n)
    assert lists.widths[0] >= got[0].max() > 4 and lists.widths[1] >= got[2].max() > 4


@pytest.mark.parametrize("simd", [16, 8, 4])
@pytest.mark.parametrize("flown", [False, True])
def test_serial_lists_decide_a_hair_from_either_radius_in_double(simd, flown, monkeypatch):
    """Pairs a hair (1e-9 relative, or nothing) inside and outside rc and the list radius, which the
    single-precision scan cannot tell apart, are listed as the double build lists them (the test
    checks that single precision alone would list some wrongly); with an atom flown a long way off
    (``flown``: a margin of no use) every candidate is tested in double, and the rows still agree."""
    from pympi_gpu.nbody.lj.cpu import lists as lists_cpu
    from pympi_gpu.nbody.lj.cpu.lists import VerletLists
    from pympi_gpu.nbody.lj.system import CellGrid

    monkeypatch.setattr(lists_cpu, "SIMD", simd)
    box, cut, rc = 7.0, 2.8, 2.5
    rng = np.random.default_rng(5)
    centres = (np.stack(np.meshgrid(*[np.arange(4)] * 3, indexing="ij"), -1).reshape(-1, 3) + 0.5) * box / 4
    unit = rng.normal(size=centres.shape)
    unit /= np.linalg.norm(unit, axis=1)[:, None]
    radii = np.array([r * (1 + e) for r in (rc, cut) for e in (-1e-9, 0.0, 1e-9)])
    partners = centres + unit * radii[np.arange(len(centres)) % len(radii), None]
    own = np.vstack([centres, partners]) % box
    ncell = np.full(3, int(2 * (box + 2 * cut) / cut), np.int64)
    c = np.minimum(((own + cut) * (ncell / (box + 2 * cut))).astype(int), ncell - 1)
    own = own[np.lexsort((c[:, 2], c[:, 1], c[:, 0]))]
    shifts = [(np.array(s) - 1) * box for s in np.ndindex(3, 3, 3) if s != (1, 1, 1)]
    pos = np.vstack([own] + [own + s for s in shifts] + ([np.array([[1e9, 3.0, 3.0]])] if flown else []))
    n = len(own)
    lo = np.full(3, -cut)
    grid = CellGrid(lo=lo, inv=ncell / (box + 2 * cut), ncell=ncell, reach=2, capacity=(4, 4))
    d64 = ((pos[:n, None, :] - pos[None, :, :]) ** 2).sum(-1)
    rel = (pos - lo).astype(np.float32)
    d32 = ((rel[:n, None, :] - rel[None, :, :]) ** 2).sum(-1, dtype=np.float32)
    assert np.any((d32 < rc * rc) != (d64 < rc * rc)) and np.any((d32 < cut * cut) != (d64 < cut * cut))
    cell_of, start, atoms = ref_lists.bin_atoms(pos, len(pos), grid.lo, grid.inv, grid.ncell)
    for half in (True, False):
        ref = ref_lists.neighbor_lists(pos, n, cell_of, start, atoms, ncell, 2, cut * cut, rc * rc, half, 300, 300)
        _same_rows(VerletLists((4, 4)).build(pos, n, grid, cut * cut, rc * rc, half), ref, n)


@pytest.mark.parametrize("name, features, lanes", [
    (None, "+avx512f,+avx2,+fma", 16), (None, "+avx2,+fma,-avx512f", 8), (None, "+sse4.2,+neon", 4),
    ("generic", None, 4), ("znver3", None, 4)])
def test_the_scan_lanes_follow_the_cpu_numba_compiles_for(name, features, lanes, monkeypatch):
    """Sixteen lanes where numba is told AVX-512, eight where AVX2, else four; a CPU named without
    its features counts as having none (the code must run on every CPU the name covers)."""
    from numba.core import config

    from pympi_gpu.nbody.lj.cpu import lists as lists_cpu

    monkeypatch.setattr(config, "CPU_NAME", name)
    monkeypatch.setattr(config, "CPU_FEATURES", features)
    assert lists_cpu._vector_lanes() == lanes


@pytest.mark.parametrize("edges", [(7.3, 7.3, 7.3), (7.3, 6.1, 9.7)])
def test_engine_kernels_do_the_numpy_operations(edges):
    """The serial kernels of the one-thread engine against the NumPy (or parallel) code they replace,
    bit for bit: kick + drift + displacement, the fold, the sort by (cell, id), a rebuild's packing and sort, a
    migration split; in a cube and in an orthogonal box of three edges."""
    rng = np.random.default_rng(5)
    n, box = 300, np.array(edges)
    x = rng.uniform(-1.0, 1.0, (n, 3)) + rng.uniform(0.0, 1.0, (n, 3)) * box
    x[0] = [-1e-300, box[1], 3.5]
    v, f, x0 = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)), x + rng.normal(scale=0.1, size=(n, 3))
    v1, x1 = v.copy(), x.copy()
    d2 = kc.kick_drift(v1, f, x1, x0, 0.0025, 0.005, n)
    v2, x2 = v.copy(), x.copy()
    v2 += 0.0025 * f
    x2 += 0.005 * v2
    assert v1.tobytes() == v2.tobytes() and x1.tobytes() == x2.tobytes()
    assert d2 == kc.max_displacement2(x2, x0, n)
    x1[5, 1] = np.nan
    assert kc.kick_drift(v1, np.zeros_like(f), x1, x0, 0.0, 0.0, n) == np.inf
    folded = x.copy()
    kc.wrap_rows(folded, n, box)
    assert folded.tobytes() == wrap(x, box).tobytes()
    ids = rng.permutation(n).astype(np.int64) + 1
    lo, ncell = np.zeros(3), np.full(3, 4, np.int64)
    inv = ncell / box
    order = np.empty(n, np.int64)
    kc.cell_order(folded, ids, n, lo, inv, ncell, order, np.empty(n, np.int64), np.empty(65, np.int64))
    cell_of = ref_lists.bin_atoms(folded, n, lo, inv, ncell)[0]
    assert np.array_equal(order, np.lexsort((ids, cell_of)))
    # what a rebuild moves: packed as [x v f id], the positions folded (the finite test on the way), then
    # sorted into the state
    packed = np.empty((n, 10))
    assert kc.pack_migrants(x, v, f, ids, n, packed, box)
    assert packed.tobytes() == np.column_stack([folded, v, f, ids.astype(np.float64)]).tobytes()
    f_bad = f.copy()
    f_bad[7, 2] = np.inf
    assert not kc.pack_migrants(x, v, f_bad, ids, n, np.empty((n, 10)), box)
    pos, vel, frc, x0 = (np.empty((n, 3)) for _ in range(4))
    gid = np.empty(n, np.int64)
    kc.sort_migrants(packed, n, lo, inv, ncell, np.empty(n, np.int64), np.empty(n, np.int64), np.empty(65, np.int64),
                     pos, vel, frc, gid, x0)
    assert pos.tobytes() == folded[order].tobytes() == x0.tobytes()
    assert vel.tobytes() == v[order].tobytes() and frc.tobytes() == f[order].tobytes()
    assert np.array_equal(gid, ids[order])
    rows = np.column_stack([folded, v, ids.astype(np.float64)])
    keep = rows.copy()
    down, up = np.empty_like(rows), np.empty_like(rows)
    stay, nd, nu = kc.leaving_rows(keep, n, 3 / box[0], 3, 1, 0, down, up)
    c = owner_coords(folded, box, (3, 1, 1))[:, 0]
    assert stay == np.sum(c == 1) and nd == np.sum(c == 0) and nu == np.sum(c == 2)
    assert keep[:stay].tobytes() == rows[c == 1].tobytes()
    assert down[:nd].tobytes() == rows[c == 0].tobytes() and up[:nu].tobytes() == rows[c == 2].tobytes()
    assert kc.leaving_rows(rows.copy(), n, 4 / box[0], 4, 1, 0, down, up)[0] == -1  # some atom two bricks away


@pytest.mark.parametrize("half_shell", [False, True])
def test_local_stages_say_what_room_they_lack(half_shell):
    """The ghost plan of a brick that is its own image along every dimension, in one call: short of plan
    entries or of rows it says how many it needs (so a large brick grows once, not by doublings of both),
    and with that room it makes what the stages made one at a time.  The half shell (only ghosts go up)
    holds the full shell's ghosts whose offset's first nonzero entry is +1."""
    rng = np.random.default_rng(11)
    n, box, cut = 2000, 12.0, 2.8
    pos = np.zeros((n, 3))
    pos[:] = rng.uniform(0.0, box, (n, 3))
    gid = np.arange(1, n + 1, dtype=np.int64)
    below, above = np.full(3, cut), np.full(3, box - cut)
    pshift = np.zeros((6, 3))
    for d in range(3):
        pshift[2 * d, d], pshift[2 * d + 1, d] = box, -box
    poff, pstart, counts = np.zeros(7, np.int64), np.zeros(6, np.int64), np.zeros(6, np.int64)
    up0 = n if half_shell else 0
    m, entries, rows = kc.local_stages(pos, gid, n, 0, 3, below, above, np.zeros(8, np.int64), poff, up0, pshift,
                                       pstart, counts)
    assert (m, entries, rows) == (-1, 2 * n + 1, 0)
    plan = np.zeros(20 * n, np.int64)
    m, entries, rows = kc.local_stages(pos, gid, n, 0, 3, below, above, plan, poff, up0, pshift, pstart, counts)
    assert m == -1 and entries == 0 and rows > n
    big, big_gid = np.zeros((rows + 10 * n, 3)), np.zeros(rows + 10 * n, np.int64)
    big[:n], big_gid[:n] = pos, gid
    m, entries, rows = kc.local_stages(big, big_gid, n, 0, 3, below, above, plan, poff, up0, pshift, pstart, counts)
    assert entries == rows == 0 and m == n + counts.sum()
    # stage by stage, as the plan is built without the fused call
    ref, ref_gid, held = big.copy(), big_gid.copy(), n
    ref[n:], ref_gid[n:] = 0.0, 0
    for d in range(3):
        o = poff[2 * d]
        nl, nh = kc.border_plan(ref, held, d, below[d], above[d], plan.copy(), o, up0)
        assert (nl, nh) == (counts[2 * d], counts[2 * d + 1]) and pstart[2 * d] == held
        kc.border_rows(ref, ref_gid, plan, o, nl, nh, pshift, 2 * d, None, held)
        held += nl + nh
    assert ref[:m].tobytes() == big[:m].tobytes() and np.array_equal(ref_gid[:m], big_gid[:m])
    # the images made, against every image of every atom within the cutoff of the box
    images = set()
    for o in np.ndindex(3, 3, 3):
        o = np.array(o) - 1
        if not o.any() or (half_shell and o[np.flatnonzero(o)[0]] != 1):
            continue
        q = pos[:n] + o * box
        near = np.all((q >= -cut) & (q < box + cut), axis=1)
        images.update({(int(g), *map(float, p)) for g, p in zip(gid[:n][near], q[near])})
    made = [(int(g), *map(float, p)) for g, p in zip(big_gid[n:m], big[n:m])]
    assert len(made) == len(set(made)) and set(made) == images


def test_forces_match_direct_sum_newton_and_one_sided():
    box, cut, rc = 7.0, 2.8, 2.5
    ncell = np.full(3, int(2 * (box + 2 * cut) / cut), np.int64)
    lo, inv = np.full(3, -cut), np.full(3, int(2 * (box + 2 * cut) / cut) / (box + 2 * cut))
    forces = kc.force_kernels(LjConfig(cells=1).pair_term)
    results = []
    for half in (True, False):  # half lists: the half shell's 13 images (each pair between images once)
        own, pos = _random_system(box=box, half_shell=half)
        n = len(own)
        ref, mag = reference_forces(own, box, rc, np.arange(n))
        cell_of, start, atoms = ref_lists.bin_atoms(pos, len(pos), lo, inv, ncell)
        oc, on, gc, gn, ok = ref_lists.neighbor_lists(pos, n, cell_of, start, atoms, ncell, 2, cut * cut, rc * rc,
                                               half, 200, 200)
        f = np.zeros((len(pos), 3))
        e1, w1 = forces.pair_forces(pos, f, 0, n, oc, on, rc * rc, half)
        e2, w2 = forces.pair_forces(pos, f, 0, n, gc, gn, rc * rc, half)
        s = 1.0 if half else 0.5
        results.append((s * (e1 + e2), s * (w1 + w2)))
        if half:  # Newton across the periodic boundary: the images' forces belong to their atoms
            f = f.reshape(14, n, 3).sum(axis=0)
        else:
            assert not np.any(f[n:])
            f = f[:n]
        assert np.all(np.linalg.norm(f - ref, axis=1) <= 1e-13 * mag)
    # energy and virial: direct double sum over pairs and images
    d = own[:, None, :] - own[None, :, :]
    d -= box * np.round(d / box)  # box 7 > 2 rc: the nearest image is the only one in range
    r2 = (d ** 2).sum(-1)
    m = (r2 < rc * rc) & (r2 > 0)
    r6i = np.where(m, 1.0 / np.where(m, r2, 1) ** 3, 0)
    e_ref = 0.5 * np.sum(4 * r6i * (r6i - 1))
    w_ref = 0.5 * np.sum(r6i * (48 * r6i - 24))
    for e, w in results:
        assert e == pytest.approx(e_ref, rel=1e-12) and w == pytest.approx(w_ref, rel=1e-12)


def _pair_forces(forces, pos, n, half, box=7.0, cut=2.8, rc=2.5):
    """Forces on the ``n`` owned atoms of ``pos`` (their images after) and the pairs' energy and virial."""
    ncell = np.full(3, int(2 * (box + 2 * cut) / cut), np.int64)
    lo, inv = np.full(3, -cut), np.full(3, int(2 * (box + 2 * cut) / cut) / (box + 2 * cut))
    cell_of, start, atoms = ref_lists.bin_atoms(pos, len(pos), lo, inv, ncell)
    oc, on, gc, gn, _ = ref_lists.neighbor_lists(pos, n, cell_of, start, atoms, ncell, 2, cut * cut, rc * rc, half, 200, 200)
    f = np.zeros((len(pos), 3))
    e1, w1 = forces.pair_forces(pos, f, 0, n, oc, on, rc * rc, half)
    e2, w2 = forces.pair_forces(pos, f, 0, n, gc, gn, rc * rc, half)
    s = 1.0 if half else 0.5
    f = f.reshape(14, n, 3).sum(axis=0) if half else f[:n]
    return f, s * (e1 + e2), s * (w1 + w2)


@pytest.mark.parametrize("half", [True, False], ids=["half lists", "full lists"])
def test_mixed_precision_forces_are_the_double_ones_to_single_precision(half):
    """``--precision mixed``: on one state the forces within 1e-6 of double's (RMS over the atoms, relative
    to the RMS force), the energy and virial within 1e-6; the kernels' other arithmetic is double's, so a
    force kernel of a double term is the reference bit for bit (test above), and the mixed forces are no
    copy of it (they differ)."""
    own, pos = _random_system(box=7.0, half_shell=half)
    n = len(own)
    config = LjConfig(cells=1)
    f64, e64, w64 = _pair_forces(kc.force_kernels(config.pair_term), pos, n, half)
    mixed = dataclasses.replace(config, precision="mixed")
    f32, e32, w32 = _pair_forces(kc.force_kernels(mixed.pair_term), pos, n, half)
    rms = np.sqrt(np.mean(np.sum(f64 ** 2, axis=1)))
    err = np.sqrt(np.mean(np.sum((f32 - f64) ** 2, axis=1))) / rms
    assert 0 < err < 1e-6
    assert e32 == pytest.approx(e64, rel=1e-6) and w32 == pytest.approx(w64, rel=1e-6)
    assert e32 != e64


def test_lammps_bench_step_zero():
    """Step 0 of LAMMPS bench/in.lj (32,000 atoms): TotEng -4.6134356, Press -5.0197073 in its log."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.domain import make_cart
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays
    from pympi_gpu.nbody.loop import RunOptions, simulate

    config = LjConfig(cells=20)
    cart = make_cart(MPI.COMM_SELF)
    try:
        system = LjSystem(cart, config, *initial_arrays(config, brick_of(config.box, (1, 1, 1), (0, 0, 0))))
        run = simulate(cart, system, RunOptions(steps=0))
    finally:
        cart.Free()
    t = run.thermo[0]
    assert (round(t.temp, 7), round(t.e_pair, 7), round(t.etotal, 7), round(t.press, 7)) == \
        (1.44, -6.7733681, -4.6134356, -5.0197073)
    # fcc shells within 2.8 sigma: 12 + 6 + 24 + 12 + 24 = 78 neighbours, 39 pairs per atom
    assert run.neighbors_per_atom == 39.0


@pytest.mark.parametrize("newton", [True, False])
def test_small_box_several_images_of_a_neighbour(newton):
    """108 atoms in a 5.04-sigma box on one brick: an atom can see two periodic images of the same
    neighbour within rc + skin, which Newton's id rule must list (and the reverse pass bring home) each
    once.  Forces after 20 steps against a direct sum over all images."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.domain import make_cart
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays
    from pympi_gpu.nbody.loop import RunOptions, simulate

    config = LjConfig(cells=3, newton=newton)
    cart = make_cart(MPI.COMM_SELF)
    try:
        system = LjSystem(cart, config, *initial_arrays(config, brick_of(config.box, (1, 1, 1), (0, 0, 0))))
        simulate(cart, system, RunOptions(steps=20))
        system.atoms.compute_forces(forward=True)
        got = system.atoms.owned()
    finally:
        cart.Free()
    order = np.argsort(got["id"])
    x, f = got["x"][order], got["f"][order]
    ref, mag = reference_forces(x, config.box, config.cutoff, np.arange(config.atoms))
    assert np.all(np.linalg.norm(f - ref, axis=1) <= 1e-13 * mag)
    shifts = np.array(list(np.ndindex(3, 3, 3))) - 1.0
    d = (x[0] - x)[:, None, :] + config.box * shifts[None, :, :]  # atom 0 and every image of every atom
    images = (np.sum(d * d, axis=-1) < config.cutneigh ** 2).sum(axis=1)
    assert images[1:].max() >= 2  # some neighbour is in reach through two images


@pytest.mark.parametrize("call", ["run_ops", "run_steps"])
def test_a_failed_mpi_call_from_a_kernel_raises_its_own_code(call):
    """A kernel's MPI call that failed after others were counted (a step's program, or a batch of steps):
    the error carries the call's code, and the counted calls reach the clock."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.domain import make_cart
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

    config = LjConfig(cells=3)
    cart = make_cart(MPI.COMM_SELF)
    try:
        system = LjSystem(cart, config, *initial_arrays(config, brick_of(config.box, (1, 1, 1), (0, 0, 0))))
        atoms = system.atoms
        system.prepare()

        def failing(*args):
            atoms._tally[kc.TALLY_BYTES], atoms._tally[kc.TALLY_MESSAGES] = 16.0, 1.0
            atoms._tally[kc.TALLY_ERROR] = MPI.ERR_REQUEST
            return (kc.MPI_FAILED, 1, 0) if call == "run_steps" else kc.MPI_FAILED

        if call == "run_steps":
            atoms._batch = failing
        else:
            atoms.forces = atoms.forces._replace(run_ops=failing)
        before = system.clock.messages
        with pytest.raises(MPI.Exception) as caught:
            atoms.steps(5) if call == "run_steps" else atoms.step()
        assert caught.value.Get_error_code() == MPI.ERR_REQUEST
        assert system.clock.messages == before + 1
    finally:
        system.close()
        cart.Free()


def test_a_checkpoints_box_is_three_edges_or_one():
    """A checkpoint of a file's run records its box as three edges; one written before the box had three
    holds one number, a cube's edge, and is read so; anything else is no box."""
    from pympi_gpu.nbody.lj.checkpoint import box_of, recorded_box

    assert recorded_box([10.0, 6.0, 30.0]) == (10.0, 6.0, 30.0)
    assert recorded_box(16.5) == recorded_box([16.5] * 3) == (16.5, 16.5, 16.5)
    for bad in (None, True, [1.0, 2.0], [1.0, "2", 3.0], [1.0, float("inf"), 3.0], [1.0, 0.0, 3.0], "10"):
        assert recorded_box(bad) is None, bad
    assert box_of({"init": {}, "box": [10.0, 6.0, 30.0]}) == (10.0, 6.0, 30.0)
    assert box_of({"cells": 10, "density": 0.8442}) == LjConfig(cells=10).box
