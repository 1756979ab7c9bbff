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
A closed output is a stop request too: where ``pympi-launch``'s stdout or
stderr is a pipe, the launcher writes into a pipe of ``pympi-launch``'s, which
copies what comes to the real one (:class:`Forward`); when that one's reader
leaves (``pympi-launch ... | head``), the request is passed on as above and
the rest of the output is read and dropped, so the ranks write their
checkpoint and end.  A launcher given the user's pipe itself dies of SIGPIPE
at its next write and kills the ranks at once (MPICH's and Open MPI's do).
A repeated request passes nothing on, so a warning that reaches the job by
two ways (Slurm's ``scancel --batch`` signals the batch shell's children
too) is one request.  The exit status is the launcher's, or, where the ranks
stopped cleanly, that of the signal ``pympi-launch`` was sent (130 after
Ctrl-C, 129 after a hang-up, 141 after a closed output:
:func:`~pympi_gpu.cli.signals.exit_status`).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from pympi_gpu.cli.signals import CLOSED_OUTPUT, RELAY_VARIABLE, REPEAT_WINDOW, STOP_SIGNALS, exit_status

__all__ = ["Relay", "Forward", "run"]

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
        self.closed = False  # an output of pympi-launch's closed (the job stopped: :data:`CLOSED_OUTPUT`)
        self._lock = threading.Lock()  # requests come from the signal handler and the forwarding threads

    def arrived(self, signum: int, frame=None) -> None:
        """A stop request for the job: the first is passed on (SIGUSR1), then only a second Ctrl-C (SIGUSR2).

        Repeats of a request (a job script and Slurm both sending the warning)
        pass nothing on: the ranks stop once whatever they get.
        """
        with self._lock:
            self._arrived(signum)

    def output_closed(self) -> None:
        """A stream of ``pympi-launch`` can take no more: a stop request, and exit status 141."""
        self.closed = True
        self.arrived(CLOSED_OUTPUT)

    def _arrived(self, signum: int) -> None:
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
        if code == 0 and self.closed:
            return exit_status(CLOSED_OUTPUT)
        if code == 0 and self.first is not None:
            return exit_status(self.first)
        return code


class Forward(threading.Thread):
    """Copy what the launcher writes to pipe ``source`` on to file descriptor ``target``, as it comes.

    The first write that fails (the reader of ``target`` left) calls
    ``closed()``; what follows is read and dropped, so the launcher and the
    ranks never block on a full pipe while they stop.
    """

    def __init__(self, source, target: int, closed: Callable[[], None]):
        super().__init__(name=f"pympi-launch-forward-{target}", daemon=True)
        self.source, self.target, self.closed = source, target, closed
        self.lost = False

    def run(self) -> None:
        fd = self.source.fileno()
        try:
            while data := os.read(fd, 65536):
                if not self.lost:
                    self._write(memoryview(data))
        except OSError:
            pass
        finally:
            self.source.close()

    def _write(self, view: memoryview) -> None:
        try:
            while view:
                view = view[os.write(self.target, view):]
        except OSError:
            self.lost = True
            self.closed()



def run(argv: Sequence[str], label: str = "pympi-launch") -> int:
    """Run the launcher ``argv`` to its end, relaying stop requests; returns the exit status.

    Raises ``OSError`` where ``argv[0]`` cannot be started.
    """
    stdin = subprocess.DEVNULL if _terminal(sys.stdin) else None
    env = {**os.environ, RELAY_VARIABLE: label}
    sys.stdout.flush()
    sys.stderr.flush()
    piped = {name: _pipe(getattr(sys, name)) for name in ("stdout", "stderr")}
    proc = subprocess.Popen(list(argv), env=env, stdin=stdin,
                            **{name: subprocess.PIPE for name, fd in piped.items() if fd is not None},
                            **_own_group())
    relay = Relay(proc.pid)
    forwards = [Forward(getattr(proc, name), fd, relay.output_closed) for name, fd in piped.items() if fd is not None]
    for forward in forwards:
        forward.start()
    previous = {s: signal.signal(s, relay.arrived) for s in STOP_SIGNALS}
    try:
        returncode = proc.wait()  # a signal runs its handler and the wait goes on (PEP 475)
        for forward in forwards:  # the rest of the output (ranks that outlive their launcher write on)
            forward.join(timeout=5.0)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return relay.status(returncode)


def _pipe(stream) -> int | None:
    """The file descriptor of ``stream`` where it is a pipe or socket (whose reader may leave), else None."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        return None
    return fd if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None


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
