"""Checkpoint files of both n-body models: one ``.npz`` written atomically.

A checkpoint is a NumPy ``.npz`` archive of named arrays and a ``meta`` JSON
string; each model (``gravity.checkpoint``, ``lj.checkpoint``) says which
arrays and which meta fields, and validates its own.  The file is written to
a temporary file beside the target, flushed to disk (``fsync``) and renamed
over it (``os.replace``, atomic on POSIX): a reader sees the old checkpoint or
the new one, never half of one.  A writer killed mid-write leaves its
temporary file; the next write of the same checkpoint removes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from pympi_gpu.run.fileio import atomic_open, remove_stale_temporaries

__all__ = ["CheckpointError", "write_file", "check_writable"]

class CheckpointError(Exception):
    """A checkpoint that cannot be written, read or used; the message is for people."""


def write_file(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``arrays`` and ``meta`` to ``path`` atomically (temp file, fsync, rename).

    First removes the temporaries a writer of ``path`` killed mid-write left
    (the command line says so at the start of a run; here it happens silently).
    """
    remove_stale_temporaries(path)
    with atomic_open(path) as fh:
        np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)


def check_writable(path: str) -> str | None:
    """Why a checkpoint cannot be written to ``path`` (None if it can); no side effects."""
    p = Path(path)
    if p.is_dir():
        return f"checkpoint path {path!r} is a directory"
    directory = p.parent if str(p.parent) else Path(".")
    if not directory.is_dir():
        return f"the directory of checkpoint {path!r} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"the directory of checkpoint {path!r} is not writable"
    return None
