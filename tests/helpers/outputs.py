"""The steps an output file holds, read by the readers users would use (ase, gsd, the thermo log's own)."""

from __future__ import annotations

from pympi_gpu.run import thermolog


def steps_of(path):
    """The steps of the frames of a ``.gsd`` or ``.extxyz`` trajectory, or the rows of a thermo log."""
    if path.suffix == ".gsd":
        import gsd.hoomd

        with gsd.hoomd.open(str(path)) as f:
            return [int(fr.configuration.step) for fr in f]
    if path.suffix == ".extxyz":
        import ase.io

        return [int(a.info["step"]) for a in ase.io.read(str(path), index=":")]
    return [int(r[0]) for r in thermolog.read(path)[1]]
