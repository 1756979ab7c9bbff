"""Records of a run: the provenance every record carries, and their serialisation.

The library returns them; the command line prints them for people or
serialises them with :func:`to_dict` / :func:`to_json` for machines.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

__all__ = ["Provenance", "to_dict", "to_json"]


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where and with what a result was computed."""

    package: str
    python: str
    mpi4py: str
    numpy: str
    numba: str
    mpi_library: str
    mpi_vendor: str
    ranks: int
    hosts: tuple[str, ...]
    ranks_per_host: dict[str, int]
    launcher: dict[str, str]
    container: str | None
    extra_versions: dict[str, str] = dataclasses.field(default_factory=dict)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_dict(record: Any, **envelope: Any) -> dict[str, Any]:
    """A JSON-ready dict of ``record``; ``envelope`` keys come first."""
    out = dict(envelope)
    out.update(_plain(record))
    return out


def to_json(record: Any, **envelope: Any) -> str:
    return json.dumps(to_dict(record, **envelope), indent=2, sort_keys=False)
