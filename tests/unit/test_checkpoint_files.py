"""Checkpoint files read in one process (pympi_gpu.nbody.checkpoint, gravity.checkpoint, lj.checkpoint): what
a file must hold to be read, and what is refused before it is read.  Restarts of real runs refused:
tests/cli/test_faults.py; the streaming over ranks: tests/mpi/test_checkpoint_mpi.py."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from helpers.outputs import inflated
from pympi_gpu.nbody.checkpoint import NpzRows, write_file
from pympi_gpu.nbody.gravity import checkpoint as gravity
from pympi_gpu.nbody.lj import checkpoint as lj

N = 8


def gravity_file(path, **change) -> str:
    """A gravity checkpoint of ``N`` bodies (fp64), its arrays changed by ``change``."""
    rng = np.random.default_rng(3)
    arrays = {k: rng.random(N) for k in gravity.FIELDS}
    arrays["m"] = np.full(N, 1.0 / N)
    arrays.update(change)
    meta = {"format": gravity.FORMAT, "bodies": N, "step": 10, "time": 0.01, "seed": 1, "init": "plummer",
            "precision": "fp64", "dt": 0.001, "softening": 0.01, "ranks": 1}
    write_file(path, arrays, meta)
    return str(path)


def test_a_good_gravity_checkpoint_is_read(tmp_path):
    meta, arrays = gravity.read_file(gravity_file(tmp_path / "g.npz"))
    assert meta["bodies"] == N and arrays["m"].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("mass", [0.0, -1.0])
def test_masses_that_are_not_positive_are_refused(tmp_path, mass):
    """(was: run, the virial ratio nan)"""
    m = np.full(N, 1.0 / N)
    m[3] = mass
    with pytest.raises(gravity.CheckpointError, match="array 'm' holds masses that are not positive"):
        gravity.read_file(gravity_file(tmp_path / "g.npz", m=m))


def test_a_meta_record_that_inflates_far_beyond_a_checkpoints_is_refused_unread(tmp_path):
    """A decompression bomb: a meta record of 64 MB (1.2 GB in the issue's file) was read whole."""
    bomb = inflated(tmp_path / "bomb.npz", gravity_file(tmp_path / "g.npz"), "meta", 64 << 20)
    assert (tmp_path / "bomb.npz").stat().st_size < 1 << 20
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(gravity.CheckpointError,
                           match=r"the 'meta' record holds 64 MiB once inflated, far more than a checkpoint's"):
            NpzRows(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20 and time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_an_array_record_larger_than_its_atoms_is_refused_unread(tmp_path, model):
    """An array's record bounded by the atom count the record says: ``x`` of 64 MB for 8 bodies."""
    if model == "gravity":
        good, read = gravity_file(tmp_path / "g.npz"), gravity.read_file
    else:
        good, read = _lj_file(tmp_path / "lj.npz"), lj.read_file
    bomb = inflated(tmp_path / "bomb.npz", good, "x", 64 << 20)
    with pytest.raises(gravity.CheckpointError, match=r"array 'x'.* holds 64 MiB"):
        read(bomb)


def _lj_file(path) -> str:
    """An LJ checkpoint of one fcc cell (4 atoms)."""
    rng = np.random.default_rng(4)
    arrays = {"x": rng.random((4, 3)), "v": rng.random((4, 3)), "f": rng.random((4, 3)), "id": np.arange(1, 5)}
    meta = {"format": lj.FORMAT, "step": 0, "cells": 1, "atoms": 4, "density": 0.8442, "temperature": 1.44,
            "cutoff": 2.5, "skin": 0.3, "dt": 0.005, "seed": 1, "ranks": 1}
    write_file(path, arrays, meta)
    return str(path)
