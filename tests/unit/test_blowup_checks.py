"""The blow-up checks' building blocks: the largest displacement (NaN counts as infinite), the message
naming the distance and its cause, where the broken state is saved (beside the checkpoint, never on
it), and the temporaries that carry their writer.  Runs that blow up: tests/cli/test_blowup.py."""

from __future__ import annotations

import math
import os
import time

import numpy as np

from pympi_gpu.nbody import blowup
from pympi_gpu.run.fileio import STALE_AFTER, atomic_open, host_name, stale_temporaries


# ---------------------------------------------------------------- stale temporaries


def test_temporaries_carry_their_writer(tmp_path):
    """The name says host and pid, so another job's run never takes a live file for a dead one's."""
    target = tmp_path / "c.npz"
    with atomic_open(target) as fh:
        seen = [p.name for p in tmp_path.iterdir()]
        fh.write(b"x")
    assert len(seen) == 1 and seen[0].startswith(f".c.npz.{host_name()}.{os.getpid()}.")
    assert stale_temporaries(target, now=time.time() + 10 * STALE_AFTER) == []  # its writer (we) still runs


# ---------------------------------------------------------------- the checks

def test_moved_too_far_names_the_distance_and_the_cause():
    assert blowup.moved_too_far(7, 2.0 ** 2, 2.8, "sigma") is None
    exc = blowup.moved_too_far(7, 3.0 ** 2, 2.8, "sigma")
    assert "an atom moved 3 sigma" in str(exc) and "2.8 sigma" in str(exc) and "step 7" in str(exc)
    assert "non-finite positions" in str(blowup.moved_too_far(7, math.inf, 2.8, "sigma"))


def test_blowup_path_sits_beside_the_checkpoint_and_never_on_it():
    assert blowup.blowup_path("out/good.npz", "d.npz") == "out/good.blowup.npz"
    assert blowup.blowup_path("state", "d.npz") == "state.blowup.npz"
    assert blowup.blowup_path(None, "d.npz") == "d.npz"


def test_largest_displacement_counts_nan_as_infinite():
    from pympi_gpu.nbody.lj.cpu.kernels import max_displacement2

    x0 = np.zeros((5, 3))
    x = np.zeros((5, 3))
    x[3, 1] = 2.0
    assert max_displacement2(x, x0, 5) == 4.0
    x[4, 2] = np.nan
    assert max_displacement2(x, x0, 5) == np.inf
    x[4, 2] = 0.0
    x[0, 0] = np.inf
    assert max_displacement2(x, x0, 5) == np.inf
