"""A small filesystem to fill: the disk-full faults."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from helpers.commands import need_root


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "1m"):
    """A small tmpfs at ``where`` (root only), unmounted afterwards."""
    need_root("mounting a small tmpfs needs root (CI runs as root)")
    where.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> None:
    """Fill the filesystem of ``directory`` to the last byte."""
    with open(directory / "filler", "wb", buffering=0) as fh:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * size)
    assert os.statvfs(directory).f_bavail == 0
