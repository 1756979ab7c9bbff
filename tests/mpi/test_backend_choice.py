"""``--backend auto`` is one answer for the whole job: run with ``--with-mpi`` at 2 and 3 ranks."""

import pytest

from pympi_gpu.cli.devices import choose_device
from pympi_gpu.device.backend_choice import gpu_everywhere
from pympi_gpu.pi.backends import small_reason, small_work

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
    """The one device choice of every command (cli.devices), with pympi-pi's small work."""
    size = world.Get_size()
    assert small_work(10**6, size, ("mc",))
    small = choose_device(world, "auto", None, small=small_reason(10**6, size, ("mc",)))
    assert small.backend == "numpy" and small.backend_reason.startswith("auto: small work")
    assert not small_work(10**10, size, ("mc",))
    big = choose_device(world, "auto", None)  # this machine's own probe: no GPU in CI
    assert big.backend in ("numba", "gpu") and big.backend_reason.startswith("auto: ")
    asked = choose_device(world, "numpy", None, small=None)
    assert (asked.backend, asked.backend_reason, asked.transport) == ("numpy", "requested", "host")
