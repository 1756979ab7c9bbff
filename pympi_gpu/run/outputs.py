"""Output files that belong to their run: the identity a run records in them, and what to do with one already there.

A run writes its identity into its trajectory and thermo log (each format
says where: a field of every extended-XYZ frame header, a GSD log entry, a
comment line of a thermo log) as ``key=value`` words: the model, the number of
atoms or bodies ``n``, the periodic box edge ``box`` (``open`` for gravity),
the ``seed``, then what else fixes the run's trajectory (the options a
``--restart`` takes from its checkpoint: ``dt``, ``temperature``...).  Two
runs with the same identity make the same trajectory.

:func:`decide` is the rule for a file that is already there, before anything
is written:

- a file that holds nothing (empty, or a log with no row) is written afresh;
- a file of another kind (a text file given as ``--dump notes.xyz``) is never
  written, not even with ``--overwrite``;
- without ``--restart`` a file that holds data is refused: continue its run
  with ``--restart``, remove it, or ``--overwrite`` it;
- with ``--restart`` it is continued only if its identity is this run's.
"""

from __future__ import annotations

import dataclasses
import shlex

__all__ = ["RunIdentity", "Found", "OutputError", "OutputRefused", "decide", "parse_fields", "damaged", "beyond",
           "Cadence", "past_checkpoint", "NEW", "APPEND", "REPLACE"]

#: what :func:`decide` says to do with a file
NEW, APPEND, REPLACE = "new", "append", "replace"


class OutputError(Exception):
    """An output file (trajectory, thermo log) that cannot be written; the message is for people."""


class OutputRefused(OutputError):
    """An output file a run may not write (another run's, not of its kind, not writable): bad input."""


def damaged(path, where: str, why: str, unit: str) -> OutputRefused:
    """The refusal of a file a restart would continue that is damaged ``where`` (``line 205``) before its end.

    What a job killed mid-write leaves is a torn last ``unit`` (``frame``, ``row``), which the restart
    cuts; anything else (a line deleted or changed, a frame's index entry lost) is no such tear:
    cutting the file there would drop what follows, silently, so it is left as it is.
    """
    return OutputRefused(f"{str(path)!r} is damaged at {where}: {why}; a restart cuts only a torn last {unit} "
                         "(what a job killed mid-write leaves), so the file is left as it is: mend it, remove it, "
                         "or pass --overwrite to start it afresh")


def beyond(path, last: int, through: int, units: str) -> OutputRefused:
    """The refusal of a file holding ``units`` (``rows``) up to step ``last``, past the restart's ``through``.

    A restart skips what its file already holds; ``units`` beyond the checkpoint's step are not what
    the restart would write there (another run's, or a run's after the checkpoint it restarts from),
    and the restart would print its own and keep them.
    """
    return OutputRefused(f"{str(path)!r} holds {units} up to step {last}, beyond step {through} of the "
                         f"checkpoint: they are not this restart's, and it would skip writing its own up to step "
                         f"{last}; restart from the checkpoint of the run that wrote them, remove the {units} "
                         "after the checkpoint's step (or the file), or pass --overwrite to start it afresh")


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When a restart writes its rows or frames: every ``every`` steps (0: none between the first and the
    last) after the checkpoint's step ``through``, up to step ``until`` (``--steps``)."""

    through: int
    every: int = 0
    until: int | None = None

    @classmethod
    def of(cls, through: Cadence | int | None) -> Cadence | None:
        """``through`` as a cadence: a bare step is one past which nothing is written again (None: no restart)."""
        return through if through is None or isinstance(through, Cadence) else cls(int(through))

    def rewrites(self, steps: list[int]) -> bool:
        """Whether ``steps`` (past ``through``) are those the restart writes next, every one of them: what the
        run that wrote the checkpoint wrote after it before it was killed (SIGKILL, a node lost)."""
        if not self.every or not steps or (self.until is not None and steps[-1] > self.until):
            return False
        first = (self.through // self.every + 1) * self.every
        return steps == list(range(first, first + self.every * len(steps), self.every))


def past_checkpoint(path, steps: list[int], cadence: Cadence, units: str) -> str | None:
    """The verdict on ``units`` (``rows``) of a continued file at ``steps`` past the restart's checkpoint.

    None where there are none; a note where they are the ones the restart writes again, bit for bit
    (:meth:`Cadence.rewrites`: a run killed after its last checkpoint), for the caller to cut them and
    print the note; else :func:`beyond` is raised: another run's, or a run's this restart would not
    reach, and the restart would skip writing its own up to there.
    """
    if not steps:
        return None
    if not cadence.rewrites(steps):
        raise beyond(path, steps[-1], cadence.through, units)
    return (f"{str(path)!r}: its {len(steps)} {units[:-1] if len(steps) == 1 else units} after step "
            f"{cadence.through} (to step {steps[-1]}) cut: the run that wrote them was stopped after its "
            "checkpoint; this restart writes them again")


def _text(value) -> str:
    if value is None:
        return "open"
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What makes a run's trajectory: ``fields``, ``(key, text)`` pairs in the order they are written."""

    fields: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, model: str, n: int, box: float | str | None, seed: int, **params) -> RunIdentity:
        """The identity of a ``model`` run of ``n`` atoms or bodies in a cube of edge ``box`` (None: open space;
        a string: an orthogonal box's edges, ``Lx,Ly,Lz``)."""
        pairs = [("model", model), ("n", n), ("box", box), ("seed", seed), *params.items()]
        return cls(tuple((k, _text(v)) for k, v in pairs))

    def text(self) -> str:
        """``model=lj n=4000 box=16.79... seed=87287 ...``: words a ``key=value`` reader (ASE, OVITO) splits."""
        return " ".join(f"{k}={v}" for k, v in self.fields)

    def differences(self, found: dict[str, str]) -> list[str]:
        """How the fields ``found`` in a file differ from this identity (empty: the same run)."""
        return [f"{k} {found[k] if k in found else '(none)'} there, {v} here"
                for k, v in self.fields if found.get(k) != v]


def parse_fields(text: str) -> dict[str, str]:
    """The ``key=value`` words of a header or comment line (quoted values kept whole)."""
    try:
        words = shlex.split(text, comments=False, posix=True)
    except ValueError:  # an unbalanced quote: a line of something else
        words = text.split()
    return dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("="))


@dataclasses.dataclass(frozen=True)
class Found:
    """What an existing output file holds.

    ``kind``: ``"nothing"`` (absent, empty, or of its format but with no
    frame or row), ``"data"`` (frames or rows of this format) or ``"foreign"``
    (another kind of file); ``fields`` the ``key=value`` identity it records
    (None: none recorded); ``detail`` a few words on what it holds, for messages;
    ``damage`` why it cannot be continued, where that was seen already (a GSD
    index whose damage hides the records, so that the identity read is no
    judge of it).
    """

    kind: str
    fields: dict[str, str] | None = None
    detail: str = ""
    #: why the file cannot be continued, where judging it found it damaged (:func:`damaged`'s words)
    damage: str | None = None


def decide(option: str, path: str, found: Found, identity: RunIdentity | None, *, restart: bool,
           overwrite: bool) -> str:
    """:data:`NEW`, :data:`APPEND` or :data:`REPLACE` for ``path`` (given as ``option``); or :class:`OutputRefused`."""
    where = f"{option} {path!r}"
    if found.kind == "foreign":
        raise OutputRefused(f"{where} exists and is not {found.detail}: it is never overwritten; "
                            "move it away or choose another path")
    if found.kind == "nothing":
        return NEW
    if overwrite:
        return REPLACE
    if not restart:
        raise OutputRefused(f"{where} already exists ({found.detail}): continue the run that wrote it with "
                            "--restart CHECKPOINT, remove the file, or pass --overwrite to replace it")
    if found.damage:
        raise OutputRefused(f"{option} {found.damage}")
    if found.fields is None or "model" not in found.fields:
        raise OutputRefused(f"{where} records no run ({found.detail}; written by another program or an older "
                            "pympi-nbody), so --restart cannot continue it: remove it, choose another path, "
                            "or pass --overwrite to replace it")
    if identity is not None and (diff := identity.differences(found.fields)):
        raise OutputRefused(f"{where} belongs to another run ({'; '.join(diff)}): remove it, choose another "
                            "path, or pass --overwrite to replace it")
    return APPEND
