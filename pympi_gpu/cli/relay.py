"""``pympi-launch`` between the signals and the launcher: every stop request reaches the ranks.

Launchers act on some stop requests themselves instead of passing them on
(measured, docs/faults.md): Open MPI's mpirun and srun kill the ranks on
SIGTERM, SIGINT and SIGHUP (mpirun: SIGCONT, 0.25 s, SIGTERM, 0.25 s,
SIGKILL, built into PRRTE with no setting to lengthen it); MPICH's Hydra
dies of SIGHUP and SIGUSR2 and takes the ranks with it, prints two lines on
stdout on a Ctrl-C and kills everything on a second one.  SIGUSR1 is the one
signal every launcher passes on to every rank untouched.

So ``pympi-launch`` runs the launcher as its child in a process group of its
own (a terminal's Ctrl-C and hang-up reach ``pympi-launch`` only; a
terminal's input is not passed on, since a process outside the foreground
group may not read it) and passes the first stop request on as SIGUSR1, a
second Ctrl-C as SIGUSR2, with ``PYMPI_STOP_RELAY`` set in the ranks'
environment: they name the relay in their line, and a relayed SIGUSR2 ends
them at once (Hydra dies of it, and its proxies kill the ranks: at once too).
A repeated request passes nothing on, so a warning that reaches the job by
two ways (Slurm's ``scancel --batch`` signals the batch shell's children
too) is one request.  The exit status is the launcher's, or, where the ranks
stopped cleanly, that of the signal ``pympi-launch`` was sent (130 after
Ctrl-C, 129 after a hang-up: :func:`~pympi_gpu.cli.signals.exit_status`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from pympi_gpu.cli.signals import RELAY_VARIABLE, REPEAT_WINDOW, STOP_SIGNALS, exit_status

__all__ = ["Relay", "run"]

#: the signal every launcher passes on to every rank untouched: a stop request
RELAYED_AS = signal.SIGUSR1
#: a second Ctrl-C: srun and mpirun pass it on (the ranks stop at once); Hydra dies of it, and its proxies
#: kill the ranks, silently: at once too
AT_ONCE = signal.SIGUSR2

#: the line where the launcher itself was ended at once (the ranks had no time to say it)
TWICE = ("pympi-launch: interrupted twice: the job ended at once, nothing more written "
         "(checkpoints on disk are as they were)")


class Relay:
    """What the launcher has been sent: the first stop request, and whether a second Ctrl-C followed."""

    def __init__(self, pid: int):
        self.pid = pid
        self.first: int | None = None
        self.when = 0.0
        self.again = False

    def arrived(self, signum: int, frame=None) -> None:
        """A stop request for the job: the first is passed on (SIGUSR1), then only a second Ctrl-C (SIGUSR2).

        Repeats of a request (a job script and Slurm both sending the warning)
        pass nothing on: the ranks stop once whatever they get.
        """
        now = time.monotonic()
        if self.first is None:
            self.first, self.when, sent = signum, now, RELAYED_AS
        elif signum == signal.SIGINT and not self.again and now - self.when > REPEAT_WINDOW:
            self.again, sent = True, AT_ONCE
        else:
            return
        try:
            os.kill(self.pid, sent)
        except ProcessLookupError:
            pass

    def status(self, returncode: int) -> int:
        """The exit status of ``pympi-launch``: the launcher's, or the stop request's where it ended well."""
        if self.again:
            if returncode == -AT_ONCE:  # Hydra: ended, and the ranks with it, before they could say so
                print(TWICE, file=sys.stderr, flush=True)
            return exit_status(signal.SIGINT)
        code = 128 - returncode if returncode < 0 else returncode
        if code == 0 and self.first is not None:
            return exit_status(self.first)
        return code


def run(argv: Sequence[str], label: str = "pympi-launch") -> int:
    """Run the launcher ``argv`` to its end, relaying stop requests; returns the exit status.

    Raises ``OSError`` where ``argv[0]`` cannot be started.
    """
    stdin = subprocess.DEVNULL if _terminal(sys.stdin) else None
    env = {**os.environ, RELAY_VARIABLE: label}
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(list(argv), env=env, stdin=stdin, **_own_group())
    relay = Relay(proc.pid)
    previous = {s: signal.signal(s, relay.arrived) for s in STOP_SIGNALS}
    try:
        returncode = proc.wait()  # a signal runs its handler and the wait goes on (PEP 475)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return relay.status(returncode)


def _terminal(stream) -> bool:
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (OSError, ValueError):
        return False


def _own_group() -> dict:
    """Popen's arguments for a child in a process group of its own (not a session: it keeps the terminal)."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}
