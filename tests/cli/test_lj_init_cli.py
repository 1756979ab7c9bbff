"""``pympi-nbody --model lj --init PATH`` driven as a user drives it (issue 58, items 1, 2, 4 and 5).

A LAMMPS data file of bench/in.lj's state runs as the lattice start runs, bit for bit, at 3 ranks; a file
without velocities gets the lattice start's; a run started from a file restarts bit for bit; the last frame of
a ``--dump`` (extended XYZ, GSD) starts a run whose first row is the dumped step's, to the file's precision;
states written by ASE and by the ``gsd`` package run as written; a data file LAMMPS writes itself runs 100 NVE
steps in both codes to the same thermo (1e-10); bad files are refused in one message, exit 2, at 1, 2 and 3
ranks, no rank left waiting.  An orthogonal box of three edges: LAMMPS's 100 NVE steps from its own file
(1e-10), the state the same at 1, 2 and 3 ranks, a restart bit for bit, --dump's frames read back, an axis
too thin refused along it.  The readers themselves: tests/unit/test_lj_readers.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, refused, run, script
from helpers.lammps import lammps_executable, run_lammps
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lammps import data_script, input_script, read_log, write_data

NBODY = script("pympi-nbody")
ENV = clean_env(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
CONFIG = LjConfig(cells=6)  # 864 atoms: bricks of 3.36 sigma at 3 ranks
ROW = ("temp", "e_pair", "ke", "etotal", "press")


def lj(ranks: int, *args, timeout: float = 300):
    argv = ([] if ranks == 1 else mpiexec_argv(ranks)) + [NBODY, *map(str, args), "--model", "lj", "--threads", "1"]
    return run(argv, env=ENV, timeout=timeout)


def doc(out) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def rows(d: dict) -> list[tuple]:
    return [(r["step"], *(r[k] for k in ROW)) for r in d["thermo"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """bench/in.lj's 864 atoms at 3 ranks from the lattice and from a data file of it, the file's run continued
    from a checkpoint, and the trajectories they leave."""
    d = tmp_path_factory.mktemp("init")
    write_data(d / "x.data", CONFIG)
    common = ("--thermo", 10, "--json", "-q")
    out = {"dir": d}
    # (a checkpoint at step 10 in each: the step after one rebuilds, as a run restarted from it does)
    out["lattice"] = doc(lj(3, CONFIG.atoms, "--steps", 20, "--checkpoint", d / "l.npz", "--checkpoint-every", 10,
                            *common))
    out["file"] = doc(lj(3, "--init", d / "x.data", "--steps", 20, "--dump", d / "r.extxyz", "--dump-every", 20,
                         "--checkpoint", d / "f.npz", "--checkpoint-every", 10, *common))
    out["first"] = doc(lj(3, "--init", d / "x.data", "--steps", 10, "--checkpoint", d / "c.npz", "--dump",
                          d / "r.gsd", "--dump-every", 10, *common))
    out["restarted"] = doc(lj(3, "--init", d / "x.data", "--steps", 20, "--restart", d / "c.npz", "--checkpoint",
                              d / "c.npz", *common))
    return out


def test_a_data_file_runs_as_the_lattice_it_holds(runs):
    """The file holds bench/in.lj's state: the run is the lattice's, row for row, bit for bit, at 3 ranks."""
    assert rows(runs["file"]) == rows(runs["lattice"])
    assert runs["file"]["init"] == {"spec": str(runs["dir"] / "x.data"), "kind": "lammps", "velocities": True}
    assert runs["file"]["atoms"] == 864 and runs["file"]["box"] == list(CONFIG.box) and runs["lattice"]["init"] is None


def test_a_run_from_a_file_restarts_bit_for_bit(runs):
    assert rows(runs["restarted"])[-1] == rows(runs["file"])[-1]
    assert runs["restarted"]["first_step"] == 10 and runs["restarted"]["init"]["spec"] == runs["file"]["init"]["spec"]
    other = runs["dir"] / "other.data"
    write_data(other, LjConfig(cells=6, temperature=2.0))
    refused(lj(2, "--init", other, "--steps", 30, "--restart", runs["dir"] / "c.npz", timeout=120),
            f"was started from --init {runs['dir'] / 'x.data'}, not {other}")


@pytest.mark.parametrize("dumped, precision", [("r.extxyz", 1e-13), ("r.gsd", 2e-6)])
def test_the_last_frame_of_a_dump_starts_the_dumped_steps_row(runs, dumped, precision):
    """extended XYZ keeps every digit (the pressure moves by the positions' folding, 1e-15); GSD float32s."""
    source = runs["file"] if dumped.endswith("extxyz") else runs["first"]
    want = source["thermo"][-1]
    got = doc(lj(3, "--init", runs["dir"] / dumped, "--steps", 0, "--json", "-q"))["thermo"][0]
    assert got["step"] == 0
    for k in ("temp", "e_pair", "ke", "etotal"):
        assert got[k] == pytest.approx(want[k], rel=precision, abs=0), k
    assert got["press"] == pytest.approx(want["press"], abs=100 * precision * abs(want["e_pair"])), "press"


def test_a_file_without_velocities_gets_the_lattice_starts(tmp_path):
    """Positions only: velocities drawn at --temperature and --seed, atom for atom the lattice start's."""
    text = (tmp_path / "x.data")
    write_data(text, CONFIG)
    text.write_text(text.read_text().split("\nVelocities")[0] + "\n")
    common = ("--temperature", 2.0, "--seed", 5, "--steps", 0, "--json", "-q")
    assert rows(doc(lj(2, "--init", text, *common))) == rows(doc(lj(2, CONFIG.atoms, *common)))


def _temperature(v: np.ndarray) -> float:
    return float(np.sum(v * v)) / (3 * len(v) - 3)


def test_states_written_by_ase_and_by_gsd_run_as_written(tmp_path):
    """ase.io.write's extended XYZ (momenta of unit mass) and gsd.hoomd's frame: the run's step-0 temperature is
    the file's velocities'."""
    import ase
    import ase.io
    import gsd.hoomd

    from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities

    x, v, box = fcc_positions(6, 0.8442), velocities(864, 1.0, 3), CONFIG.box[0]
    atoms = ase.Atoms(["X"] * 864, positions=x, cell=[box] * 3, pbc=True)
    atoms.set_velocities(v)
    ase.io.write(tmp_path / "ase.extxyz", atoms)
    back = ase.io.read(tmp_path / "ase.extxyz")
    frame = gsd.hoomd.Frame()
    frame.configuration.box = [box, box, box, 0, 0, 0]
    frame.particles.N, frame.particles.types = 864, ["A"]
    frame.particles.position, frame.particles.velocity = (x - box / 2).astype(np.float32), v.astype(np.float32)
    with gsd.hoomd.open(tmp_path / "h.gsd", "w") as f:
        f.append(frame)
    for name, want in (("ase.extxyz", back.get_velocities()), ("h.gsd", v.astype(np.float32).astype(np.float64))):
        got = doc(lj(2, "--init", tmp_path / name, "--steps", 0, "--json", "-q"))
        assert got["init"]["kind"] == name.split(".")[1] and got["init"]["velocities"]
        assert got["thermo"][0]["temp"] == pytest.approx(_temperature(want), rel=1e-14)


# -- against LAMMPS, from a data file LAMMPS writes itself -------------------------------------------------

@pytest.mark.parametrize("ranks", [1, 3])
def test_nve_from_a_data_file_lammps_wrote_agrees_with_lammps(tmp_path, ranks):
    """LAMMPS makes 864 atoms its own way (its velocities, atoms moved up to 0.1 sigma, a box from -L/2) and
    writes them with write_data (Pair Coeffs, image flags); both codes run 100 NVE steps from that file: the
    thermo at step 100 within 1e-10 relative (measured: about 1e-12, the digits LAMMPS prints)."""
    lmp = lammps_executable()
    config = CONFIG
    run_lammps(lmp, tmp_path, data_script(config, tmp_path / "x.data", displace=0.1), name="make.lj")
    theirs = read_log(run_lammps(lmp, tmp_path, input_script(config, tmp_path / "x.data", 100)))[0]
    ours = doc(lj(ranks, "--init", tmp_path / "x.data", "--steps", 100, "--thermo", 100, "--json", "-q"))["thermo"]
    assert [r["step"] for r in ours] == [r["step"] for r in theirs] == [0, 100]
    for a, b in zip(ours, theirs):
        for k in ROW:
            assert a[k] == pytest.approx(b[k], rel=1e-10), (a["step"], k)


# -- refused -----------------------------------------------------------------------------------------------

def _data(tmp_path, edit=None, name="x.data", config=CONFIG) -> str:
    path = tmp_path / name
    write_data(path, config)
    if edit:
        path.write_text(edit(path.read_text()))
    return str(path)


def _atoms_row(text: str, i: int, row: str) -> str:
    lines = text.split("\n")
    at = lines.index("Atoms # atomic") + 2 + i
    lines[at] = row
    return "\n".join(lines)


REFUSED = [  # (a file made in a directory, the message): each tried at 1 rank and at 3
    (lambda t: ["--init", t / "nothing.data"], "--init '{t}/nothing.data' does not exist"),
    (lambda t: ["--init", _data(t, name="notes.txt", edit=lambda s: "my notes\n")], "is of no known kind"),
    (lambda t: ["--init", _data(t, lambda s: s.replace("xlo xhi", "xlo xhi\n0.5 0 0 xy xz yz"))],
     "line 7: a triclinic box (tilt factors 0.5 0 0): this engine runs one atom type of mass 1"),
    (lambda t: ["--init", _data(t, lambda s: s.replace("1 atom types", "2 atom types"))], "line 4: 2 atom types"),
    (lambda t: ["--init", _data(t, lambda s: s[:len(s) // 2])],
     "line 916: the Velocities section ends after 33 of its 864 rows: the file is cut short"),
    (lambda t: ["--init", _data(t, lambda s: _atoms_row(s, 700, "3 1 5.0 5.0 5.0"))],
     "atom id 3 is given twice (lines 18 and 716)"),
    (lambda t: ["--init", _data(t, lambda s: _atoms_row(s, 700, "701 1 0 0 0"))],
     "atoms 1 and 701 (lines 16 and 716) are at one place"),
    (lambda t: ["--init", _data(t, lambda s: _atoms_row(s, 700, "701 1 nan 0 0"))],
     "line 716: atom 701 is at (nan, 0, 0), not a finite position"),
    (lambda t: ["--init", _data(t, config=LjConfig(cells=1))],
     "the box (1.68 sigma) cut into a 1x1x1 rank grid makes bricks 1.68 sigma thick along x, thinner than the "
     "cutoff + skin (2.8); use fewer ranks"),
    (lambda t: ["500", "--init", _data(t)], "ATOMS is 500, but --init"),
    (lambda t: ["--init", _data(t), "--density", "0.9"], "--density sets the fcc lattice's density"),
    (lambda t: ["--init", _data(t, lambda s: s.replace("\nAtoms", "\nPair Coeffs # lj/cut\n\n1 1.2 1\n\nAtoms"))],
     "its Pair Coeffs (lj/cut) say epsilon 1.2, the run's are epsilon 1: give --pair-coeff epsilon=1.2"),
]


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("make, words", REFUSED, ids=[w.split(":")[0][:40] for _, w in REFUSED])
def test_a_bad_file_is_refused_once_exit_2_no_rank_waiting(tmp_path, ranks, make, words):
    if "1x1x1" in words and ranks == 3:
        words = words.replace("1x1x1", "3x1x1").replace("bricks 1.68", "bricks 0.5599")
    refused(lj(ranks, *make(tmp_path), "--steps", 1, timeout=120), words.format(t=tmp_path))


# -- an orthogonal box of three edges -----------------------------------------------------------------------

#: fcc cells along x, y and z: 768 atoms in 13.4 x 6.72 x 10.1 sigma, bricks 4.48 sigma thick along x at 3 ranks
SLAB_CELLS = (8, 4, 6)


@pytest.fixture(scope="module")
def slab(tmp_path_factory):
    """LAMMPS makes 768 atoms its own way in an 8 x 4 x 6-cell box (its velocities, atoms moved up to 0.1 sigma,
    the box from -L_d/2 along each axis) and writes them with write_data; its 100 NVE steps from that file; and
    pympi's at 3 ranks: 20 steps dumped (extended XYZ, GSD) at step 20, the same with a checkpoint at 10 and a
    restart from it."""
    lmp = lammps_executable()
    d = tmp_path_factory.mktemp("slab")
    run_lammps(lmp, d, data_script(CONFIG, d / "s.data", displace=0.1, cells=SLAB_CELLS), name="make.lj")
    out = {"dir": d, "data": d / "s.data", "lammps": read_log(run_lammps(lmp, d, input_script(CONFIG, d / "s.data",
                                                                                                100)))[0]}
    common = ("--init", d / "s.data", "--thermo", 10, "--json", "-q")
    out["straight"] = doc(lj(3, *common, "--steps", 20, "--dump", d / "s.extxyz", "--dump-every", 20))
    out["gsd"] = doc(lj(3, *common, "--steps", 20, "--dump", d / "s.gsd", "--dump-every", 20))
    doc(lj(3, *common, "--steps", 10, "--checkpoint", d / "c.npz"))
    out["restarted"] = doc(lj(3, *common, "--steps", 20, "--restart", d / "c.npz"))
    return out


def _edges(cells) -> list[float]:
    a = (4.0 / CONFIG.density) ** (1.0 / 3.0)
    return [c * a for c in cells]


@pytest.mark.parametrize("ranks", [1, 3])
def test_nve_in_an_orthogonal_box_agrees_with_lammps(slab, ranks):
    """Three edges that differ (the data file's xlo xhi, ylo yhi, zlo zhi): 100 NVE steps, the thermo at step 100
    within 1e-10 relative of LAMMPS's (the pressure over the volume Lx Ly Lz)."""
    ours = doc(lj(ranks, "--init", slab["data"], "--steps", 100, "--thermo", 100, "--json", "-q"))
    assert ours["box"] == pytest.approx(_edges(SLAB_CELLS), rel=1e-12) and len(set(ours["box"])) == 3
    assert ours["atoms"] == 768 and ours["density"] == pytest.approx(0.8442, rel=1e-12)
    theirs = slab["lammps"]
    assert [r["step"] for r in ours["thermo"]] == [r["step"] for r in theirs] == [0, 100]
    for a, b in zip(ours["thermo"], theirs):
        for k in ROW:
            assert a[k] == pytest.approx(b[k], rel=1e-10), (a["step"], k)


def test_an_orthogonal_box_is_read_the_same_at_1_2_and_3_ranks(slab, tmp_path):
    """The state read (dumped at step 0, in id order) is the same bytes at 1, 2 and 3 ranks; 20 steps agree to
    round-off."""
    frames = []
    for ranks in (1, 2, 3):
        out = doc(lj(ranks, "--init", slab["data"], "--steps", 20, "--thermo", 20, "--dump", tmp_path / f"{ranks}.extxyz",
                     "--dump-every", 20, "--json", "-q"))
        text = (tmp_path / f"{ranks}.extxyz").read_text()
        frames.append(text)
        assert out["grid"] == {1: [1, 1, 1], 2: [2, 1, 1], 3: [3, 1, 1]}[ranks]
        for k in ROW:
            assert out["thermo"][-1][k] == pytest.approx(slab["straight"]["thermo"][-1][k], rel=1e-11), k
    step0 = [f.split("\n")[:2 + 768] for f in frames]  # the first frame: the count, the header, the atoms
    assert "step=0 " in step0[0][1] and step0[0] == step0[1] == step0[2]
    lx, ly, lz = slab["straight"]["box"]
    assert f'Lattice="{lx!r} 0.0 0.0 0.0 {ly!r} 0.0 0.0 0.0 {lz!r}"' in frames[0].split("\n")[1]


def test_a_run_in_an_orthogonal_box_restarts_bit_for_bit(slab):
    assert rows(slab["restarted"]) == rows(slab["straight"])[1:]
    assert slab["restarted"]["first_step"] == 10 and slab["restarted"]["box"] == slab["straight"]["box"]


@pytest.mark.parametrize("dumped, precision", [("s.extxyz", 1e-13), ("s.gsd", 2e-6)])
def test_a_dump_of_an_orthogonal_box_starts_its_steps_row(slab, dumped, precision):
    """``--dump``'s last frame of three edges (extended XYZ's Lattice, GSD's box) read back by --init: its
    step's row, to the file's precision, in the same box."""
    source = slab["straight"] if dumped.endswith("extxyz") else slab["gsd"]
    got = doc(lj(2, "--init", slab["dir"] / dumped, "--steps", 0, "--json", "-q"))
    assert got["box"] == pytest.approx(source["box"], rel=precision)
    want, got = source["thermo"][-1], got["thermo"][0]
    for k in ("temp", "e_pair", "ke", "etotal"):
        assert got[k] == pytest.approx(want[k], rel=precision, abs=0), k
    assert got["press"] == pytest.approx(want["press"], abs=100 * precision * abs(want["e_pair"])), "press"


def _slab_data(path, cells, density=0.8442) -> str:
    """A data file of the fcc lattice of ``cells`` = (nx, ny, nz) cells (no velocities), written with numpy."""
    a = (4.0 / density) ** (1.0 / 3.0)
    corners = np.stack(np.meshgrid(*[np.arange(c, dtype=np.float64) for c in cells], indexing="ij"), -1)
    basis = np.array([[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])
    x = (corners.reshape(-1, 1, 3) + basis[None]).reshape(-1, 3) * a
    n = len(x)
    head = f"slab\n\n{n} atoms\n1 atom types\n\n" + "".join(f"0.0 {c * a!r} {d}lo {d}hi\n"
                                                             for c, d in zip(cells, "xyz"))
    rows = "\n".join(f"{i + 1} 1 {p!r} {q!r} {r!r}" for i, (p, q, r) in enumerate(x.tolist()))
    path.write_text(head + "\nMasses\n\n1 1.0\n\nAtoms # atomic\n\n" + rows + "\n")
    return str(path)


@pytest.mark.parametrize("ranks", [1, 3])
def test_an_axis_too_thin_is_refused_along_that_axis(tmp_path, ranks):
    """Bricks thinner than cutoff + skin along any one axis are refused, per axis; the rank grid is shaped for the
    box (domain.grid_dims): 4 x 6 x 6 cells (6.72 x 10.1 x 10.1 sigma) run at 1 rank and at 3 on a 1x1x3 grid (MPI's
    3x1x1 would make bricks 2.24 sigma thick along x: refused before the grid followed the box), to the same
    thermo; 4 x 4 x 4 cells (6.72 sigma every way) are refused at 3, every grid too thin; 6 x 6 x 1 cells at both
    (z)."""
    thin_x = _slab_data(tmp_path / "x.data", (4, 6, 6))
    one = doc(lj(1, "--init", thin_x, "--steps", 20, "--thermo", 20, "--json", "-q"))
    assert one["box"] == pytest.approx(_edges((4, 6, 6)))
    if ranks == 3:
        three = doc(lj(3, "--init", thin_x, "--steps", 20, "--thermo", 20, "--json", "-q"))
        assert three["grid"] == [1, 1, 3]
        for k in ("temp", "e_pair", "etotal", "press"):
            assert three["thermo"][-1][k] == pytest.approx(one["thermo"][-1][k], rel=1e-12), k
        refused(lj(3, "--init", _slab_data(tmp_path / "c.data", (4, 4, 4)), "--steps", 1, timeout=120),
                "the box (6.718 sigma) cut into a 3x1x1 rank grid makes bricks 2.239 sigma thick "
                "along x, thinner than the cutoff + skin (2.8); use fewer ranks")
    thin_z = _slab_data(tmp_path / "z.data", (6, 6, 1))
    refused(lj(ranks, "--init", thin_z, "--steps", 1, timeout=120),
            f"the box (10.08 x 10.08 x 1.68 sigma) cut into a {ranks}x1x1 rank grid makes bricks 1.68 sigma thick "
            "along z, thinner than the cutoff + skin (2.8); use fewer ranks")


def test_init_is_gravitys_choice_there_and_needs_bodies_without_it(tmp_path):
    refused(run([NBODY, "100", "--init", "x.data"], env=ENV, timeout=60), "'x.data' is not one of 'plummer', 'uniform'")
    refused(run([NBODY, "--model", "lj"], env=ENV, timeout=60), "Missing argument 'BODIES'")
