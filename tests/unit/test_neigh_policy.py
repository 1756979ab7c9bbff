"""The lists' policy, LAMMPS's ``neigh_modify every K check yes|no``, in one process: the squared
displacement above which a step rebuilds, and the policy in the run's identity and in the LAMMPS input a
race writes.  The runs themselves: tests/cli/test_neigh_policy.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.system import LjSystem


@pytest.mark.parametrize("every, check, step, built_at, expected", [
    (1, True, 5, 4, 0.0225), (1, True, 5, 0, 0.0225),  # the default: every step looked at, half the skin
    (10, True, 13, 3, 0.0225), (10, True, 12, 3, math.inf), (10, True, 23, 3, 0.0225),
    (10, False, 13, 3, -1.0), (10, False, 14, 3, math.inf),  # unchecked: the look rebuilds whatever moved
])
def test_threshold_follows_the_policy(every, check, step, built_at, expected):
    """The squared displacement above which a step rebuilds: only K steps after the last build is there one."""
    system = SimpleNamespace(config=LjConfig(cells=3, neigh_every=every, neigh_check=check), built_at=built_at,
                             rebuild_distance2=0.0225)
    assert LjSystem.threshold(system, step) == expected


def test_policy_in_the_meta_and_the_lammps_input(tmp_path):
    from pympi_gpu.nbody.lj.lammps import input_script

    default, bench = LjConfig(cells=3), LjConfig(cells=3, neigh_every=20, neigh_check=False)
    assert "neigh_modify delay 0 every 1 check yes" in input_script(default, tmp_path / "data", 10).splitlines()
    assert "neigh_modify delay 0 every 20 check no" in input_script(bench, tmp_path / "data", 10).splitlines()
    assert (bench.meta()["neigh_every"], bench.meta()["neigh_check"]) == (20, "no")
    # a run's identity names a policy only where it is not the default: older outputs keep theirs
    assert "neigh" not in default.identity().text() and "neigh_every" in bench.identity().text()
