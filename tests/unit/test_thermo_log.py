"""The thermo log (pympi_gpu.run.thermolog) in one process: CSV and YAML rows, a continued log without a
second header or a repeated step, a bad suffix refused.  Runs that write it: tests/cli/test_thermo.py."""

from __future__ import annotations

import pytest
import yaml

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
