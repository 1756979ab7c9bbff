"""The README's commands are the ones CI runs."""

from conftest import ROOT


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = readme.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in blocks.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    install_run, test = commands
    assert "pip install" in install_run and "mpiexec -n 2 pympi-pi" in install_run
    assert "python -m pytest" in test
    assert test in ci.splitlines()
