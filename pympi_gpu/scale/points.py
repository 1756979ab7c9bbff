"""The sizes of a study: rank counts, or node counts times tasks per node (and its floor probes)."""

from __future__ import annotations

import dataclasses

__all__ = ["Point", "parse_sizes", "make_points", "fix_threads", "cores_used", "oversubscribed"]


@dataclasses.dataclass(frozen=True, order=True)
class Point:
    """One size of a study: ``ranks`` MPI ranks, on ``nodes`` nodes if given.

    ``size`` is set on a floor probe only: the command's size argument it
    runs with instead of the study's (:mod:`pympi_gpu.scale.probes`).
    """

    ranks: int
    nodes: int | None = None
    tasks_per_node: int | None = None
    size: int | None = None

    @property
    def key(self) -> str:
        """A stable name for this point in the results file."""
        where = f"n{self.ranks}" if self.nodes is None else f"N{self.nodes}x{self.tasks_per_node}"
        return where if self.size is None else f"{where}:size{self.size}"

    @property
    def ranks_per_node(self) -> int:
        """Ranks that share one node (all of them for a ``--ranks`` point on one node)."""
        return self.tasks_per_node if self.nodes is not None else self.ranks

    def label(self) -> str:
        if self.nodes is None:
            where = f"{self.ranks} rank{'s' if self.ranks != 1 else ''}"
        else:
            where = f"{self.nodes} node{'s' if self.nodes != 1 else ''} x {self.tasks_per_node}"
        return where if self.size is None else f"{where}, size {self.size} (floor probe)"


def parse_sizes(text: str, what: str = "ranks") -> tuple[int, ...]:
    """Parse ``"1,2,4,8"`` into sorted distinct positive integers.

    Raises
    ------
    ValueError
        With a message for people: empty list, non-integers, zero or
        negative sizes, duplicates.
    """
    items = [t.strip() for t in str(text).split(",")]
    if not text or not str(text).strip() or all(not t for t in items):
        raise ValueError(f"the list of {what} is empty")
    values = []
    for t in items:
        if not t:
            raise ValueError(f"empty item in the list of {what} {text!r}")
        try:
            if not t.isascii():  # int() would read other scripts' digits
                raise ValueError(t)
            v = int(t.replace("_", ""), 10)
        except ValueError:
            raise ValueError(f"{t!r} in {text!r} is not a whole number of {what}") from None
        if v < 1:
            raise ValueError(f"{what} must be >= 1, got {v} in {text!r}")
        values.append(v)
    dupes = sorted({v for v in values if values.count(v) > 1})
    if dupes:
        raise ValueError(f"{what} {', '.join(map(str, dupes))} given twice in {text!r}")
    return tuple(sorted(values))


def make_points(ranks: tuple[int, ...] | None = None, nodes: tuple[int, ...] | None = None,
                tasks_per_node: int | None = None) -> tuple[Point, ...]:
    """The points of a study, smallest first.

    Either ``ranks`` (rank counts, placed by the launcher) or ``nodes`` with
    ``tasks_per_node`` (ranks = nodes x tasks per node).
    """
    if (ranks is None) == (nodes is None):
        raise ValueError("give either rank counts or node counts")
    if ranks is not None:
        if tasks_per_node is not None:
            raise ValueError("tasks per node goes with node counts, not with rank counts")
        return tuple(Point(r) for r in ranks)
    if tasks_per_node is None or tasks_per_node < 1:
        raise ValueError("node counts need a number of tasks per node >= 1")
    return tuple(Point(n * tasks_per_node, n, tasks_per_node) for n in nodes)


def fix_threads(command: list[str] | tuple[str, ...], threads: int) -> tuple[list[str], int]:
    """The command with its threads per rank fixed, and that number.

    A study that lets each run take "this node's cores / its ranks" (the
    commands' default) compares 1 rank x 2 threads against 2 ranks x 1
    thread: the same cores, so a speedup near 1 says nothing about the
    ranks.  The command's own ``--threads N`` wins; else ``--threads``
    ``threads`` is added (before a ``--`` if there is one).
    """
    cmd = list(command)
    for i, arg in enumerate(cmd):
        if arg == "--":
            break
        if arg == "--threads" and i + 1 < len(cmd):
            return cmd, int(cmd[i + 1])
        if arg.startswith("--threads="):
            return cmd, int(arg.split("=", 1)[1])
    at = cmd.index("--") if "--" in cmd else len(cmd)
    return cmd[:at] + ["--threads", str(threads)] + cmd[at:], threads


def cores_used(point: Point, threads: int) -> int:
    """Cores a point keeps busy on each of its nodes: ranks per node x threads per rank."""
    return point.ranks_per_node * threads


def oversubscribed(point: Point, threads: int, cores_per_node: int | None) -> bool:
    """Whether the point asks more of a node than the cores it has (unknown: False)."""
    return cores_per_node is not None and cores_used(point, threads) > cores_per_node
