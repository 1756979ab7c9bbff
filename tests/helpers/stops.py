"""What a stop request must leave: the one line it prints, the exit status, and no noise."""

from __future__ import annotations

#: what a clean stop never prints
NOISE = ("Traceback", "pending", "BAD TERMINATION", "error on rank", "KeyboardInterrupt", "assert")

#: a gravity run with many short steps: started in a few seconds, stopped after its next step
SMALL = ["3000", "--steps", "1000000", "--threads", "1", "--backend", "numba"]


def quiet(text: str) -> None:
    assert not any(word in text for word in NOISE), text


def stopped_line(stderr: str, name: str, path) -> int:
    """The one line a stop prints; returns the step it names."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pympi-nbody: stopped by {name} after step "), stderr
    assert f"checkpoint {path} written (resume with --restart {path})" in lines[0], stderr
    return int(lines[0].split("after step ")[1].split(";")[0])
