"""``pympi-plot FILE``: a PNG of a thermo log or of a trajectory frame."""

from __future__ import annotations

import click

from pympi_gpu.cli.common import fail
from pympi_gpu.cli.options import CONTEXT_SETTINGS, version_option


@click.command(context_settings=CONTEXT_SETTINGS)
@version_option()
@click.argument("path", type=str)
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="The PNG to write  [default: PATH with .png for its suffix]")
@click.option("--frame", type=int, default=-1, show_default=True,
              help="Trajectories: the frame to draw, from 0 (negative: from the end).")
def plot(path, out, frame):
    """Draw a run's output: a thermo log (--thermo-file: .csv, .yaml) as energy, temperature, pressure
    (or virial ratio) against step, or a frame of a trajectory (--dump: .extxyz, .gsd) projected
    along z and coloured by speed.
    """
    from pathlib import Path

    from pympi_gpu.nbody import dump, pictures
    from pympi_gpu.run import thermolog

    if not Path(path).is_file():
        fail(f"{path!r} does not exist or is not a file")
    suffix = Path(path).suffix.lower()
    out = out or str(Path(path).with_suffix(".png"))
    try:
        if suffix in thermolog.FORMATS:
            written = pictures.plot_thermo(path, out)
        elif suffix in dump.FORMATS:
            written = pictures.plot_frame(path, out, frame)
        else:
            fail(f"{path!r}: not a thermo log ({', '.join(sorted(thermolog.FORMATS))}) or a trajectory "
                 f"({', '.join(sorted(dump.FORMATS))})")
    except ImportError as exc:
        fail(str(exc))
    except (ValueError, IndexError, KeyError) as exc:
        fail(f"{path!r}: cannot be drawn: {exc}")
    click.echo(f"written: {written}")
