"""Pictures of a run: thermo against step, and a snapshot of a trajectory frame (PNG, matplotlib).

:func:`plot_thermo` draws a thermo log (``--thermo-file``, CSV or YAML) as one
panel of energies and one per other quantity (temperature, pressure, the
virial ratio) against step; :func:`plot_frame` one frame of a ``--dump``
trajectory projected on the x-y plane, coloured by speed.  Each PNG names the
file it was drawn from (a text chunk, :data:`SOURCE`; :func:`drawn_from` reads
it back).  matplotlib is the ``plot`` extra; without it both raise ImportError
with the line to install it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["plot_thermo", "plot_frame", "drawn_from", "default_out", "PictureError", "SOURCE"]

#: thermo columns drawn together in the energy panel
ENERGIES = ("KinEng", "PotEng", "E_pair", "TotEng")
#: columns left out (the momentum: zero to round-off, it would only show the noise)
SKIPPED = ("Step", "Px", "Py", "Pz")


#: the PNG text chunk's keyword naming the file a picture was drawn from (its real path)
SOURCE = "pympi-plot source"
_PNG = b"\x89PNG\r\n\x1a\n"


class PictureError(Exception):
    """A picture that cannot be written (the message names the file; an old one there is kept)."""


def default_out(path: str | os.PathLike) -> Path:
    """The PNG of ``path`` when none is named: its name with ``.png`` added (``lj.csv`` -> ``lj.csv.png``),
    so that a thermo log and a trajectory of one run (``lj.csv``, ``lj.extxyz``) never draw to one file."""
    path = Path(path)
    return path.with_name(path.name + ".png")


def drawn_from(png: str | os.PathLike) -> str | None:
    """The file a PNG was drawn from (:data:`SOURCE`), or None where it names none (another program's, or a
    picture of an older pympi-plot).  Reads the chunks before the image data; OSError where it cannot."""
    with open(png, "rb") as fh:
        if fh.read(8) != _PNG:
            return None
        while True:
            head = fh.read(8)
            if len(head) < 8:
                return None
            length, kind = int.from_bytes(head[:4], "big"), head[4:]
            if kind in (b"IDAT", b"IEND") or length > 1 << 20:
                return None
            data = fh.read(length)
            fh.read(4)  # the CRC
            key, _, value = data.partition(b"\0")
            if kind == b"tEXt" and key.decode("latin-1") == SOURCE:
                return value.decode("latin-1")
            if kind == b"iTXt" and key.decode("latin-1") == SOURCE and value[:1] == b"\0":  # (not latin-1)
                return value[2:].split(b"\0", 2)[-1].decode("utf-8", "replace")


def _save(fig, out: Path, source) -> Path:
    """Write ``fig`` as a PNG to ``out`` whole or not at all (temporary file, fsync, rename), naming ``source``."""
    from pympi_gpu.run.fileio import atomic_open

    try:
        with atomic_open(out) as fh:
            fig.savefig(fh, format="png", metadata={SOURCE: os.path.realpath(source)})
    except OSError as exc:
        raise PictureError(f"cannot write {os.fspath(out)!r}: {exc.strerror or exc}") from None
    return out


def _figure(**kw):
    """A matplotlib Figure of its own (no pyplot: no global backend chosen, no figure kept alive)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(f"matplotlib is not installed ({exc}); pip install 'pympi_gpu[plot]'") from None
    return Figure(dpi=100, layout="constrained", **kw)


def plot_thermo(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Energies, then each other thermo column, against step; written to ``out`` (PNG)."""
    from pympi_gpu.run.thermolog import read

    keywords, rows = read(path)
    data = np.array(rows, dtype=np.float64)
    step = data[:, keywords.index("Step")] if "Step" in keywords else np.arange(len(data))
    energies = [k for k in keywords if k in ENERGIES]
    others = [k for k in keywords if k not in ENERGIES and k not in SKIPPED]
    panels = ([energies] if energies else []) + [[k] for k in others]
    fig = _figure(figsize=(7, 2.2 * len(panels) + 0.6))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)
    for ax, names in zip(axes[:, 0], panels):
        for k in names:
            ax.plot(step, data[:, keywords.index(k)], ".-" if len(step) < 60 else "-", label=k, lw=1.2, ms=3)
        ax.set_ylabel("energy" if names is energies else names[0])
        if len(names) > 1:
            ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(f"thermo: {Path(path).name} ({len(rows)} rows)")
    return _save(fig, Path(out), path)


def plot_frame(path: str | os.PathLike, out: str | os.PathLike, index: int = -1) -> Path:
    """Frame ``index`` of a trajectory seen along z (x-y projection), coloured by speed; PNG."""
    from pympi_gpu.nbody.dump import read_frame

    frame = read_frame(path, index)
    x, speed = frame["x"], np.linalg.norm(frame["v"], axis=1)
    fig = _figure(figsize=(6.4, 5.6))
    ax = fig.subplots()
    size = max(0.5, min(20.0, 2e4 / max(len(x), 1)))
    dots = ax.scatter(x[:, 0], x[:, 1], c=speed, s=size, cmap="viridis", linewidths=0, rasterized=True)
    fig.colorbar(dots, ax=ax, label="speed |v|")
    if frame["box"] is not None:
        ax.set_xlim(0, frame["box"][0])
        ax.set_ylim(0, frame["box"][1])
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"{Path(path).name}: step {frame['step']}, {len(x):,} bodies (projected along z)")
    return _save(fig, Path(out), path)
