"""Signals that ask a run to stop, and what happens when a stop cannot be honoured.

The stop requests (:data:`STOP_SIGNALS`) are what schedulers, launchers and
terminals send: SIGTERM (Slurm's time limit, ``timeout``, ``scancel``),
SIGUSR1 and SIGUSR2 (a job script's early warning, ``#SBATCH
--signal=B:USR1@120``), SIGINT (Ctrl-C) and SIGHUP (a closed terminal).  A
first one is a request: the run's loop sees :class:`Stop` turn true, every
rank stops after the current step (an agreement, so that none is left
waiting), writes its checkpoint and says where it stopped; the exit status is
:func:`exit_status`'s.  A second Ctrl-C ends the job at once with one line
(rank 0's) and status 130, rank 0 aborting it (:meth:`Stop.end_now`), without
unwinding through MPI: no traceback, no MPI library noise; a checkpoint being written at that moment stays as it was (files are
written beside and renamed).  The same keypress can reach a rank twice, from
the terminal and forwarded by the launcher: a repeat within
:data:`REPEAT_WINDOW` seconds counts once.

A request that is never honoured (a rank waits in a collective that another
rank never reaches) would otherwise leave the job running for good: a
watchdog started by the first signal ends the whole job through
``MPI_Abort`` with one line when the ranks have not agreed on the stop within
the grace period (:func:`grace_from_env`, plus twice the slowest step seen,
so that a slow step is not taken for a stuck one).  A command that polls once
a step (``steps``: pympi-nbody) counts the grace from its first poll at or
after the request: a request that comes while the run is still setting up
(making its atoms and lists, which takes minutes for a large run on a busy
machine) is acted on at the first step, and the set-up is not taken for a
stuck rank.  A run whose steps may take the request only at the end of a
batch of steps made in one compiled call is told at once, from the thread
the signal arrives on (:meth:`Stop.listen`), so that the batch carries it in
its next step's agreement.

A closed output is a stop request too: where this process's stdout or
stderr is a pipe whose reader left (``pympi-nbody ... | head``) or a file that
cannot take more, the write fails with EPIPE (Python ignores SIGPIPE) or
ENOSPC; :meth:`Stop.guard_streams` makes such a failure the request
:data:`CLOSED_OUTPUT` (SIGPIPE, exit status 141 as a shell reports it) and
sends what follows to ``/dev/null``, so that the run stops after its step,
writes its checkpoint and says so on the stream still open.  A terminal that
hung up (a dropped ssh session) fails every write with EIO, before or after
its SIGHUP arrives, or without one (a process the hang-up does not signal):
that failure is the request SIGHUP, so a closed terminal stops the run with
exit status 129 whichever comes first.  Every way to the stream is guarded,
its binary ``buffer`` included: rich's progress bar swaps ``sys.stdout`` for a
proxy while it shows, and click then writes a row through the proxy's
``buffer``.  Every command's streams are guarded from its start
(:func:`guard_outputs`, one closed when the command started, ``>&-``, among
them): where no run is left to stop (an estimate, a study's table, a record
printed at the end), the command says in one line which stream it could not
write, and exits 141 all the same.  Under a
launcher the launcher holds the user's pipe, and MPICH's mpiexec and Open
MPI's mpirun die of SIGPIPE and kill the ranks at once: ``pympi-launch``
reads their output through pipes of its own and relays a closed one as a
stop request (:mod:`pympi_gpu.cli.relay`).

Which signals reach the ranks depends on the launcher (measured in
docs/faults.md): MPICH's Hydra passes on SIGTERM, SIGINT and SIGUSR1 but
dies of SIGHUP and SIGUSR2; Open MPI's mpirun and srun pass on SIGUSR1 and
SIGUSR2 but kill the ranks on SIGTERM, SIGINT and SIGHUP.  SIGUSR1 is the
one every launcher passes on untouched, so job scripts send it, and
``pympi-launch`` relays every stop request to its launcher as SIGUSR1 (and
a second Ctrl-C as SIGUSR2; :data:`RELAY_VARIABLE` tells the ranks so).
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys
import threading
import time

from pympi_gpu.cli.common import abort_job, rank_now

__all__ = ["Stop", "STOP_SIGNALS", "REPEAT_WINDOW", "INTERRUPTED", "GRACE_VARIABLE", "DEFAULT_GRACE",
           "RELAY_VARIABLE", "CLOSED_OUTPUT", "CLOSED_STREAMS", "UNTOLD", "CLOSED_WHY", "exit_status", "closed_status",
           "grace_from_env", "signal_name", "GuardedStream", "guard_outputs", "after_an_interrupt"]

#: every signal that asks a run to stop
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

#: the stop request a closed stdout or stderr makes (no signal arrives: Python ignores SIGPIPE)
CLOSED_OUTPUT = signal.SIGPIPE

#: the streams of this process found closed (``stdout``, ``stderr``) and the stop request each made
#: (:data:`CLOSED_OUTPUT`, or SIGHUP for a terminal that hung up): its exit status is then
#: :func:`closed_status`, whenever it happened
CLOSED_STREAMS: list[tuple[str, int]] = []
#: of those, the ones no run's stop line tells of (a closed output when no run was left to stop: the
#: estimate of ``pympi-pi``, a study's table, a record): the command says so in one line of its own
UNTOLD: list[str] = []
#: why each stream closed, in a few words (``its reader left``, ``No space left on device``)
CLOSED_WHY: dict[str, str] = {}

#: seconds within which a second SIGINT is the same Ctrl-C delivered twice
REPEAT_WINDOW = 0.25

#: the exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED = 128 + signal.SIGINT
#: seconds the other ranks wait, at a second Ctrl-C, for rank 0 to end the job (:meth:`Stop.end_now`)
#: before each ends by itself (where rank 0 cannot: its signal thread held up)
OTHERS_WAIT = 3.0

#: seconds a stop request may wait for the ranks to agree before the job is ended (plus twice the slowest step)
GRACE_VARIABLE = "PYMPI_STOP_GRACE"
DEFAULT_GRACE = 60.0

#: set by ``pympi-launch`` in the ranks' environment: its relayed stop requests arrive as SIGUSR1
RELAY_VARIABLE = "PYMPI_STOP_RELAY"

#: the exit status after a stop request that was not honoured in time (MPI_Abort's error code)
OVERDUE = 1


def exit_status(signum: int) -> int:
    """The exit status of a run that a stop request ended (its checkpoint written).

    0 after a scheduler's or a job script's request (SIGTERM, SIGUSR1, SIGUSR2):
    the job did what it was asked.  128 + n after a person's (Ctrl-C 130, a
    closed terminal 129) and after a closed output (141, :data:`CLOSED_OUTPUT`:
    what was printed is not all there), as shells report an interrupted command.
    """
    return 128 + signum if signum in (signal.SIGINT, signal.SIGHUP, CLOSED_OUTPUT) else 0


def closed_status() -> int:
    """The exit status of a command whose output closed (:data:`CLOSED_STREAMS`): the first one's request's."""
    return exit_status(CLOSED_STREAMS[0][1]) if CLOSED_STREAMS else 0


def signal_name(signum: int) -> str:
    """``SIGTERM``; a relayed request says where it came from (``SIGUSR1 from pympi-launch``)."""
    name = signal.Signals(signum).name
    if signum == CLOSED_OUTPUT:
        return f"{name} (its output closed)"
    relayed = os.environ.get(RELAY_VARIABLE)
    return f"{name} from {relayed}" if relayed and signum == signal.SIGUSR1 else name


def grace_from_env(default: float = DEFAULT_GRACE) -> float:
    """The grace period in seconds, from ``PYMPI_STOP_GRACE`` (a bad value is the default)."""
    try:
        value = float(os.environ.get(GRACE_VARIABLE, default))
    except ValueError:
        return default
    return value if value > 0 else default


class Stop:
    """True once a stop request came; :attr:`signal` is its number.

    Installed by :meth:`install` (from the main thread); :meth:`finished` says
    the run is over.  ``prog`` names the command in its lines; ``twice`` says
    what a second Ctrl-C leaves.  The signals are read by a thread from
    Python's wakeup file descriptor, where the interpreter writes each one
    as it arrives: so a second Ctrl-C, and the watchdog, act while the main
    thread is inside a compiled kernel or an MPI call (both release the GIL).

    :meth:`requested` is polled by the run loop once a step (it notes the
    time, nothing more: the slowest step stretches the grace period);
    :meth:`honoured` is called once every rank has agreed on the stop.
    """

    SIGNALS = STOP_SIGNALS

    def __init__(self, prog: str = "pympi", twice: str = "nothing more written", grace: float | None = None,
                 steps: bool = False):
        self.prog, self.twice = prog, twice
        self.grace = grace_from_env() if grace is None else grace
        self.steps = steps          # polled once a step: the grace counts from the first poll (the docstring)
        self.signal = None
        self.when = 0.0
        self.slowest = 0.0          # the longest time between two polls: a step
        self.began: float | None = None  # the first poll: the steps began
        self._polled = None
        self._listeners: list = []
        self._timer = None
        self._done = False
        self._installed = False     # the watchdog ends the process: only for a Stop that took the signals

    def install(self) -> Stop:
        """Take the stop signals (and a closed output: :meth:`guard_streams`) for this run."""
        self.guard_streams()
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        # Python-level handlers must be set for the wakeup descriptor to be written; the thread acts.
        for s in self.SIGNALS:
            signal.signal(s, _note)
        threading.Thread(target=self._watch, args=(read,), name="pympi-signals", daemon=True).start()
        self._installed = True
        global _taken
        _taken = self
        return self

    def guard_streams(self) -> Stop:
        """Make a failed write to stdout or stderr a stop request (:class:`GuardedStream`); idempotent."""
        guard_outputs()
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, GuardedStream):
                stream.closed_by(self.output_closed)
        return self

    def output_closed(self, name: str, signum: int = CLOSED_OUTPUT) -> None:
        """A stream of this process can take no more: a stop request (:data:`CLOSED_OUTPUT`; SIGHUP where
        it is a terminal that hung up) of a run still going, which says so when it stops; after the run (or
        before it) one the command tells of itself."""
        CLOSED_STREAMS.append((name, signum))
        if not self._installed or self._done:
            UNTOLD.append(name)
        self.arrived(signum)

    def finished(self) -> None:
        """The run is over: a later request has nothing left to stop (a second Ctrl-C still ends at once).

        The handlers stay until the process ends: put back, a default handler
        would let a request that arrives while the summary is printed (a
        scheduler's, a launcher's repeat) kill the rank, and the launcher
        report a bad termination.
        """
        self.honoured()

    def _watch(self, fd: int) -> None:
        try:
            while data := os.read(fd, 64):
                for signum in data:
                    if signum in self.SIGNALS:
                        self.arrived(signum)
        finally:
            os.close(fd)

    def arrived(self, signum: int) -> None:
        """One signal: the first asks for a stop (and starts the watchdog); a second Ctrl-C ends at once.

        Under ``pympi-launch`` a stop request arrives as SIGUSR1 and a second
        Ctrl-C as SIGUSR2.
        """
        now = time.monotonic()
        if self.signal is None:
            if not self._done:  # after the run, a first request is moot
                self.signal, self.when = signum, now
                self._arm(self.grace)
                for heard in self._listeners:
                    heard(signum)
        elif now - self.when > REPEAT_WINDOW and self._twice(signum):
            self.end_now()

    def listen(self, heard) -> None:
        """Call ``heard(signum)`` at the first stop request, from the thread it arrives on (at once if it
        came already): for a run whose compiled batch of steps polls no Python, so that it carries the
        request in its next step's agreement instead of after the batch."""
        self._listeners.append(heard)
        if self.signal is not None and not self._done:
            heard(self.signal)

    def end_now(self) -> None:
        """A second Ctrl-C: rank 0 says so and ends the whole job with ``MPI_Abort`` (status 130).

        Every rank gets the signal at once, but one that ended by itself
        would have the launcher kill the others, and Hydra then reports the
        kill (exit 9, a "BAD TERMINATION" banner; seen 1 in 8 under load)
        or drops rank 0's line; an abort's status is the one asked for.  The
        library's own line about the abort would follow ours: rank 0's stderr
        goes to /dev/null first.  The other ranks wait for the abort, and end
        by themselves only if it does not come (:data:`OTHERS_WAIT`).
        """
        if rank_now() == 0:
            sys.stderr.write(f"{self.prog}: interrupted twice: stopped at once, {self.twice}\n")
            sys.stderr.flush()
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
            abort_job(INTERRUPTED)
        time.sleep(OTHERS_WAIT)
        os._exit(INTERRUPTED)

    @staticmethod
    def _twice(signum: int) -> bool:
        """A second Ctrl-C: SIGINT, or the SIGUSR2 ``pympi-launch`` sends for one (:mod:`pympi_gpu.cli.relay`)."""
        return signum == signal.SIGINT or (signum == signal.SIGUSR2 and bool(os.environ.get(RELAY_VARIABLE)))

    def requested(self) -> int:
        """The signal number that asked for the stop, or 0 (polled once a step)."""
        now = time.monotonic()
        if self._polled is not None:
            self.slowest = max(self.slowest, now - self._polled)
        else:
            self.began = now
        self._polled = now
        return int(self.signal or 0)

    def honoured(self) -> None:
        """Every rank agreed on the stop (or the run ended): the watchdog stands down."""
        self._done = True
        if self._timer is not None:
            self._timer.cancel()

    def __bool__(self):
        return self.signal is not None

    # -- the watchdog ------------------------------------------------------------------------------
    def _arm(self, seconds: float) -> None:
        if self._done or not self._installed:
            return
        self._timer = threading.Timer(max(seconds, 0.0), self._overdue)
        self._timer.daemon = True
        self._timer.name = "pympi-stop-watchdog"
        self._timer.start()

    def _overdue(self) -> None:
        """The grace period ran out: wait on for a slow step, else end the whole job."""
        if self._done:
            return
        if self.steps and self.began is None:  # still setting up: the request waits for the first step
            self._arm(self.grace)
            return
        since = max(self.when, self.began) if self.steps else self.when  # when the ranks could first act on it
        left = since + self.grace + 2 * self.slowest - time.monotonic()
        if left > 0.05:  # a step slower than the grace period: its end is still to come
            self._arm(left)
            return
        rank = rank_now()
        if rank != 0:  # rank 0 speaks for the job; another rank only where rank 0 could not
            time.sleep(5.0)
            if self._done:
                return
        waited = time.monotonic() - self.when
        where = "" if rank == 0 else f" (rank {rank})"
        sys.stderr.write(f"{self.prog}: stop requested by {signal_name(self.signal)} {waited:.0f} s ago, but the "
                         f"ranks never reached the end of a step together (a rank waits in MPI){where}: ending "
                         f"the job with MPI_Abort, nothing more written\n")
        sys.stderr.flush()
        abort_job(OVERDUE)


_taken: Stop | None = None  # the Stop that took this process's signals


def after_an_interrupt(seconds: float = OTHERS_WAIT) -> bool:
    """An error from MPI on a rank a Ctrl-C reached: most likely the other ranks ending at once on a second
    Ctrl-C (:meth:`Stop.end_now`: rank 0's ``MPI_Abort``) that has not reached this rank yet, or whose abort
    has not killed it yet (under load either comes late; the rank then printed "MPI error" beside rank 0's
    "interrupted twice").  Wait for them up to ``seconds``: the second Ctrl-C ends this process from the
    signals' thread, the launcher kills it on the abort.  Returns False at once where no Ctrl-C came (the
    error is told as any other), True if the wait ran out (told as any other too)."""
    stop = _taken
    if stop is None or stop.signal is None or not stop._twice(stop.signal):
        return False
    time.sleep(seconds)
    return True


def _note(signum, frame) -> None:
    """The Python-level handler: nothing to do (the watching thread acts), but no KeyboardInterrupt."""


def guard_outputs() -> None:
    """Every command's stdout and stderr, from its start: a write that fails is a closed output, noted
    (:data:`CLOSED_STREAMS`, :data:`UNTOLD`; a run's :class:`Stop` takes them as stop requests), never an
    exception; idempotent.

    A stream closed when the command started (``pympi-pi 1e4 >&-``: Python then has no ``sys.stdout``)
    is closed from its first write on, as one whose reader left, and its file descriptor is given
    ``/dev/null`` at once: a file the command opens later would otherwise take that number, and
    whatever a library writes to its stdout would go into the file.
    """
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if stream is None:
            stream = _closed_at_start(fd, name)
        if not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream, name, _untold))


def _untold(name: str, signum: int = CLOSED_OUTPUT) -> None:
    CLOSED_STREAMS.append((name, signum))
    UNTOLD.append(name)


def _closed_at_start(fd: int, name: str) -> io.TextIOBase:
    try:
        os.fstat(fd)
        taken = True  # (something opened it since: not ours to touch)
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        taken = False
    return _ClosedStream(name, None if taken else fd)


class _ClosedStream(io.TextIOBase):
    """The stream of a file descriptor closed when the command started: every write fails (EBADF)."""

    def __init__(self, name: str, fd: int | None):
        self.name, self._fd = name, fd

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it was closed when the command started")

    def fileno(self) -> int:
        if self._fd is None:
            raise io.UnsupportedOperation("fileno")
        return self._fd

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "strict"


class GuardedStream(io.TextIOBase):
    """A text stream (``sys.stdout``) whose failed write is a closed output, not an exception.

    The first write or flush that fails (EPIPE: the reader left; ENOSPC, EIO,
    EBADF) calls ``closed(name, signum)`` once, points the stream's file
    descriptor at ``/dev/null`` (so that later writes, Python's flush at exit
    and any C library's output go nowhere instead of failing again) and drops
    what follows.  ``signum`` is :data:`CLOSED_OUTPUT`, or SIGHUP where the
    stream was a terminal and the write failed with EIO (it hung up; after the
    hang-up it no longer answers as a terminal, so that is asked at the
    start).  Its :attr:`buffer` is guarded alike.  Everything else is the
    wrapped stream's.
    """

    def __init__(self, stream, name: str, closed):
        self._stream, self._name, self._closed = stream, name, closed
        self.lost = False
        try:
            self._terminal = stream.isatty()
        except (OSError, ValueError, AttributeError):
            self._terminal = False
        raw = getattr(stream, "buffer", None)
        self._buffer = _GuardedBuffer(raw, self) if raw is not None else None

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._stream.write(text)
            except (OSError, ValueError) as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except (OSError, ValueError) as exc:
                self._lose(exc)

    def closed_by(self, closed) -> None:
        """Call ``closed(name, signum)`` instead, from now on, at the first failed write (a run's stop request)."""
        self._closed = closed

    def _lose(self, exc: Exception) -> None:
        if isinstance(exc, OSError) and exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EBADF,
                                                           errno.ECONNRESET, errno.EDQUOT):
            raise exc
        if self.lost:
            return
        self.lost = True
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        CLOSED_WHY.setdefault(self._name, "its reader left" if getattr(exc, "errno", None) in (
            errno.EPIPE, errno.ECONNRESET) else getattr(exc, "strerror", None) or str(exc))
        hung_up = self._terminal and isinstance(exc, OSError) and exc.errno == errno.EIO
        self._closed(self._name, signal.SIGHUP if hung_up else CLOSED_OUTPUT)

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return not self.lost and self._stream.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return self._stream.encoding

    @property
    def errors(self):
        return self._stream.errors

    @property
    def buffer(self):
        return self._buffer

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _GuardedBuffer(io.BufferedIOBase):
    """The binary ``buffer`` of a :class:`GuardedStream`: its failed write closes the stream as a text one does.

    A writer that wraps ``sys.stdout.buffer`` in a text stream of its own
    (click's ``echo`` does, where ``sys.stdout`` is rich's proxy) still meets
    the guard.  The text stream's pending text is flushed first, so the order
    of what is written is kept.
    """

    def __init__(self, raw, owner: GuardedStream):
        self._raw, self._owner = raw, owner

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        if not self._owner.lost:
            try:
                self._owner._stream.flush()
                self._raw.write(data)
                return size
            except (OSError, ValueError) as exc:
                self._owner._lose(exc)
        return size

    def flush(self) -> None:
        if not self._owner.lost:
            try:
                self._raw.flush()
            except (OSError, ValueError) as exc:
                self._owner._lose(exc)

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._raw.fileno()

    def isatty(self) -> bool:
        return self._owner.isatty()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def close(self) -> None:  # the process's stream: closed by the interpreter, not by a wrapper
        self.flush()

    @property
    def raw(self):
        return self._raw.raw
