"""Whole-number counts as people type them: ``1e7``, ``10_000_000``, ``2.5e9``.

A count must denote a positive whole number no larger than :data:`MAX_COUNT`
(2**53, the largest range in which every integer is exact as a float64, so
that sample indices and trapezoid nodes stay exact).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["MAX_COUNT", "CountError", "parse_count"]

MAX_COUNT = 2**53

_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_COUNT_RE = re.compile(rf"\+?(?P<int>{_DIGITS})(?:\.(?P<frac>{_DIGITS})?)?(?:[eE](?P<exp>[+-]?[0-9]+))?")


class CountError(ValueError):
    """A count that is not a positive whole number within bounds."""


def parse_count(text: str | int, *, maximum: int = MAX_COUNT, minimum: int = 1) -> int:
    """Parse a count such as ``"1e7"``, ``"10_000_000"`` or ``"2.5e9"``.

    Parameters
    ----------
    text : str or int
        What the user typed. Integers are accepted as they are.
    maximum, minimum : int
        Inclusive bounds.

    Returns
    -------
    int

    Raises
    ------
    CountError
        With a message that says what was wrong, for people.
    """
    if isinstance(text, bool):
        raise CountError(f"{text!r} is not a count")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip()
        if not s:
            raise CountError("a count is required, got an empty string")
        negative = s.startswith("-")
        m = _COUNT_RE.fullmatch(s[1:] if negative else s)
        if m is None:
            raise CountError(f"{text!r} is not a whole number (write e.g. 1e7, 10000000 or 10_000_000)")
        if negative and Decimal(m["int"].replace("_", "") + "." + (m["frac"] or "0").replace("_", "")) != 0:
            raise CountError(f"{text!r} is negative (must be at least {minimum})")
        exp = m["exp"]
        if exp is not None and len(exp.lstrip("+-")) > 4:
            raise CountError(f"{text!r} is out of range (at most {maximum:.4g})")
        try:
            d = abs(Decimal(s.replace("_", "").lstrip("+")))  # -0 is 0
        except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
            raise CountError(f"{text!r} is not a whole number") from None
        if d != d.to_integral_value():
            raise CountError(f"{text!r} is not a whole number")
        value = int(d)
    if value < minimum:
        raise CountError(f"{text!r} must be at least {minimum}")
    if value > maximum:
        raise CountError(f"{text!r} is out of range (at most {maximum:.4g} = {maximum})")
    return value
