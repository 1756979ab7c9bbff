"""What every rank must agree on, decided in one process: the options that must agree, and a yes forced on
one rank only, which gives every rank the same verdict.  The MPMD launches where one rank differs:
tests/cli/test_rank_agreement.py."""

from __future__ import annotations

# ---------------------------------------------------------------- a refusal reached by one rank only


def test_the_options_that_must_agree_unit():
    """The start-up agreement's comparison, without MPI: the first option differing from rank 0's."""
    import click

    from pympi_gpu.cli.common import _differing_command, _differing_option, _first_problem

    @click.command()
    @click.argument("bodies")
    @click.option("--steps")
    def cmd(bodies, steps):
        pass

    ctx = click.Context(cmd)
    assert _differing_option(ctx, [{"steps": (5, None)}, {"steps": (5, None)}]) is None
    text = _differing_option(ctx, [{"steps": (5, None), "bodies": ("9", None)},
                                   {"steps": (7, "PYMPI_NBODY_STEPS"), "bodies": ("9", None)}])
    assert text.startswith("the ranks were given different options: --steps is 5 on rank 0 but 7 on rank 1 "
                           "(from PYMPI_NBODY_STEPS)")
    assert "BODIES is '9' on rank 0 but '8'" in _differing_option(ctx, [{"bodies": ("9", None)},
                                                                         {"bodies": ("8", None)}])
    assert _differing_command(["pympi-pi", "pympi-pi", None]) is None  # None: a rank that hands in no options
    assert _differing_command(["pympi-pi", "pympi-pi", "pympi-nbody"]).startswith(
        "the ranks run different commands: pympi-pi on rank 0 but pympi-nbody on rank 2;")
    assert _first_problem([None, None]) is None
    assert _first_problem(["no GPU", "no GPU"]) == "no GPU"  # every rank: no rank named
    assert _first_problem([None, "no GPU", None]) == "no GPU (rank 1 of 3)"


# ---------------------------------------------------------------- the same under Open MPI


def test_a_yes_forced_on_one_rank_only_gives_every_rank_the_same_verdict():
    """PYMPI_CUDA_AWARE=1 on one rank, a library's own yes on the other: the agreed verdict (and with
    it whether the device round trip, a collective, is made) was each rank's own; now rank 0's."""
    from pympi_gpu.mpi.cuda_aware import CudaAwareness, agree

    verdicts = [CudaAwareness(True, "MPIX_Query_cuda_support", "yes"),
                CudaAwareness(True, "PYMPI_CUDA_AWARE", "forced on by the environment")]

    class Ranks:
        def allgather(self, mine):
            return [(v.supported, v.method, v.detail) for v in verdicts]

    agreed = [agree(Ranks(), mine) for mine in verdicts]
    assert agreed[0] == agreed[1] and not agreed[1].forced
