"""Floor probes: the study's command at small sizes per rank, for the per-step floor.

A strong-scaling study measured on a few ranks keeps many atoms on each, and
there what a step costs whatever its size (Python between kernels, the MPI
calls, the list rebuild's bookkeeping: tens of microseconds) is lost in the
pair work; at hundreds of ranks it decides the efficiency.  A probe runs the
study's command with its size argument replaced, so that each rank holds a
given number of atoms (or bodies), at the study's largest rank count: the
same code, the same decomposition, a small size.  The projection fits the
floor to the probes and the study's sizes together
(:func:`pympi_gpu.scale.projection.fit`).

The command line is read here as words only: which options take a value is
the caller's to say (the command's own click definition, at the CLI edge), so
this package imports no application.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pympi_gpu.scale.points import Point

__all__ = ["DEFAULT_SIZES", "size_index", "plan_probes"]

#: atoms (or bodies) per rank of the probes unless told: a few hundred, where the floor shows, and a
#: few thousand, where the work per atom does
DEFAULT_SIZES = (250, 2000)


def size_index(argv: Sequence[str], start: int, takes_value: Callable[[str], bool | None]) -> int:
    """Where in ``argv`` the command's size argument (its first positional argument) is.

    Parameters
    ----------
    argv : sequence of str
        The command line.
    start : int
        The index of its first argument (after the program, and a subcommand).
    takes_value : callable
        ``takes_value(option)``: True for an option that takes a value,
        False for a flag, None for an option the command does not have.

    Raises
    ------
    ValueError
        With a message for people: an option the command does not know, or
        no positional argument.
    """
    i = start
    while i < len(argv):
        word = argv[i]
        if word == "--":
            if i + 1 < len(argv):
                return i + 1
            break
        if word.startswith("-") and len(word) > 1 and not word[1].isdigit():
            name, has_value = word.split("=", 1)[0], "=" in word
            known = takes_value(name)
            if known is None:
                raise ValueError(f"{argv[0]} has no option {name!r}: cannot find its size argument")
            i += 2 if known and not has_value else 1
            continue
        return i
    raise ValueError(f"{' '.join(argv)}: no size argument to replace")


def plan_probes(command: Sequence[str], index: int, points: Sequence[Point],
                per_rank: Sequence[int]) -> tuple[tuple[Point, list[str]], ...]:
    """Each probe's point and command: ``per_rank`` times the ranks as the size argument at ``index``.

    The probes run at the study's largest point (the most ranks: the
    decomposition closest to the projected sizes), one per size per rank.
    """
    at = max(points, key=lambda p: p.ranks)
    out = []
    for n in per_rank:
        size = n * at.ranks
        cmd = list(command)
        cmd[index] = str(size)
        out.append((Point(at.ranks, at.nodes, at.tasks_per_node, size=size), cmd))
    return tuple(out)
