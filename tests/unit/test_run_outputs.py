"""Outputs that belong to their run (pympi_gpu.run.outputs), in one process: the rule for a file already
there, and the readers of the identity line a run writes into its trajectories and logs.  The commands:
tests/cli/test_outputs.py and test_claimed_outputs.py."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from pympi_gpu.run import thermolog
from pympi_gpu.run.outputs import APPEND, NEW, REPLACE, Found, OutputRefused, RunIdentity, decide


# ---------------------------------------------------------------- the rule and the readers

def test_the_rule_for_a_file_already_there():
    me = RunIdentity.of("lj", 4000, 16.5, 7, temperature=1.44)
    mine = dict(me.fields)
    assert decide("--dump", "a", Found("nothing"), me, restart=False, overwrite=False) == NEW
    assert decide("--dump", "a", Found("data", mine), me, restart=True, overwrite=False) == APPEND
    assert decide("--dump", "a", Found("data", {"model": "x"}), me, restart=True, overwrite=True) == REPLACE
    for found, restart, overwrite, words in [
            (Found("foreign", detail="a trajectory"), False, True, "is not a trajectory"),
            (Found("data", mine, "3 frames"), False, False, "already exists (3 frames)"),
            (Found("data", None), True, False, "records no run"),
            (Found("data", {**mine, "seed": "8"}), True, False, "belongs to another run (seed 8 there, 7 here)")]:
        with pytest.raises(OutputRefused, match=words.replace("(", r"\(").replace(")", r"\)")):
            decide("--dump", "a", found, me, restart=restart, overwrite=overwrite)
    assert me.text() == "model=lj n=4000 box=16.5 seed=7 temperature=1.44"
    assert RunIdentity.of("gravity", 5, None, 1).text() == "model=gravity n=5 box=open seed=1"


def test_readers_read_the_identity_line(tmp_path):
    """The comment line: PyYAML skips it, pympi-plot's reader too; numpy and pandas are told to."""
    me = RunIdentity.of("lj", 4, 1.5, 1)
    for suffix in (".csv", ".yaml"):
        p = tmp_path / f"t{suffix}"
        with thermolog.ThermoLog(p, ["Step", "X"], me) as t:
            t.write((0, 0.5))
            t.write((5, 0.25))
        assert p.read_text().splitlines()[0] == "# pympi-nbody model=lj n=4 box=1.5 seed=1"
        assert thermolog.read(p) == (["Step", "X"], [[0.0, 0.5], [5.0, 0.25]])
        assert thermolog.inspect(p).fields == dict(me.fields)
    table = np.genfromtxt(tmp_path / "t.csv", delimiter=",", names=True, skip_header=1)
    assert table["X"].tolist() == [0.5, 0.25]
    assert list(yaml.safe_load_all((tmp_path / "t.yaml").read_text()))[0]["data"] == [[0, 0.5], [5, 0.25]]
    empty = tmp_path / "h.csv"
    thermolog.ThermoLog(empty, ["Step", "X"], me).close()
    assert thermolog.inspect(empty).kind == "nothing"  # a header and no row: nothing to lose
