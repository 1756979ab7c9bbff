"""Output files read back by the readers users would use (ase, gsd, the thermo log's own)."""

from __future__ import annotations

import io
import json
import zipfile

import ase.io
import gsd.hoomd
import numpy as np

from pympi_gpu.nbody.dump import format_of
from pympi_gpu.run import thermolog


#: steps of a log or trajectory past a checkpoint at step 10 that a restart refuses, with the restart's cadence:
#: off its every 5 steps, with a gap, past its --steps, or where it writes none between (tests/unit/test_dump_files.py,
#: test_thermo_log.py)
def refused_past_checkpoint():
    from pympi_gpu.run.outputs import Cadence

    return [((0, 5, 10, 17), Cadence(10, 5, 100)), ((0, 5, 10, 999), Cadence(10, 5, 2000)),
            ((0, 5, 10, 20), Cadence(10, 5, 100)), ((0, 5, 10, 15, 20), Cadence(10, 5, 15)),
            ((0, 5, 10, 15), Cadence(10, 0, 100))]


def steps_of(path):
    """The steps of the frames of a ``.gsd`` or ``.extxyz`` trajectory, or the rows of a thermo log."""
    if path.suffix == ".gsd":
        with gsd.hoomd.open(str(path)) as f:
            return [int(fr.configuration.step) for fr in f]
    if path.suffix == ".extxyz":
        return [int(a.info["step"]) for a in ase.io.read(str(path), index=":")]
    return [int(r[0]) for r in thermolog.read(path)[1]]


def frames(path):
    """(steps, ids, positions, velocities, box edge or None) of every frame, by the format's own reader."""
    if format_of(path) == "gsd":
        with gsd.hoomd.open(str(path)) as f:
            out = []
            for fr in f:
                periodic = bool(fr.log["periodic"][0])
                edge = float(fr.configuration.box[0])
                x = fr.particles.position.astype(np.float64) + (0.5 * edge if periodic else 0.0)
                out.append((int(fr.configuration.step), fr.log["particles/id"], x,
                            fr.particles.velocity.astype(np.float64), edge if periodic else None))
            return out
    return [(int(a.info["step"]), a.arrays["id"], a.positions, a.arrays["velo"],
             float(a.cell.lengths()[0]) if a.pbc.all() else None) for a in ase.io.read(str(path), index=":")]


def inflated(path, source, member: str, size: int) -> str:
    """A decompression bomb: the checkpoint ``source`` written to ``path`` with its record ``member``
    (``meta``, ``x``...) deflated and made to inflate to ``size`` bytes, a few hundred kB on disk: the meta
    record's string padded with blanks (JSON reads it as before), an array's rows followed by zeros (a
    reader of its rows stops before them)."""
    with zipfile.ZipFile(source) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    name = f"{member}.npy"
    if member == "meta":
        text = json.dumps(json.loads(str(np.load(source)["meta"])))
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array(text + " " * ((size - 128) // 4 - len(text))))
        data = buf.getvalue()
    else:
        data = members[name] + bytes(size - len(members[name]))
    with zipfile.ZipFile(path, "w") as z:
        for n, body in members.items():
            if n == name:
                z.writestr(zipfile.ZipInfo(n), data, compress_type=zipfile.ZIP_DEFLATED)
            else:
                z.writestr(n, body)
    return str(path)
