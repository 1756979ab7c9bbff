"""The thermo log (pympi_gpu.run.thermolog) in one process: CSV and YAML rows, a continued log without a
second header or a repeated step, a bad suffix refused.  Runs that write it: tests/cli/test_thermo.py."""

from __future__ import annotations

import re

import pytest
import yaml

from helpers.outputs import refused_past_checkpoint
from pympi_gpu.run.thermolog import ThermoLog, format_of, last_step


def test_thermo_log_units(tmp_path):
    p = tmp_path / "a.csv"
    with ThermoLog(p, ["Step", "X"]) as t:
        t.write((0, 0.1))
        t.write((5, 1e-300))
    assert p.read_text() == "Step,X\n0,0.1\n5,1e-300\n"
    assert last_step(p) == 5
    with ThermoLog(p, ["Step", "X"]) as t:   # continued: no second header, step 5 not again
        t.write((5, 9.0))
        t.write((10, 2.0))
    assert p.read_text() == "Step,X\n0,0.1\n5,1e-300\n10,2.0\n"
    y = tmp_path / "a.yml"
    with ThermoLog(y, ["Step", "X"]) as t:
        t.write((0, float("inf")))
    assert list(yaml.safe_load_all(open(y)))[0] == {"keywords": ["Step", "X"], "data": [[0, float("inf")]]}
    with pytest.raises(ValueError, match="suffix must be one of"):
        format_of("thermo.txt")


def _log(path, rows=(0, 5, 10, 15)) -> bytes:
    """A log of ``rows`` as a run writes it (its identity line first), then closed."""
    from pympi_gpu.run.outputs import RunIdentity

    with ThermoLog(path, ["Step", "X", "Y"], RunIdentity.of("lj", 4, 1.0, 1)) as t:
        for step in rows:
            t.write((step, 0.5 * step, float("inf")))
    return path.read_bytes()


@pytest.mark.parametrize("suffix", [".csv", ".yaml"])
@pytest.mark.parametrize("damage, words", [
    ("cut", "(2 value(s)) where a row of 3 values should be"),          # a row cut short, its newline kept
    ("garbage", "(no row)"),                                             # a line of something else
    ("backwards", "a row at step 3 follows the row at step 5"),
    ("not numbers", "is a row of values that are not numbers"),
])
def test_a_log_damaged_before_its_end_is_refused_untouched(tmp_path, suffix, damage, words):
    """(was: a restart appended after it, keeping the damage; a damaged last row is no torn one either)"""
    from pympi_gpu.run.outputs import APPEND, OutputRefused

    path = tmp_path / f"t{suffix}"
    lines = _log(path).decode().split("\n")
    step = "10," if damage == "backwards" else "5,"
    row = next(i for i, line in enumerate(lines) if line.replace("  - [", "").startswith(step))
    cut = lines[row][:lines[row].rindex(",", 0, len(lines[row]) - 3)] + ("]" if suffix == ".yaml" else "")
    lines[row] = {"cut": cut,
                  "garbage": "it was here" if suffix == ".csv" else "  it was here",
                  "backwards": lines[row].replace("10,", "3,", 1),
                  "not numbers": lines[row].replace("2.5", "two and a half")}[damage]
    if damage == "garbage" and suffix == ".csv":
        words = "(1 value(s))"
    path.write_bytes("\n".join(lines).encode())
    before = path.read_bytes()
    with pytest.raises(OutputRefused, match=rf"is damaged at line {row + 1}: .*{re.escape(words)}"):
        ThermoLog(path, ["Step", "X", "Y"], mode=APPEND)
    assert path.read_bytes() == before


@pytest.mark.parametrize("suffix", [".csv", ".yaml"])
def test_a_log_holding_a_step_past_the_checkpoint_is_refused_untouched(tmp_path, suffix):
    """An appended row ``999,...``: a restart from step 10 skipped every new row up to 999 while printing them."""
    from pympi_gpu.run.outputs import APPEND, OutputRefused

    path = tmp_path / f"t{suffix}"
    _log(path, rows=(0, 5, 10, 999))
    before = path.read_bytes()
    with pytest.raises(OutputRefused, match="holds rows up to step 999, beyond step 10 of the checkpoint"):
        ThermoLog(path, ["Step", "X", "Y"], mode=APPEND, through=10)
    assert path.read_bytes() == before
    with ThermoLog(path, ["Step", "X", "Y"], mode=APPEND, through=999) as t:  # its own restart: continued
        assert t.after == 999


@pytest.mark.parametrize("suffix", [".csv", ".yaml"])
def test_only_a_torn_last_row_is_cut(tmp_path, suffix):
    from pympi_gpu.run.outputs import APPEND

    path = tmp_path / f"t{suffix}"
    whole = _log(path)
    with open(path, "ab") as fh:
        fh.write(b"20,1.0" if suffix == ".csv" else b"  - [20, 1.0")
    with ThermoLog(path, ["Step", "X", "Y"], mode=APPEND, through=15) as t:
        assert t.after == 15
    assert path.read_bytes().startswith(whole) and b"20, 1.0" not in path.read_bytes()
    assert b"20,1.0" not in path.read_bytes()


def test_a_yaml_log_without_pyyaml_says_which_extra_brings_it(tmp_path, monkeypatch):
    """`pympi-plot lj.yaml` needs PyYAML: the `plot` extra brings it, and without it the message says so
    (was: "No module named 'yaml'", and only the `test` extra brought it)."""
    import configparser
    import sys

    from helpers.commands import ROOT
    from pympi_gpu.run.thermolog import read

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert any(line.strip().lower().startswith("pyyaml") for line in cfg["options.extras_require"]["plot"].split("\n"))
    log = tmp_path / "t.yaml"
    log.write_text("---\nkeywords: [Step, Temp]\ndata:\n  - [0, 1.0]\n...\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ImportError, match=r"t.yaml' needs PyYAML .*pip install 'pympi_gpu\[plot\]'"):
        read(log)


@pytest.mark.parametrize("suffix", [".csv", ".yaml"])
def test_the_rows_a_killed_run_wrote_after_its_checkpoint_are_cut_and_written_again(tmp_path, suffix):
    """Rows at 15 and 20 past the checkpoint at step 10, every 5 steps: a run killed after its checkpoint;
    the restart writes them again (cut with a note).  Off the cadence, past --steps, or after a gap:
    refused untouched."""
    from pympi_gpu.run.outputs import APPEND, Cadence, OutputRefused

    path = tmp_path / f"t{suffix}"
    for rows, cadence in refused_past_checkpoint():
        path.unlink(missing_ok=True)
        before = _log(path, rows=rows)
        with pytest.raises(OutputRefused, match=f"holds rows up to step {rows[-1]}, beyond step 10"):
            ThermoLog(path, ["Step", "X", "Y"], mode=APPEND, through=cadence)
        assert path.read_bytes() == before
    path.unlink()
    _log(path, rows=(0, 5, 10, 15, 20))
    with ThermoLog(path, ["Step", "X", "Y"], mode=APPEND, through=Cadence(10, 5, 100)) as t:
        assert t.after == 10 and "its 2 rows after step 10 (to step 20) cut" in t.note
        t.write((15, 7.5, 1.0))
    if suffix == ".csv":
        steps = [int(line.split(",")[0]) for line in path.read_text().splitlines()[2:]]
    else:
        steps = [row[0] for doc in yaml.safe_load_all(path.read_text()) for row in doc["data"]]
    assert steps == [0, 5, 10, 15]
