"""The files ``--init`` starts an LJ run from (issue 58): the readers (``pympi_gpu/nbody/lj/readers``) and the
start that deals their rows to the bricks (``pympi_gpu/nbody/lj/start.py``), on one rank (COMM_SELF: no process
started).  Each format as its own writers write it (LAMMPS's ``write_data``'s layout, ``ase.io.write``, the
``gsd`` package, ``--dump``'s), read in rounds of a few rows as in rounds of the whole; every refusal of the
issue's list in one message naming the file and the line or particle.  At 2 and 3 ranks:
tests/mpi/test_lj_init_mpi.py; through the command: tests/cli/test_lj_init_cli.py."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.nbody.lj import readers, start
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.domain import wrap
from pympi_gpu.nbody.lj.lammps import write_data
from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities
from pympi_gpu.nbody.lj.readers import InitError


@pytest.fixture(scope="module")
def cart():
    c = MPI.COMM_SELF.Create_cart([1, 1, 1], periods=[True] * 3)
    yield c
    c.Free()


def load(cart, path, rows=None):
    text = str(path)
    return start.load(cart, text, start.read_header(cart, text), rows=rows)


def refused(cart, path, *words):
    with pytest.raises(InitError) as info:
        load(cart, path, rows=7)
    message = str(info.value)
    assert str(path).split("@")[0] in message
    for w in words:
        assert w in message, message
    return message


# -- LAMMPS data files -------------------------------------------------------------------------------------

CONFIG = LjConfig(cells=3)  # 108 atoms
L = CONFIG.box[0]  # the lattice's cube edge


def lammps_file(tmp_path, *, header="", lo=0.0, atoms=None, velocities_=True, masses="1 1.0", style="atomic",
                extra_sections="", images=False, name="x.data", edit=None):
    """A data file laid out as LAMMPS's write_data lays it out (its title, header, Masses, Pair Coeffs, Atoms with
    image flags, Velocities), of CONFIG's lattice moved by ``lo``."""
    n = CONFIG.atoms
    x = fcc_positions(CONFIG.cells, CONFIG.density) + lo
    v = velocities(n, CONFIG.temperature, CONFIG.seed)
    rows = atoms or [f"{i + 1} 1 {a!r} {b!r} {c!r}" + (" 0 0 0" if images else "")
                     for i, (a, b, c) in enumerate(x.tolist())]
    box = L
    text = (f"LAMMPS data file via write_data, version 22 Jul 2025, timestep = 0, units = lj\n\n{n} atoms\n"
            f"1 atom types\n{header}\n" + "".join(f"{lo!r} {lo + box!r} {a}lo {a}hi\n" for a in "xyz")
            + f"\nMasses\n\n{masses}\n\nPair Coeffs # lj/cut\n\n1 1 1\n{extra_sections}\n"
            + f"Atoms # {style}\n\n" + "\n".join(rows) + "\n")
    if velocities_:
        text += "\nVelocities\n\n" + "\n".join(f"{i + 1} {a!r} {b!r} {c!r}"
                                               for i, (a, b, c) in enumerate(v.tolist())) + "\n"
    if edit:
        text = edit(text)
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("rows", [None, 1, 7, 200])
def test_a_data_file_is_the_state_it_holds(cart, tmp_path, rows):
    """Our own write_data's file (bench/in.lj's state) read back bit for bit, in rounds of 1, 7, or all rows."""
    config = LjConfig(cells=4)
    write_data(tmp_path / "x.data", config)
    header = start.read_header(cart, str(tmp_path / "x.data"))
    assert (header.kind, header.atoms, header.box, header.lo, header.velocities) == \
        ("lammps", config.atoms, config.box, (0.0, 0.0, 0.0), True)
    got = start.load(cart, str(tmp_path / "x.data"), header, rows=rows)
    assert got["x"].tobytes() == fcc_positions(config.cells, config.density).tobytes()
    assert got["v"].tobytes() == velocities(config.atoms, config.temperature, config.seed).tobytes()
    assert got["id"].tolist() == list(range(1, config.atoms + 1))


def test_write_datas_layout_image_flags_a_moved_box_and_comments(cart, tmp_path):
    """LAMMPS's own layout: a title, Pair Coeffs (recorded for the command to judge), image flags (dropped),
    a box from -L/2, comments and blank lines between sections, rows in any order; positions moved to [0, L)."""
    lo = -0.5 * L
    path = lammps_file(tmp_path, lo=lo, images=True, extra_sections="\nAtom Type Labels\n\n1 Ar\n",
                       edit=lambda t: t.replace("Masses\n", "# the masses\nMasses # of each type\n", 1))
    header = start.read_header(cart, str(path))
    assert header.lo == (lo, lo, lo) and header.pair == ("lj/cut", ("1", "1"))
    got = load(cart, path, rows=5)
    assert np.array_equal(got["x"], wrap(fcc_positions(CONFIG.cells, CONFIG.density) + lo - lo, CONFIG.box))
    lines = path.read_text().split("\n")
    at = lines.index("Atoms # atomic") + 2
    lines[at:at + CONFIG.atoms] = lines[at:at + CONFIG.atoms][::-1]  # atoms in any order
    path.write_text("\n".join(lines))
    again = load(cart, path, rows=5)
    assert np.array_equal(again["x"], got["x"]) and np.array_equal(again["v"], got["v"])


def test_atoms_outside_the_box_are_folded_in(cart, tmp_path):
    x = fcc_positions(CONFIG.cells, CONFIG.density)
    moved = x + np.array([3.0, -2.0, 5.0]) * L  # whole boxes away: folded back onto the lattice
    rows = [f"{i + 1} 1 {a!r} {b!r} {c!r}" for i, (a, b, c) in enumerate(moved.tolist())]
    got = load(cart, lammps_file(tmp_path, atoms=rows))
    assert np.abs(got["x"] - x).max() < 1e-12 * L * 8 or \
        np.abs(np.abs(got["x"] - x) - L).min() < 1e-9
    assert (got["x"] >= 0).all() and (got["x"] < L).all()


def test_a_file_without_velocities_has_none(cart, tmp_path):
    header = start.read_header(cart, str(lammps_file(tmp_path, velocities_=False)))
    assert not header.velocities
    assert load(cart, tmp_path / "x.data")["v"] is None


def _rows(extra: dict[int, str]) -> list[str]:
    x = fcc_positions(CONFIG.cells, CONFIG.density)
    rows = [f"{i + 1} 1 {a!r} {b!r} {c!r}" for i, (a, b, c) in enumerate(x.tolist())]
    for i, row in extra.items():
        rows[i] = row
    return rows


def first_velocity(text: str, row: str) -> str:
    """``text`` with its first Velocities row replaced by ``row``."""
    head, tail = text.split("\nVelocities\n\n")
    return head + "\nVelocities\n\n" + row + "\n" + tail.split("\n", 1)[1]


#: the line of Atoms row i in lammps_file's layout (title, blank, 2 counts, header, box, Masses, Pair Coeffs, Atoms)
def atoms_line(i: int) -> int:
    return 20 + i


@pytest.mark.parametrize("make, words", [
    (lambda t: lammps_file(t, header="0.5 0 0 xy xz yz"), ["line 5", "triclinic box (tilt factors 0.5 0 0)",
                                                            "this engine runs one atom type"]),
    (lambda t: lammps_file(t, header="1 0 0 avec"), ["general triclinic"]),
    (lambda t: lammps_file(t, edit=lambda s: s.replace("1 atom types", "2 atom types")), ["line 4", "2 atom types"]),
    (lambda t: lammps_file(t, masses="1 39.948"), ["atom type 1 has mass 39.9", "mass 1 (LJ units)"]),
    (lambda t: lammps_file(t, header="5 bonds"), ["5 bonds", "without charges or molecules"]),
    (lambda t: lammps_file(t, extra_sections="\nBonds\n\n1 1 1 2\n"), ["its Bonds section"]),
    (lambda t: lammps_file(t, style="full"), ["atom_style full", "atom_style atomic: id type x y z"]),
    (lambda t: lammps_file(t, style="charge", atoms=[f"{i + 1} 1 0.0 0 0 {i}" for i in range(108)]),
     ["atom_style charge"]),
    (lambda t: lammps_file(t, atoms=[f"{i + 1} 1 0.5 0 0 {i}" for i in range(108)]),
     ["an atom of 6 words", "id type x y z [ix iy iz]"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "11 1 nan 0 0"})), [f"line {atoms_line(10)}", "not a finite position"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "11 1 1e300 0 0"})), ["box edges", "lose its position to rounding"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "11 1 0.1 oops 0"})),
     [f"line {atoms_line(10)}", "'oops' is not a number"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "11 1 0.1 0"})), [f"line {atoms_line(10)} holds 4 words, not 5"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "11 2 0.1 0 0"})), ["atom 11 is of type 2"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "3 1 0.1 0.2 0.3"})),
     [f"atom id 3 is given twice (lines {atoms_line(2)} and {atoms_line(10)})"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "500 1 0.1 0.2 0.3"})), ["atom id 500 is not between 1 and the 108"]),
    (lambda t: lammps_file(t, atoms=_rows({10: "11 1 0.0 0.0 0.0"})),
     ["atoms 1 and 11", f"lines {atoms_line(0)} and {atoms_line(10)}", "are at one place"]),
    (lambda t: lammps_file(t, edit=lambda s: s[:s.index("Velocities")] + "Velocities\n\n"
                           + "\n".join(f"{i + 1} 0 0 0" for i in range(50))), ["Velocities section ends after 50",
                                                                              "cut short"]),
    (lambda t: lammps_file(t, velocities_=False, edit=lambda s: s[:len(s) * 2 // 3]), ["Atoms section ends",
                                                                                       "cut short"]),
    (lambda t: lammps_file(t, edit=lambda s: first_velocity(s, "2 0 0 0")),
     [f"atom 2's velocity is given twice (lines {atoms_line(111)} and {atoms_line(112)})"]),
    (lambda t: lammps_file(t, edit=lambda s: first_velocity(s, "1 inf 0 0")),
     [f"line {atoms_line(111)}: atom 1 has the velocity (inf", "not a finite one"]),
    (lambda t: lammps_file(t, edit=lambda s: s.replace("Masses\n\n1 1.0\n\n", "")), ["no Masses section"]),
    (lambda t: lammps_file(t, edit=lambda s: s.replace("Masses", "Massses")), ["'Massses' is no section"]),
])
def test_a_data_file_the_engine_cannot_run_is_refused_naming_the_line(cart, tmp_path, make, words):
    refused(cart, make(tmp_path), *words)


def test_a_frame_of_a_data_file_is_refused(cart, tmp_path):
    path = lammps_file(tmp_path)
    with pytest.raises(InitError, match="a LAMMPS data file holds one state, not frames"):
        start.read_header(cart, f"{path}@2")


# -- of no known kind --------------------------------------------------------------------------------------

def test_a_missing_file_an_unknown_kind_and_a_directory(cart, tmp_path):
    with pytest.raises(InitError, match="does not exist"):
        start.read_header(cart, str(tmp_path / "nothing.data"))
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    with pytest.raises(InitError, match="is of no known kind .none of them.: it reads a LAMMPS data file"):
        start.read_header(cart, str(tmp_path / "notes.txt"))
    (tmp_path / "empty.gsd").write_bytes(b"")
    with pytest.raises(InitError, match="of no known kind .empty."):
        start.read_header(cart, str(tmp_path / "empty.gsd"))
    with pytest.raises(InitError, match="is a directory"):
        start.read_header(cart, str(tmp_path))


def test_the_frame_suffix():
    assert readers.parse_spec("run.gsd@-1") == readers.Spec("run.gsd", -1)
    assert readers.parse_spec("run.gsd@3") == readers.Spec("run.gsd", 3)
    assert readers.parse_spec("me@host.gsd") == readers.Spec("me@host.gsd")
    assert readers.parse_spec("x.data") == readers.Spec("x.data", None)


# -- extended XYZ ------------------------------------------------------------------------------------------

def _ase_atoms(n=108, species="X", masses=True, seed=3):
    from ase import Atoms

    rng = np.random.default_rng(seed)
    box = L
    a = Atoms([species] * n, positions=rng.random((n, 3)) * box,
              cell=[box, box, box], pbc=True, masses=np.ones(n) if masses else None)
    a.set_velocities(rng.random((n, 3)) - 0.5)
    return a


@pytest.mark.parametrize("species, masses", [("X", False), ("X", True), ("Ar", True)])
def test_a_state_written_by_ase_is_read_as_ase_reads_it(cart, tmp_path, species, masses):
    """ase.io.write's extended XYZ (8 decimals, momenta over the mass, masses where set): read as ase.io.read
    reads it back, frame by frame."""
    import ase.io

    frames = [_ase_atoms(species=species, masses=masses, seed=s) for s in (1, 2)]
    path = tmp_path / "ase.extxyz"
    ase.io.write(path, frames)
    for index in (0, -1):
        want = ase.io.read(path, index=index)
        got = load(cart, f"{path}@{index}", rows=13)
        order = np.argsort(got["id"])
        assert np.allclose(got["x"][order], wrap(want.get_positions(), CONFIG.box), rtol=0, atol=1e-15)
        assert np.array_equal(got["v"][order], want.get_velocities())
    assert load(cart, path)["x"].tobytes() == load(cart, f"{path}@1")["x"].tobytes()  # the last, by default


def test_a_dump_of_ours_is_read_back_exactly(cart, tmp_path):
    from pympi_gpu.nbody.dump import open_dump

    x = fcc_positions(CONFIG.cells, CONFIG.density)
    v = velocities(CONFIG.atoms, CONFIG.temperature, CONFIG.seed)
    ids = np.arange(1, CONFIG.atoms + 1)
    writer = open_dump(tmp_path / "d.extxyz", CONFIG.box, CONFIG.identity())
    order = np.random.default_rng(0).permutation(CONFIG.atoms)  # ids kept, whatever the rows' order
    writer.write(5, 0.025, ids[order], x[order], v[order])
    writer.write(10, 0.05, ids, x + 0.125, v * 2)
    got = load(cart, f"{tmp_path / 'd.extxyz'}@0", rows=9)
    assert got["x"].tobytes() == x.tobytes() and got["v"].tobytes() == v.tobytes()
    assert got["id"].tolist() == ids.tolist()
    assert np.array_equal(load(cart, tmp_path / "d.extxyz")["v"], v * 2)


def _xyz(tmp_path, header, rows, name="b.extxyz", count=None):
    path = tmp_path / name
    path.write_text(f"{len(rows) if count is None else count}\n{header}\n" + "\n".join(rows) + "\n")
    return path


LATTICE = f'Lattice="{L} 0 0 0 {L} 0 0 0 {L}"'
TWO = ["X 0.5 0.5 0.5", "X 1.5 1.5 1.5"]


@pytest.mark.parametrize("header, rows, words", [
    (f'Lattice="{L} 0.1 0 0 {L} 0 0 0 {L}"', TWO, ["not orthogonal (a triclinic box)"]),
    (f'{LATTICE} pbc="T T F"', TWO, ["not periodic along every axis"]),
    ("Properties=species:S:1:pos:R:3", TWO, ["no Lattice", "the box is needed"]),
    (LATTICE, ["X 0.5 0.5 0.5", "Y 1.5 1.5 1.5"], ["line 4: an atom of type Y, where the first is X",
                                                     "several atom types"]),
    (f"{LATTICE} Properties=species:S:1:pos:R:3:masses:R:1", ["X 0.5 0.5 0.5 1", "X 1.5 1.5 1.5 2"],
     ["line 4: an atom of mass 2"]),
    (f"{LATTICE} Properties=species:S:1:pos:R:3:charge:R:1", ["X 0.5 0.5 0.5 0", "X 1.5 1.5 1.5 -1"],
     ["an atom of charge -1"]),
    (f"{LATTICE} Properties=species:S:1:pos:R:3:momenta:R:3", ["Ar 0.5 0.5 0.5 1 0 0", "Ar 1.5 1.5 1.5 0 0 0"],
     ["momenta of atoms of mass 39.9", "species Ar", "write their masses as 1"]),
    (f"{LATTICE} Properties=species:S:1:pos:R:2", TWO, ["the positions column pos:R:2 is not 3 numbers"]),
    (LATTICE, ["X 0.5 0.5 0.5", "X 1.5 zz 1.5"], ["line 4: 'zz' is not a number", "a row of 4 words"]),
    (LATTICE, ["X 0.5 0.5 0.5", "X 1.5 1.5"], ["line 4 holds 3 words, not 4"]),
    (LATTICE, ["X 0.5 0.5 0.5", "X 0.5 0.5 0.5"], ["atoms 1 and 2 (lines 3 and 4) are at one place"]),
])
def test_an_extxyz_the_engine_cannot_run_is_refused(cart, tmp_path, header, rows, words):
    refused(cart, _xyz(tmp_path, header, rows), *words)


def test_an_extxyz_cut_short_or_of_no_such_frame(cart, tmp_path):
    whole = f"2\n{LATTICE}\n" + "\n".join(TWO) + "\n"
    (tmp_path / "t.extxyz").write_text(whole * 2 + f"2\n{LATTICE}\nX 0 0 0\n")
    with pytest.raises(InitError, match=r"line 9: frame 2 is cut short after 1 of its 2 atoms: the file is "
                                        r"truncated; give .*t.extxyz@1 for the last whole frame"):
        start.read_header(cart, str(tmp_path / "t.extxyz"))
    assert start.read_header(cart, f"{tmp_path / 't.extxyz'}@1").where == "frame 1 of 2"
    with pytest.raises(InitError, match=r"holds 2 whole frame\(s\): there is no frame 5"):
        start.read_header(cart, f"{tmp_path / 't.extxyz'}@5")


# -- GSD ---------------------------------------------------------------------------------------------------

def gsd_file(tmp_path, n=108, frames=1, name="h.gsd", velocity=True, **particles):
    """Frames written by the gsd package as HOOMD-blue writes them (the box centred on the origin)."""
    import gsd.hoomd

    rng = np.random.default_rng(7)
    path = tmp_path / name
    with gsd.hoomd.open(path, "w") as f:
        for k in range(frames):
            frame = gsd.hoomd.Frame()
            frame.configuration.step = 100 * k
            frame.configuration.box = particles.pop("box", [L, L, L, 0, 0, 0]) if k == 0 else [L, L, L, 0, 0, 0]
            frame.particles.N = n
            frame.particles.types = ["A"]
            frame.particles.position = ((rng.random((n, 3)) - 0.5) * L).astype(np.float32)
            if velocity:
                frame.particles.velocity = (rng.random((n, 3)) - 0.5).astype(np.float32)
            for key, value in particles.items():
                if key.startswith("bonds"):
                    frame.bonds.N, frame.bonds.types, frame.bonds.typeid, frame.bonds.group = 1, ["b"], [0], [[0, 1]]
                elif key == "dimensions":
                    frame.configuration.dimensions = value
                else:
                    setattr(frame.particles, key, value)
            f.append(frame)
    return path


@pytest.mark.parametrize("rows", [None, 10])
def test_a_gsd_frame_written_by_the_gsd_package_is_read_as_written(cart, tmp_path, rows):
    import gsd.hoomd

    path = gsd_file(tmp_path, frames=3)
    for index in (0, 2, -2):
        with gsd.hoomd.open(path) as f:
            want = f[index]
        got = load(cart, f"{path}@{index}", rows=rows)
        edge = float(want.configuration.box[0])  # float32, as GSD stores it
        assert got["id"].tolist() == list(range(1, 109))  # HOOMD's tags, from 1
        assert np.array_equal(got["x"], wrap(want.particles.position.astype(np.float64) + 0.5 * edge, edge))
        assert np.array_equal(got["v"], want.particles.velocity.astype(np.float64))
    header = start.read_header(cart, str(path))
    assert header.where == "frame 2 of 3, step 200" and header.lo == (-0.5 * float(np.float32(L)),) * 3


def test_a_gsd_dump_of_ours_keeps_its_ids(cart, tmp_path):
    """``--dump``'s GSD (float32, the box from -L/2, ids in log/particles/id): read as pympi-plot reads it."""
    from pympi_gpu.nbody.dump import open_dump, read_frame

    x = fcc_positions(CONFIG.cells, CONFIG.density)
    v = velocities(CONFIG.atoms, CONFIG.temperature, CONFIG.seed)
    order = np.random.default_rng(1).permutation(CONFIG.atoms)
    writer = open_dump(tmp_path / "d.gsd", CONFIG.box, CONFIG.identity())
    writer.write(7, 0.035, np.arange(1, CONFIG.atoms + 1)[order], x[order], v[order])
    writer.close()
    got, want = load(cart, tmp_path / "d.gsd", rows=11), read_frame(tmp_path / "d.gsd")
    back = np.argsort(want["id"])
    assert got["id"].tolist() == want["id"][back].tolist()
    assert np.array_equal(got["x"], wrap(want["x"][back], want["box"]))
    assert np.array_equal(got["v"], want["v"][back])
    assert np.abs(got["x"] - x).max() < 1e-5 * L  # float32's precision


def test_a_gsd_frame_without_velocities_has_none(cart, tmp_path):
    path = gsd_file(tmp_path, velocity=False)
    assert not start.read_header(cart, str(path)).velocities
    assert load(cart, path)["v"] is None


@pytest.mark.parametrize("particles, words", [
    ({"typeid": np.r_[np.zeros(50), np.ones(58)].astype(np.uint32), "types": ["A", "B"]},
     ["particle 50: of type 1, where the first is of type 0: several particle types"]),
    ({"mass": np.full(108, 2.0, np.float32)}, ["particle 0: of mass 2"]),
    ({"charge": np.r_[np.zeros(107), [0.5]].astype(np.float32)}, ["particle 107: of charge 0.5"]),
    ({"body": np.r_[np.full(100, -1), np.zeros(8)].astype(np.int32)}, ["particle 100: in rigid body 0"]),
    ({"bonds": True}, ["1 bonds"]),
    ({"dimensions": 2}, ["a 2-D system"]),
    ({"box": [L, L, L, 0.2, 0, 0]}, ["a triclinic box (tilt factors 0.2 0 0)"]),
])
def test_a_gsd_frame_the_engine_cannot_run_is_refused(cart, tmp_path, particles, words):
    refused(cart, gsd_file(tmp_path, **particles), *words)


def test_a_damaged_gsd_file_and_one_of_another_schema(cart, tmp_path):
    import gsd.fl

    path = gsd_file(tmp_path)
    data = path.read_bytes()
    (tmp_path / "cut.gsd").write_bytes(data[:300])
    with pytest.raises(InitError, match="is not a readable GSD file .damaged, or cut short."):
        start.read_header(cart, str(tmp_path / "cut.gsd"))
    with gsd.fl.open(tmp_path / "other.gsd", "w", application="x", schema="other", schema_version=[1, 0]) as f:
        f.write_chunk("a", np.zeros(3))
        f.end_frame()
    with pytest.raises(InitError, match="of the schema 'other', not HOOMD-blue's"):
        start.read_header(cart, str(tmp_path / "other.gsd"))


def test_a_gsd_reader_without_the_package_says_which_extra(monkeypatch, tmp_path, cart):
    path = gsd_file(tmp_path)
    monkeypatch.setitem(__import__("sys").modules, "gsd", None)
    monkeypatch.setitem(__import__("sys").modules, "gsd.fl", None)
    with pytest.raises(InitError, match=r"reading a GSD file needs the gsd package: pip install 'pympi_gpu\[dump\]'"):
        start.read_header(cart, str(path))


# -- what the reading holds --------------------------------------------------------------------------------

def test_the_rounds_bound_what_the_reading_rank_holds(cart, tmp_path):
    """A round of ``rows`` lines is what the reader holds at once; the price the memory check adds for it."""
    config = LjConfig(cells=10)  # 4,000 atoms
    write_data(tmp_path / "x.data", config)
    reader = readers.open_file(readers.parse_spec(str(tmp_path / "x.data")))
    try:
        sizes = [sum(len(p[3]) for p in round_) for round_ in reader.pieces(3, 500)]
    finally:
        reader.close()
    assert len(sizes) == 16 and max(sizes) < 500 * 80  # 8 rounds of atoms, 8 of velocities, each 500 lines
    header = start.read_header(cart, str(tmp_path / "x.data"))
    assert 4000 * 100 < start.read_bytes(header, 1) < 4000 * 1000  # a few rows' worth an atom, at this size


# -- orthogonal boxes of three edges -----------------------------------------------------------------------

SLAB = (L, 1.5 * L, 2.0 * L)  # three edges that differ


def _slab_state():
    """CONFIG's lattice spread through SLAB (each axis scaled to its edge), with velocities."""
    x = fcc_positions(CONFIG.cells, CONFIG.density) * (np.array(SLAB) / L)
    return x, velocities(CONFIG.atoms, CONFIG.temperature, CONFIG.seed)


def test_a_data_file_of_an_orthogonal_box_is_read_with_its_three_edges(cart, tmp_path):
    """A box ``xlo xhi``, ``ylo yhi``, ``zlo zhi`` of three edges: the header has them, the positions are folded
    along each axis into its own edge (an atom one box up along z lands where it was, not a cube's edge away)."""
    x, v = _slab_state()
    lo = np.array([-1.0, 2.0, -0.5 * SLAB[2]])
    moved = x + lo
    moved[5] += [0.0, 0.0, SLAB[2]]  # one box up along z
    moved[6] -= [SLAB[0], 0.0, 0.0]  # one box down along x
    rows = [f"{i + 1} 1 {a!r} {b!r} {c!r}" for i, (a, b, c) in enumerate(moved.tolist())]
    bounds = "".join(f"{l!r} {l + e!r} {a}lo {a}hi\n" for a, l, e in zip("xyz", lo.tolist(), SLAB))
    path = lammps_file(tmp_path, atoms=rows, edit=lambda t: t.replace(
        "".join(f"0.0 {L!r} {a}lo {a}hi\n" for a in "xyz"), bounds))
    header = start.read_header(cart, str(path))
    assert header.box == SLAB and header.lo == tuple(lo)
    got = load(cart, path, rows=7)
    assert np.allclose(got["x"], x, rtol=0, atol=1e-12)
    assert (got["x"] >= 0).all() and (got["x"] < np.array(SLAB)).all()
    assert np.array_equal(got["v"], v)


def test_edges_a_few_roundings_apart_are_a_cube():
    assert readers.orthogonal_edges("x", (10.2, 5.1 - -5.1, 10.2)) == (10.2, 10.2, 10.2)
    assert readers.orthogonal_edges("x", (10.0, 10.0, 30.0)) == (10.0, 10.0, 30.0)
    with pytest.raises(InitError, match="not finite and > 0"):
        readers.orthogonal_edges("x", (10.0, 0.0, 30.0))


def test_an_extxyz_and_a_gsd_dump_of_an_orthogonal_box_read_back(cart, tmp_path):
    """``--dump``'s writers with three edges (extended XYZ's Lattice diagonal, GSD's box without tilts) and the
    readers: the box and the state come back (every digit; float32 in GSD), as pympi-plot's reader reads them."""
    from pympi_gpu.nbody.dump import open_dump, read_frame

    x, v = _slab_state()
    ids = np.arange(1, CONFIG.atoms + 1)
    for name in ("d.extxyz", "d.gsd"):
        writer = open_dump(tmp_path / name, SLAB, CONFIG.identity())
        writer.write(3, 0.015, ids, x, v)
        writer.close()
        header, frame = start.read_header(cart, str(tmp_path / name)), read_frame(tmp_path / name)
        got = load(cart, tmp_path / name, rows=10)
        if name.endswith("extxyz"):
            assert f'Lattice="{SLAB[0]!r} 0.0 0.0 0.0 {SLAB[1]!r} 0.0 0.0 0.0 {SLAB[2]!r}"' in \
                (tmp_path / name).read_text()
            assert header.box == SLAB == frame["box"] and header.lo == (0.0, 0.0, 0.0)
            assert got["x"].tobytes() == x.tobytes() and got["v"].tobytes() == v.tobytes()
        else:
            edges = tuple(float(np.float32(e)) for e in SLAB)
            assert header.box == edges == frame["box"] and header.lo == tuple(-0.5 * e for e in edges)
            assert np.array_equal(got["x"], wrap(frame["x"], edges))
            assert np.abs(got["x"] - x).max() < 1e-5 * SLAB[2]  # float32's precision
        assert got["id"].tolist() == ids.tolist()


def test_a_gsd_frame_of_the_gsd_package_with_three_edges_is_read(cart, tmp_path):
    path = gsd_file(tmp_path, box=[L, 1.5 * L, 2 * L, 0, 0, 0])
    header = start.read_header(cart, str(path))
    assert header.box == tuple(float(np.float32(e)) for e in (L, 1.5 * L, 2 * L))


def test_an_orthogonal_box_with_tilts_is_still_refused(cart, tmp_path):
    """Three edges are run; tilt factors (triclinic) are not, in any format."""
    refused(cart, gsd_file(tmp_path, box=[L, 1.5 * L, 2 * L, 0, 0.3, 0]), "a triclinic box (tilt factors 0 0.3 0)",
            "an orthogonal periodic box")
    refused(cart, _xyz(tmp_path, f'Lattice="{L} 0 0 0.2 {2 * L} 0 0 0 {L}"', TWO), "not orthogonal (a triclinic box)",
            "an orthogonal periodic box")
    refused(cart, lammps_file(tmp_path, header="0 0 0.5 xy xz yz", name="t.data"), "triclinic box (tilt factors 0 0 0.5)",
            "an orthogonal periodic box")
