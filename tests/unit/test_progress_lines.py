"""Progress of long runs, in one process: a line every interval with its rate and time left, a restarted
run counted from its first step, long times that read well, the interval from the environment.  The
lines from rank 0 under mpiexec: tests/cli/test_progress.py."""

from __future__ import annotations

import io

from pympi_gpu.cli.settings import PROGRESS_INTERVAL as INTERVAL_ENV
from pympi_gpu.cli.settings import progress_interval as interval_from_env
from pympi_gpu.run.progress import LineProgress


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_lines_every_interval_with_rate_and_time_left():
    clock, out = FakeClock(), io.StringIO()
    p = LineProgress(out, "prog", interval=10.0, clock=clock)
    for step in range(1, 101):
        clock.now += 0.25  # 4 steps/s
        p(step, 100)
    lines = out.getvalue().splitlines()
    # 25 s of stepping, a line at each 10 s mark
    assert lines == ["prog: step 40/100 (40%), 4 steps/s, about 15 s left",
                     "prog: step 80/100 (80%), 4 steps/s, about 5 s left"]


def test_restarted_run_counts_from_its_first_step_and_long_times_read_well():
    clock, out = FakeClock(), io.StringIO()
    p = LineProgress(out, "prog", interval=60.0, clock=clock)
    for step in range(501, 600):
        clock.now += 1.0
        p(step, 10_000)
    assert out.getvalue().splitlines()[0] == "prog: step 560/10000 (6%), 1 steps/s, about 2 h 37 min left"


def test_interval_from_environment():
    assert interval_from_env({}) == 10.0
    assert interval_from_env({INTERVAL_ENV: "0.5"}) == 0.5
    assert interval_from_env({INTERVAL_ENV: "soon"}) == 10.0
    assert interval_from_env({INTERVAL_ENV: "-1"}) == 10.0
