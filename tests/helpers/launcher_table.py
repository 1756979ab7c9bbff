"""A made-up launcher in the launcher table (tests/data/fake_launcher.py), for the tests of the table."""

from __future__ import annotations

import sys

from helpers.commands import ROOT
from pympi_gpu import launchers

#: tests/data, where the made-up launcher's module is (not a package)
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(DATA))
import fake_launcher  # noqa: E402
from fake_launcher import LOCAL, RANK, SIZE, URI  # noqa: E402  (its variables, for the tests)

__all__ = ["CMD", "DATA", "LOCAL", "RANK", "SIZE", "URI", "fake_launcher", "with_fake_launcher"]

#: a command to launch
CMD = ["pympi-pi", "1e5"]


def with_fake_launcher(monkeypatch):
    """The table with the made-up launcher in it, for the test of ``monkeypatch``: the launcher."""
    monkeypatch.setattr(launchers, "LAUNCHERS", fake_launcher.with_fake(launchers.LAUNCHERS))
    return fake_launcher.FAKE
