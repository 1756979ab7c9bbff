"""``pympi-plot FILE``: a PNG of a thermo log or of a trajectory frame."""

from __future__ import annotations

import click

from pympi_gpu.cli.common import fail
from pympi_gpu.cli.options import CONTEXT_SETTINGS, version_option


@click.command(context_settings=CONTEXT_SETTINGS)
@version_option()
@click.argument("path", type=str)
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="The PNG to write  [default: PATH with .png added: lj.csv.png]")
@click.option("--frame", type=int, default=-1, show_default=True,
              help="Trajectories: the frame to draw, from 0 (negative: from the end).")
def plot(path, out, frame):
    """Draw a run's output: a thermo log (--thermo-file: .csv, .yaml) as energy, temperature, pressure
    (or virial ratio) against step, or a frame of a trajectory (--dump: .extxyz, .gsd) projected
    along z and coloured by speed.  A PNG drawn from another file is never replaced.
    """
    from pathlib import Path

    from pympi_gpu.nbody import dump, pictures
    from pympi_gpu.run import thermolog

    if not Path(path).is_file():
        fail(f"{path!r} does not exist or is not a file")
    suffix = Path(path).suffix.lower()
    if suffix not in thermolog.FORMATS and suffix not in dump.FORMATS:
        fail(f"{path!r}: not a thermo log ({', '.join(sorted(thermolog.FORMATS))}) or a trajectory "
             f"({', '.join(sorted(dump.FORMATS))})")
    out = out or str(pictures.default_out(path))
    _check_out(path, out)
    try:
        if suffix in thermolog.FORMATS:
            written = pictures.plot_thermo(path, out)
        else:
            written = pictures.plot_frame(path, out, frame)
    except ImportError as exc:
        fail(str(exc))
    except PermissionError:
        fail(f"{path!r} cannot be read: permission denied")
    except pictures.PictureError as exc:  # the PNG could not be written (a full disk): the old one is kept
        fail(str(exc))
    except (ValueError, IndexError, KeyError) as exc:  # the readers' messages name the file
        fail(str(exc) if repr(path) in str(exc) else f"{path!r}: cannot be drawn: {exc}")
    click.echo(f"written: {written}")


def _check_out(path: str, out: str) -> None:
    """Refuse a PNG target that is the input, a directory, a file that is no PNG, or a PNG drawn from another
    file (never overwritten)."""
    import os

    from pympi_gpu.nbody.pictures import drawn_from
    from pympi_gpu.run.claims import file_key

    if file_key(out) == file_key(path):
        fail(f"--out {out!r} is {path!r} itself: choose another PNG")
    if os.path.isdir(out):
        fail(f"--out {out!r} is a directory")
    if not os.path.isdir(os.path.dirname(out) or "."):
        fail(f"--out: the directory of {out!r} does not exist")
    if os.path.exists(out):
        try:
            with open(out, "rb") as fh:
                head = fh.read(8)
        except OSError as exc:
            fail(f"--out {out!r} cannot be read: {exc.strerror or exc}")
        if not os.path.isfile(out) or head != b"\x89PNG\r\n\x1a\n":
            fail(f"--out {out!r} exists and is not a PNG: it is never overwritten; move it away or choose "
                 "another path")
        try:
            source = drawn_from(out)
        except OSError as exc:
            fail(f"--out {out!r} cannot be read: {exc.strerror or exc}")
        if source is not None and source != os.path.realpath(path):
            fail(f"--out {out!r} is the picture of {source!r}: it is never replaced by one of another file; "
                 "move it away or choose another path")
