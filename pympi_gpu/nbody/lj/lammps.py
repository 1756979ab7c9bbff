"""The same system for LAMMPS: the initial state as a data file, and an input script that runs it.

Or the other way round: :func:`data_script` has LAMMPS make a state its own
way and write it with ``write_data``, which ``pympi-nbody --model lj --init``
then reads (issue 58).

LAMMPS (``lmp``) started on :func:`input_script` with :func:`write_data`'s
file computes the trajectory ``pympi-nbody --model lj`` computes from the
same state: the same pair style and coefficients, cut at the same distance,
unshifted, the same velocity-Verlet step (``fix nve``, or the thermostat's
fixes: ``fix nvt``, ``fix langevin`` with ``fix nve``), and the same lists'
policy (``neigh_modify delay 0 every K check yes|no``, the config's; by
default every 1 check yes, lists rebuilt when an atom has moved half the
skin; LAMMPS's bench/in.lj rebuilds every 20 steps unchecked, which can miss
pairs).  Its thermo then agrees with ours to round-off, which the chaotic
dynamics amplifies slowly (``benchmarks/lj.py`` races the two; the tests
compare them).  A Langevin run's random forces are drawn from other streams
in the two codes: there they agree in their statistics only.
"""

from __future__ import annotations

import os

import numpy as np

from pympi_gpu.nbody.lj import thermostats
from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities

__all__ = ["write_data", "input_script", "data_script", "read_log", "THERMO_KEYS"]

#: LAMMPS's thermo columns in :func:`input_script`, as this model's thermo rows name them (and ``econserve``
#: after them where the thermostat has an energy of its own)
THERMO_KEYS = ("step", "temp", "e_pair", "ke", "etotal", "press")


def write_data(path: str | os.PathLike, config: LjConfig) -> None:
    """The initial state of ``config`` (every atom, id order) as a LAMMPS data file (``atom_style atomic``)."""
    x = fcc_positions(config.cells, config.density)
    v = velocities(config.atoms, config.temperature, config.seed)
    ids = np.arange(1, config.atoms + 1)
    with open(path, "w") as fh:
        fh.write(f"pympi_gpu LJ initial state, {config.cells}^3 fcc cells, seed {config.seed}\n\n"
                 f"{config.atoms} atoms\n1 atom types\n\n")
        for a, edge in zip("xyz", config.box):
            fh.write(f"0.0 {edge!r} {a}lo {a}hi\n")
        fh.write("\nMasses\n\n1 1.0\n\nAtoms # atomic\n\n")
        np.savetxt(fh, np.column_stack([ids, np.ones_like(ids), x]), fmt=["%d", "%d", "%.17g", "%.17g", "%.17g"])
        fh.write("\nVelocities\n\n")
        np.savetxt(fh, np.column_stack([ids, v]), fmt=["%d", "%.17g", "%.17g", "%.17g"])


def input_script(config: LjConfig, data: str | os.PathLike, steps: int, thermo: int | None = None) -> str:
    """A LAMMPS input that runs ``config`` from the data file ``data`` for ``steps`` steps.

    Thermo every ``thermo`` steps (default: the first and the last), per atom,
    with 12 significant digits, in the columns of :data:`THERMO_KEYS` (and
    ``econserve`` where the thermostat has an energy of its own).
    """
    style, coeff = config.style.lammps(config.coefficients, config.cutoff)
    bath = thermostats.style(config.thermostat)
    return "\n".join([  # the pair style before read_data: a data file's Pair Coeffs (write_data's) need it
        "units lj", "atom_style atomic", style, f"read_data {os.fspath(data)}", coeff,
        f"neighbor {config.skin!r} bin",
        f"neigh_modify delay 0 every {config.neigh_every} check {'yes' if config.neigh_check else 'no'}",
        *bath.lammps(config.setting),
        f"timestep {config.dt!r}", "thermo_style custom step temp pe ke etotal press" + (
            " econserve" if bath.couples else ""),
        "thermo_modify norm yes format float %.12g", f"thermo {thermo or steps}", f"run {steps}", ""])


def data_script(config: LjConfig, data: str | os.PathLike, *, displace: float = 0.0, seed: int = 4928459,
                cells: tuple[int, int, int] | None = None) -> str:
    """A LAMMPS input that makes ``config``'s system its own way and writes it to ``data`` with ``write_data``.

    The fcc lattice of ``config.cells``^3 cells at ``config.density`` in a box
    from ``-L/2`` to ``L/2`` (as ``bench/in.lj`` makes it, but centred), or of
    ``cells`` = ``(nx, ny, nz)`` cells along the three axes (an orthogonal box,
    ``-n_d a/2`` to ``n_d a/2`` along each),
    LAMMPS's own velocities (``velocity all create T seed loop geom``: the same
    at any count of processes), each atom moved by up to ``displace`` sigma
    along each axis (``displace_atoms random``, folded back into the box with
    image flags), and the pair style's coefficients (``write_data`` writes them
    as ``Pair Coeffs``).
    """
    halves = [c / 2 for c in (cells or (config.cells,) * 3)]
    style, coeff = config.style.lammps(config.coefficients, config.cutoff)
    lines = ["units lj", "atom_style atomic", f"lattice fcc {config.density!r}",
             "region box block " + " ".join(f"{-h} {h}" for h in halves), "create_box 1 box",
             "create_atoms 1 box", "mass 1 1.0", f"velocity all create {config.temperature!r} {seed} loop geom"]
    if displace:
        lines.append(f"displace_atoms all random {displace!r} {displace!r} {displace!r} {seed + 1} units box")
    return "\n".join([*lines, style, coeff, f"write_data {os.fspath(data)}", ""])


def read_log(text: str) -> tuple[list[dict], dict]:
    """The thermo rows of a LAMMPS log of :func:`input_script` (keys :data:`THERMO_KEYS`, and ``econserve``
    where the log has that column), and its run: ``{"loop_s", "procs", "steps", "atoms", "cpu_use_percent"}``.
    ValueError if it holds no finished run."""
    import re

    m = re.search(r"Loop time of ([0-9.eE+-]+) on (\d+) procs for (\d+) steps with (\d+) atoms", text)
    if m is None or "Step" not in text:
        raise ValueError("the LAMMPS log holds no finished run")
    head, table = text.split("Step", 1)[1].split("Loop time", 1)[0].split("\n", 1)
    keys = (*THERMO_KEYS, "econserve") if "Econserve" in head else THERMO_KEYS
    number = r"\s+(\S+)"
    rows = [dict(zip(keys, (int(r[0]), *map(float, r[1:]))))
            for r in re.findall(r"^\s*(\d+)" + number * (len(keys) - 1) + r"\s*$", table, re.M)]
    cpu = re.search(r"([0-9.]+)% CPU use", text)
    return rows, {"loop_s": float(m.group(1)), "procs": int(m.group(2)), "steps": int(m.group(3)),
                  "atoms": int(m.group(4)), "cpu_use_percent": float(cpu.group(1)) if cpu else None}
