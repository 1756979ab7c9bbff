"""``--backend auto`` is one answer for the whole job: run with ``--with-mpi`` at 2 and 3 ranks."""

import pytest

from pympi_gpu.device.backend_choice import gpu_everywhere
from pympi_gpu.pi.backends import choose, small_work

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture
def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _probe(has: bool):
    return lambda: (has, "a GPU" if has else "no GPU here (the test's probe)")


@pytest.mark.parametrize("pattern", ["all", "none", "rank0", "last"])
def test_every_rank_gets_the_same_answer(world, pattern):
    size, rank = world.Get_size(), world.Get_rank()
    yes = {"all": set(range(size)), "none": set(), "rank0": {0}, "last": set(range(size - 1))}[pattern]
    ok, why = gpu_everywhere(world, _probe(rank in yes))
    answers = world.allgather((ok, why))
    assert all(a == answers[0] for a in answers)
    assert ok == (len(yes) == size)
    if not ok:
        first = min(set(range(size)) - yes)
        assert why.startswith(f"no GPU on rank {first} of {size}")


def test_choose_by_work(world):
    size = world.Get_size()
    assert small_work(10**6, size, ("mc",))
    assert choose(world, "auto", 10**6, ("mc",))[0] == "numpy"
    assert not small_work(10**10, size, ("mc",))
    name, why = choose(world, "auto", 10**10, ("mc",))  # this machine's own probe: no GPU in CI
    assert name in ("numba", "gpu") and why.startswith("auto: ")
    assert choose(world, "numpy", 10**10, ("mc",)) == ("numpy", "requested")
