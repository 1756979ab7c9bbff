"""``pympi-plot``: the PNGs of a thermo log and of a trajectory frame, checked by opening them.

Each picture is read back with matplotlib's image reader: its size is the
figure's, it is not blank, and the snapshot holds the spread of colours its
speeds map to.  The inputs come from real runs at 2 ranks.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.commands import env, mpiexec_argv, one_message, run, script

NBODY, PLOT = script("pympi-nbody"), script("pympi-plot")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    for args in (["2048", "--model", "lj", "--thermo", "5", "--thermo-file", d / "lj.yaml", "--dump", d / "lj.extxyz",
                  "--dump-every", "10"],
                 ["1000", "--thermo", "5", "--thermo-file", d / "g.csv", "--dump", d / "g.gsd", "--dump-every", "10"]):
        out = run(mpiexec_argv(2) + [NBODY, *map(str, args), "--steps", "30", "--threads", "1", "-q"],
                  timeout=300, env=env())
        assert out.returncode == 0, out.stderr
    return d


def picture(path):
    import matplotlib.image

    img = matplotlib.image.imread(path)[:, :, :3]
    ink = (img < 0.95).any(axis=2).mean()   # the share of pixels that are not white
    colours = len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    return img.shape[:2], ink, colours


@pytest.mark.parametrize("name, panels", [("lj.yaml", 3), ("g.csv", 2)])
def test_thermo_picture(outputs, tmp_path, name, panels):
    png = tmp_path / "t.png"
    out = run([PLOT, str(outputs / name), "-o", str(png)], timeout=120, env=env())
    assert out.returncode == 0 and f"written: {png}" in out.stdout, out.stderr
    (h, w), ink, colours = picture(png)
    assert (h, w) == (int(100 * (2.2 * panels + 0.6)), 700)   # one panel a quantity, energies together
    assert 0.02 < ink < 0.5 and colours > 20


@pytest.mark.parametrize("name", ["lj.extxyz", "g.gsd"])
def test_frame_picture(outputs, name):
    out = run([PLOT, str(outputs / name), "--frame", "1"], timeout=120, env=env())
    assert out.returncode == 0, out.stderr
    png = outputs / f"{name}.png"
    (h, w), ink, colours = picture(png)
    assert (h, w) == (560, 640) and 0.05 < ink < 0.9
    assert colours > 100   # the speeds' colour map, not one colour


def test_what_cannot_be_drawn_is_refused_with_one_message(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    one_message(run([PLOT, str(tmp_path / "a.txt")], timeout=60, env=env()), "not a thermo log")
    (tmp_path / "e.csv").write_text("")
    one_message(run([PLOT, str(tmp_path / "e.csv")], timeout=60, env=env()), "e.csv' is empty")
    (tmp_path / "t.extxyz").write_text("garbage\n")
    one_message(run([PLOT, str(tmp_path / "t.extxyz")], timeout=60, env=env()), "holds no frame")
    one_message(run([PLOT, str(tmp_path / "missing.csv")], timeout=60, env=env()), "does not exist")


@pytest.mark.parametrize("name, data, words", [
    ("bad.gsd", b"GSD but not one", "is not a readable GSD trajectory (damaged, or another kind of file)"),
    ("bad.yaml", b"---\nkeywords: [Step\n  - [1, 2", "is not a readable YAML thermo log (damaged, or another "
                                                    "kind of file): expected ',' or ']', but got '[' (line 3"),
    ("bad.csv", b"Step,Temp\n0,hot\n", "is not a readable CSV thermo log"),
    ("bad.extxyz", b"2\nstep=0\nX a b c d e f g\nX 1 2\n", "is not a readable extended XYZ trajectory"),
    ("utf.extxyz", b"\xff\xfe\x00", "is not a readable extended XYZ trajectory"),
])
def test_a_damaged_input_is_refused_with_one_message(tmp_path, name, data, words):
    """(was: 'RuntimeError: Not a GSD file', a YAML parser's traceback, exit 1)"""
    (tmp_path / name).write_bytes(data)
    one_message(run([PLOT, str(tmp_path / name)], timeout=60, env=env()), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no picture, no temporary


@pytest.mark.parametrize("name", ["lj.extxyz", "g.gsd"])
@pytest.mark.parametrize("frame", ["7", "-8"])
def test_a_frame_out_of_range_says_which_there_are(outputs, name, frame):
    """(was: 'list index out of range')"""
    p = run([PLOT, str(outputs / name), "--frame", frame], timeout=60, env=env())
    one_message(p, f"holds 4 frame(s): there is no frame {frame} (0 to 3, or -4 to -1 from the end)")


def test_an_unwritable_or_foreign_picture_is_refused(outputs, tmp_path):
    log = outputs / "g.csv"
    one_message(run([PLOT, str(log), "-o", str(log)], timeout=60, env=env()), "itself: choose another PNG")
    notes = tmp_path / "notes.png"
    notes.write_text("my notes\n")
    one_message(run([PLOT, str(log), "-o", str(notes)], timeout=60, env=env()), "exists and is not a PNG")
    assert notes.read_text() == "my notes\n"
    one_message(run([PLOT, str(log), "-o", str(tmp_path / "no" / "x.png")], timeout=60, env=env()),
                "the directory of")


def test_a_run_s_log_and_trajectory_draw_to_two_pictures(outputs, tmp_path):
    """`pympi-plot lj.yaml` and then `pympi-plot lj.extxyz` (one run's thermo log and trajectory): two PNGs,
    lj.yaml.png and lj.extxyz.png, each naming its source (was: both lj.png, the second silently replacing the
    first); drawing one again replaces its own; a picture of another file is refused, kept byte for byte."""
    from pympi_gpu.nbody.pictures import drawn_from

    log, frames = tmp_path / "lj.yaml", tmp_path / "lj.extxyz"
    log.write_bytes((outputs / "lj.yaml").read_bytes())
    frames.write_bytes((outputs / "lj.extxyz").read_bytes())
    for source in (log, frames):
        out = run([PLOT, str(source)], timeout=120, env=env())
        assert out.returncode == 0 and f"written: {source}.png" in out.stdout, out.stderr
    pictures = {p.name: p.read_bytes() for p in tmp_path.glob("*.png")}
    assert sorted(pictures) == ["lj.extxyz.png", "lj.yaml.png"]
    assert drawn_from(tmp_path / "lj.yaml.png") == str(log.resolve())
    assert drawn_from(tmp_path / "lj.extxyz.png") == str(frames.resolve())
    assert run([PLOT, str(log)], timeout=120, env=env()).returncode == 0  # its own picture, drawn again
    one_message(run([PLOT, str(frames), "-o", str(tmp_path / "lj.yaml.png")], timeout=60, env=env()),
                f"--out '{tmp_path / 'lj.yaml.png'}' is the picture of '{log.resolve()}': it is never replaced")
    assert drawn_from(tmp_path / "lj.yaml.png") == str(log.resolve())
