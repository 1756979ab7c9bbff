"""``--backend auto`` is one answer for the whole job: run with ``--with-mpi`` at 2 and 3 ranks."""

import pytest

from pympi_gpu.device.backend_choice import PROBE_ENV, gpu_everywhere, gpu_probe
from pympi_gpu.pi.backends import choose, small_work

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture
def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def test_probe_switch_is_per_rank():
    env = {PROBE_ENV: "yes,no"}
    assert gpu_probe(0, env)[0] is True
    assert gpu_probe(1, env)[0] is False
    assert gpu_probe(5, env)[0] is False  # the last entry repeats


@pytest.mark.parametrize("pattern", ["all", "none", "rank0", "last"])
def test_every_rank_gets_the_same_answer(world, monkeypatch, pattern):
    size = world.Get_size()
    yes = {"all": set(range(size)), "none": set(), "rank0": {0}, "last": set(range(size - 1))}[pattern]
    monkeypatch.setenv(PROBE_ENV, ",".join("yes" if r in yes else "no" for r in range(size)))
    ok, why = gpu_everywhere(world)
    answers = world.allgather((ok, why))
    assert all(a == answers[0] for a in answers)
    assert ok == (len(yes) == size)
    if not ok:
        first = min(set(range(size)) - yes)
        assert why.startswith(f"no GPU on rank {first} of {size}")


def test_choose_by_work(world, monkeypatch):
    monkeypatch.setenv(PROBE_ENV, "no")
    size = world.Get_size()
    assert small_work(10**6, size, ("mc",))
    assert choose(world, "auto", 10**6, ("mc",))[0] == "numpy"
    assert not small_work(10**10, size, ("mc",))
    name, why = choose(world, "auto", 10**10, ("mc",))
    assert name == "numba" and why.startswith("auto: no GPU on rank 0")
    assert choose(world, "numpy", 10**10, ("mc",)) == ("numpy", "requested")
