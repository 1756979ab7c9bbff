"""How the commands read their options: counts as people type them, digits only, finite floats.

click parameter types and the few helpers every command's options share; no
MPI here (the error rules and the start-up are :mod:`pympi_gpu.cli.common`).
"""

from __future__ import annotations

import re

import click

from pympi_gpu.cli.counts import MAX_COUNT, CountError, parse_count

__all__ = ["Command", "Count", "IntRange", "PositiveFloat", "step_problem", "given", "version_option", "escape",
           "CONTEXT_SETTINGS"]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Count(click.ParamType):
    """A positive whole number as people type it: ``1e7``, ``10_000_000``."""

    name = "count"

    def __init__(self, minimum: int = 1, maximum: int = MAX_COUNT):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        try:
            return parse_count(value, minimum=self.minimum, maximum=self.maximum)
        except CountError as exc:
            self.fail(str(exc), param, ctx)


#: what a number typed with a minus sign looks like (``-1``, ``-1e6``, ``-.5``): to click, an option's name
_NEGATIVE = re.compile(r"-\.?[0-9][0-9_.eE+-]*")


class Command(click.Command):
    """A command whose :class:`Count` argument may be typed negative: ``pympi-pi -1`` is refused as a
    negative count (exit status 2), not as ``No such option '-1'``.

    click reads any word that begins with ``-`` as an option; a negative
    number is none of them, so its refusal is the argument's own.
    """

    def parse_args(self, ctx, args):
        typed_args = list(args)  # (click's parser takes the words off the list it is given)
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            name = exc.option_name or ""
            typed = next((a for a in typed_args if a.startswith(name) and _NEGATIVE.fullmatch(a)), None)
            count = next((p for p in self.params if isinstance(p, click.Argument) and isinstance(p.type, Count)),
                         None)
            if typed is None or count is None:
                raise
            count.type.convert(typed, count, ctx)  # refuses it: negative
            raise


class IntRange(click.IntRange):
    """:class:`click.IntRange` for ASCII digits only.

    Python's ``int()`` reads any Unicode digit (``int("１")`` is 1, so is
    ``int("١")``); a seed or a thread count typed in another script is refused
    rather than silently read.
    """

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.isascii():
            self.fail(f"{value!r} is not a valid integer (write it with the digits 0-9)", param, ctx)
        return super().convert(value, param, ctx)


class PositiveFloat(click.ParamType):
    """A finite float > 0 (or >= 0 with ``allow_zero``)."""

    name = "float"

    def __init__(self, allow_zero: bool = False):
        self.allow_zero = allow_zero

    def convert(self, value, param, ctx):
        import math

        try:
            if isinstance(value, str) and not value.isascii():  # float() reads any script's digits
                raise ValueError(value)
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if x < 0 or (x == 0 and not self.allow_zero):
            self.fail(f"{value!r} must be {'>= 0' if self.allow_zero else '> 0'}", param, ctx)
        return x


def step_problem(dt: float, dtype, precision: str) -> str | None:
    """Why ``--dt`` cannot be a time step of a run in ``dtype`` (named ``precision``); None: it can.

    A step below the smallest normal number of the run's precision is zero
    there (``1e-46`` in fp32) or keeps few of its digits (``1e-320`` in fp64):
    the run would go on with nothing moving.  As ``--dt 0``, it is refused.
    """
    import numpy as np

    tiny = float(np.finfo(dtype).tiny)
    if dt >= tiny:
        return None
    zero = "is zero" if dtype(dt) == 0 else "keeps few of its digits"
    return (f"--dt {dt!r} is below {tiny:.3g}, the smallest normal number of {precision}, the run's precision: "
            f"there a step of it {zero}, and nothing would move")


def version_option():
    """``--version``: the installed package's version, from its metadata."""
    return click.version_option(package_name="pympi_gpu", prog_name="pympi_gpu",
                                message="%(prog)s %(version)s")


def escape(text: object) -> str:
    """``text`` made safe to print through rich: ``[plot]`` and ``[host:123]`` stay as typed.

    Every string shown with a rich Console or Table that does not come from this
    program (paths, commands, error messages, MPI's stderr) goes through here.
    """
    from rich.markup import escape as _escape

    return _escape(str(text))


def given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given by the user (command line or environment), not defaulted."""
    return ctx.get_parameter_source(name) in (click.core.ParameterSource.COMMANDLINE,
                                              click.core.ParameterSource.ENVIRONMENT)
