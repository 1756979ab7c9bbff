"""The LJ model's memory check (issue 31, item 5): pure arithmetic, refused at once, a floor of what a run holds."""

import pytest

from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lattice import cells_for
from pympi_gpu.nbody.lj.memory import GPU_HOST, gpu_need, gpu_too_large, need, too_large


def test_an_atom_costs_its_state_lists_and_ghosts():
    config = LjConfig(cells=50)                       # 500,000 atoms of bench/in.lj
    n = need(config, (1, 1, 1))
    assert n.owned == 500_000 and n.list_entries == 75
    # measured: a 500,000-atom run (one rank, one thread, 2 steps) holds 444 MB more than a 2,000-atom one
    assert 380e6 < n.bytes < 444e6
    two = need(config, (2, 1, 1))
    assert two.owned == 250_000 and two.ghosts > n.ghosts / 2   # thinner bricks: more ghosts per atom
    assert need(config, (1, 1, 1), gpu=True).bytes == GPU_HOST * 500_000


def test_a_fine_search_grid_is_counted_and_named():
    config = LjConfig(cells=10, cutoff=1e-3, skin=0.0)
    n = need(config, (1, 1, 1))
    assert n.cells > 1e13
    why = too_large(config, (1, 1, 1), 1, available=24 * 10**9)
    assert "cells of the neighbour search" in why and "cutoff + skin 0.001 sigma" in why


def test_refused_where_the_node_is_short_and_not_where_it_is_not():
    config = LjConfig(cells=cells_for(10**9))
    assert too_large(config, (1, 1, 1), 1, available=10**15) is None
    why = too_large(config, (2, 1, 1), 2, available=24 * 10**9)
    assert why.startswith("1,000,188,000 atoms (2x1x1 rank grid) need about 822 GB of memory on this node")
    assert "2 rank(s) x 411 GB" in why and "but it has 24 GB available" in why


@pytest.mark.parametrize("atoms", [4000, 32_000, 256_000])
def test_the_floor_grows_with_the_atoms(atoms):
    small, large = need(LjConfig(cells=cells_for(atoms)), (1, 1, 1)), need(LjConfig(cells=cells_for(8 * atoms)),
                                                                          (1, 1, 1))
    assert 7 < large.bytes / small.bytes < 9


def test_a_gpu_short_of_memory_is_refused_with_its_sharers():
    config = LjConfig(cells=cells_for(10**8), newton=False)  # full lists, as the command runs them on a GPU
    each = gpu_need(config, (1, 1, 1))
    assert 1000 * config.atoms < each < 2000 * config.atoms  # full lists of ~100 entries, twice a step's state
    assert gpu_too_large(config, (1, 1, 1), 1, free=None) is None  # the device does not say: not refused
    assert gpu_too_large(config, (1, 1, 1), 1, free=int(each) + 1) is None
    why = gpu_too_large(config, (1, 1, 1), 2, free=int(each) + 1)  # two ranks on one GPU: twice
    assert why.startswith(f"{config.atoms:,} atoms (1x1x1 rank grid) need about")
    assert "on this GPU (2 rank(s) x" in why and "free; use fewer atoms or more GPUs" in why
    # a brick of a split system holds its ghosts and messages besides: more per atom
    assert gpu_need(config, (2, 2, 2)) / (config.atoms / 8) > each / config.atoms


def test_a_file_start_is_priced_with_its_reading(tmp_path):
    """``--init`` (issue 58): the rows a rank holds while the file is read, and the reading rank's round, are
    priced before any atom is read; a node that holds the run but not its reading is refused."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj import start
    from pympi_gpu.nbody.lj.box import volume
    from pympi_gpu.nbody.lj.config import FileStart
    from pympi_gpu.nbody.lj.lammps import write_data
    from pympi_gpu.nbody.lj.memory import READ

    write_data(tmp_path / "x.data", LjConfig(cells=20))  # 32,000 atoms
    header = start.read_header(MPI.COMM_SELF, str(tmp_path / "x.data"))
    config = LjConfig(cells=0, start=FileStart("x.data", "lammps", header.atoms, header.box, True),
                      density=header.atoms / volume(header.box))
    reading = start.read_bytes(header, 1)
    assert 32_000 * 100 < reading < 32_000 * 1000  # a round (here the whole file) as text, parts and rows
    run = need(config, (1, 1, 1)).bytes
    # the same atoms in the same box as the lattice's
    assert run == pytest.approx(need(LjConfig(cells=20), (1, 1, 1)).bytes, rel=1e-12)
    enough = int(run + reading + READ * 32_000) + 1
    assert too_large(config, (1, 1, 1), 1, available=enough, reading=reading) is None
    why = too_large(config, (1, 1, 1), 1, available=int(run) + 1, reading=reading)
    assert why.startswith("32,000 atoms (1x1x1 rank grid) need about") and "available" in why
    assert too_large(config, (1, 1, 1), 1, available=int(run) + 1) is None  # the run alone would fit


def test_the_docs_say_what_the_estimate_says():
    """The bytes an atom and the megabytes docs/lj.md and docs/faults.md quote are the estimate's (issue 60,
    item 23: the pages said 790 and 788 bytes an atom where the refusal said 821)."""
    import re

    from helpers.commands import ROOT
    from pympi_gpu.nbody.lj.lattice import cells_for
    from pympi_gpu.nbody.memory import human_bytes

    def per_atom(atoms):
        n = need(LjConfig(cells=cells_for(atoms)), (1, 1, 1))
        return n.bytes / n.owned, n.bytes

    lj, faults = ((ROOT / "docs" / page).read_text() for page in ("lj.md", "faults.md"))
    quoted = int(re.search(r"\((\d+) bytes an atom, that refusal says on one\s+rank\)", lj).group(1))
    assert quoted == round(per_atom(10**9)[0])
    assert f"{quoted} bytes an atom with its ghosts and Verlet lists of 75 entries" in faults
    assert f"need about {human_bytes(per_atom(10**9)[1])} of memory" in faults
    said = re.search(r"for 500,000 atoms on one rank it\s+says (\S+ MB)", faults).group(1)
    assert said == human_bytes(per_atom(500_000)[1])
    for page in (lj, faults):
        about = [int(x) for x in re.findall(r"about (\d+) bytes (?:at|an atom at) in.lj's density", page)]
        assert about and all(abs(x - per_atom(10**9)[0]) < 10 for x in about), about
