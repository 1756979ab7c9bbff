"""A real Slurm on localhost for the system tests: one slurmctld, two slurmd faking two nodes.

Nothing is installed here (``.ci/setup.d/10-slurm.sh`` does that); this module
writes a private ``slurm.conf`` into a temporary directory, starts its own
``munged`` (as the munge user when run as root), ``slurmctld`` and one
``slurmd -N nodeN`` per fake node, each on a free port, and stops them again.
Every wait is bounded: a job that asks for more CPUs than the fake nodes have
pends forever, so :meth:`SlurmCluster.sbatch` cancels it after ``timeout``.

Used by ``tests/system/conftest.py`` (the session fixture ``slurm``) and usable
by any tier that needs a scheduler::

    with SlurmCluster(path) as slurm:
        job_id, output = slurm.sbatch("jobs/generic-srun.sbatch", env={"SAMPLES": "1e6"})
        proc = slurm.srun(["hostname"], ntasks=2)
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["SlurmCluster", "SlurmError", "TOOLS"]

#: what must be on PATH to start the cluster
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "salloc", "squeue", "scontrol", "sinfo",
         "scancel", "setpriv")

NODES = ("n1", "n2")
#: CPUs declared per fake node; more than the machine has (SlurmdParameters=config_overrides)
#: so that 2 or 3 tasks fit on one node of a 2-core machine.
CPUS_PER_NODE = 4
PARTITION = "debug"


class SlurmError(RuntimeError):
    """The cluster did not start, or a job did not finish in time; carries the logs' tails."""


def first_job_id() -> int:
    """A first job id unlike any earlier cluster's on this machine (tenths of a second, modulo
    Slurm's largest: a range of 10**6 ids that comes round after 67 days)."""
    return 1 + int(time.time() * 10) % (67_000_000 - 10**6)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SlurmCluster:
    """A private Slurm cluster living in ``root`` (a fresh directory).

    Parameters
    ----------
    root : Path
        Directory for the configuration, state, spool, logs and munge socket.
        Kept short: a unix socket path must stay under 108 bytes.
    start_timeout : float
        Seconds to wait for the controller and both nodes to come up.
    """

    def __init__(self, root: Path | str, start_timeout: float = 60.0):
        self.root = Path(root).resolve()
        self.start_timeout = start_timeout
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.sock"
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self.is_root = os.geteuid() == 0
        self.user = pwd.getpwuid(os.geteuid()).pw_name

    # -- environment --------------------------------------------------------------------------
    def env(self, extra: Mapping[str, str] | None = None, path_prepend: Sequence[str] = ()) -> dict[str, str]:
        """An environment for Slurm clients: this cluster's conf, no outer job's variables.

        The Python running the tests has its ``bin`` first on PATH, so jobs run the
        venv's ``pympi-*`` and its MPI (``--export=ALL`` is Slurm's default).
        """
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HYDRA_", "MV2_"))}
        path = [*path_prepend, str(Path(sys.executable).parent), env.get("PATH", os.defpath)]
        env["PATH"] = os.pathsep.join(path)
        env["SLURM_CONF"] = str(self.conf)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # MPICH from PyPI between the fake nodes: its OFI netmod (libfabric's tcp provider, as two
        # nodes on Ethernet), not UCX. Under srun's PMI-2, UCX's business-card exchange failed
        # MPI_Init in about 1 launch in 5 of 2 ranks on 2 nodes with UCX_TLS=self,tcp ("mpi/pmi2:
        # invalid client request" in slurmstepd, the ranks then hung), and now and then with UCX's
        # defaults ("Shared memory error": the fake nodes share a host, so UCX joins them through
        # shared memory); OFI: 0 failures in 60 launches (docs/launching.md, "MPICH from PyPI under srun").
        env.setdefault("MPIR_CVAR_CH4_NETMOD", "ofi")
        if extra:
            env.update(extra)
        return env

    # -- start / stop -------------------------------------------------------------------------
    def _write_conf(self) -> None:
        for sub in ("etc", "state", "log", "run", "spool", "tmp", *(f"spool/{n}" for n in NODES)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.ctld_port = _free_port()
        ports = [_free_port() for _ in NODES]
        host = socket.gethostname()
        r = self.root
        lines = [
            "ClusterName=pympi",
            # slurmctld insists on running on the host it is configured for: its own name,
            # reached through localhost.
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            # Job ids of this cluster's own, not 1, 2, ... again: MPICH under srun's PMI-2 names its
            # shared-memory segment (/dev/shm/mpich_shm_*) after the job and step, and a job killed
            # before it could remove it (the signal tests kill some) left it for the next cluster's job
            # of the same id to open, which then fails in MPI_Init ("Message truncated", UCX's
            # "failed to unpack address").
            f"FirstJobId={first_job_id()}",
            f"SlurmUser={self.user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"TmpFS={r}/tmp",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "MpiDefault=pmi2",
            "SlurmdParameters=config_overrides",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=300",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for node, port in zip(NODES, ports):
            lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={CPUS_PER_NODE} RealMemory=1000 TmpDisk=100 State=UNKNOWN")
        lines.append(f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _start_munge(self) -> None:
        # munged wants every directory above its socket searchable by all, and its key
        # readable by itself only: the socket and the key live in separate directories.
        sdir, kdir = self.munge_socket.parent, self.root / "munge-key"
        sdir.mkdir(mode=0o755, exist_ok=True)
        kdir.mkdir(mode=0o700, exist_ok=True)
        key = kdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        argv = ["munged", f"--socket={self.munge_socket}", f"--key-file={key}",
                f"--pid-file={kdir}/munged.pid", f"--log-file={kdir}/munged.log",
                f"--seed-file={kdir}/munged.seed", "--foreground", "--num-threads=2"]
        if self.is_root:
            # munged refuses to run as root: the munge user owns its key and directories.
            pw = pwd.getpwnam("munge")
            for p in (sdir, kdir, key):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            argv = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *argv]
        self._spawn("munged", argv)
        self._wait(lambda: self.munge_socket.exists(), "munged socket", self.root / "log" / "munged.stdout")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=self.env(), start_new_session=True)
        log.close()
        self._procs.append((name, proc))

    def _wait(self, ready, what: str, log: Path, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            if ready():
                return
            for name, proc in self._procs:
                if proc.poll() is not None:
                    raise SlurmError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                     f"{_tail(log)}\n{_tail(self.root / 'log' / f'{name}.stdout')}")
            time.sleep(0.2)
        raise SlurmError(f"timed out waiting for {what}:\n{_tail(log)}")

    def _nodes_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10, check=False).stdout
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        return all(states.get(n, "").rstrip("*") in ("idle", "mix", "alloc") for n in NODES)

    def start(self) -> SlurmCluster:
        """Start munged, slurmctld and the slurmd of every fake node; wait until all are idle."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self._write_conf()
        try:
            self._start_munge()
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
            self._wait(lambda: self.run(["scontrol", "ping"], timeout=10, check=False).stdout.count("UP") >= 1,
                       "slurmctld", self.root / "log" / "slurmctld.log")
            for node in NODES:
                self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
            self._wait(self._nodes_idle, "the nodes to be idle", self.root / "log" / "slurmctld.log")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Cancel what still runs, stop every daemon (TERM, then KILL) in reverse order."""
        if any(n == "slurmctld" and p.poll() is None for n, p in self._procs):
            self.run(["scancel", "--user", self.user], timeout=10, check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.run(
                    ["squeue", "-h", "-o", "%i"], timeout=10, check=False).stdout.strip():
                time.sleep(0.3)
        for name, proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name, proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._procs.clear()
        self._kill_stepds()

    def _kill_stepds(self) -> None:
        # slurmstepd runs in a session of its own, so it outlives its slurmd when a step is
        # still ending as the cluster stops: end those of this cluster (found by SLURM_CONF).
        mine = f"SLURM_CONF={self.conf}".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if not (proc / "cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                if mine not in (proc / "environ").read_bytes().split(b"\0"):
                    continue
                os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients ------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], timeout: float = 60, check: bool = False,
            env: Mapping[str, str] | None = None, path_prepend: Sequence[str] = (),
            **kw) -> subprocess.CompletedProcess:
        """Run a Slurm client (or anything) with this cluster's environment and a timeout."""
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=self.env(env, path_prepend), **kw)
        if check and proc.returncode != 0:
            raise SlurmError(f"{shlex_join(argv)} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def srun(self, argv: Sequence[str], ntasks: int = 1, nodes: int | None = None,
             timeout: float = 120, mpi: str | None = "pmi2", extra: Sequence[str] = (),
             env: Mapping[str, str] | None = None, path_prepend: Sequence[str] = ()
             ) -> subprocess.CompletedProcess:
        """``srun -n ntasks [-N nodes] [--mpi=mpi] argv`` as a job of its own.

        ``--immediate`` (half the timeout) makes a request the cluster cannot satisfy
        give up with a message of srun's own before the timeout kills it.
        """
        cmd = ["srun", f"--ntasks={ntasks}", f"--immediate={max(1, int(timeout // 2))}"]
        if nodes is not None:
            cmd.append(f"--nodes={nodes}")
        if mpi:
            cmd.append(f"--mpi={mpi}")
        cmd += [*extra, *argv]
        return self.run(cmd, timeout=timeout, env=env, path_prepend=path_prepend)

    def salloc(self, argv: Sequence[str], ntasks: int = 1, nodes: int | None = None,
               timeout: float = 120, env: Mapping[str, str] | None = None,
               path_prepend: Sequence[str] = ()) -> subprocess.CompletedProcess:
        """``salloc -n ntasks argv``: argv runs here, inside a fresh allocation (SLURM_JOB_ID set)."""
        cmd = ["salloc", f"--ntasks={ntasks}", f"--immediate={max(1, int(timeout // 2))}"]
        if nodes is not None:
            cmd.append(f"--nodes={nodes}")
        return self.run([*cmd, *argv], timeout=timeout, env=env, path_prepend=path_prepend)

    def sbatch(self, script: str | os.PathLike, *args: str, env: Mapping[str, str] | None = None,
               timeout: float = 180, options: Sequence[str] = (), path_prepend: Sequence[str] = (),
               cwd: str | os.PathLike | None = None) -> tuple[int, str]:
        """Submit a batch script, wait for it to end, return ``(job_id, output_text)``.

        Raises :class:`SlurmError` (with the output so far) if the job is not done within
        ``timeout`` seconds (it is cancelled) or ends in any state but COMPLETED.
        """
        out = self.root / "jobs"
        out.mkdir(exist_ok=True)
        cmd = ["sbatch", "--parsable", f"--output={out}/%j.out", *options, str(script), *args]
        proc = self.run(cmd, timeout=30, check=True, env=env, path_prepend=path_prepend,
                        cwd=cwd)
        job_id = int(proc.stdout.strip().split(";")[0])
        output = out / f"{job_id}.out"
        state = self.wait(job_id, timeout)
        text = output.read_text(errors="replace") if output.exists() else ""
        if state != "COMPLETED":
            raise SlurmError(f"job {job_id} ended {state}; its output:\n{text}\n"
                             f"slurmctld.log:\n{_tail(self.root / 'log' / 'slurmctld.log', 10)}")
        return job_id, text

    def job_state(self, job_id: int) -> str:
        """The state of a job as scontrol reports it (e.g. PENDING, RUNNING, COMPLETED)."""
        out = self.run(["scontrol", "show", "job", str(job_id)], timeout=10).stdout
        m = re.search(r"JobState=(\S+)", out)
        return m.group(1) if m else "UNKNOWN"

    def wait(self, job_id: int, timeout: float) -> str:
        """Wait for a job to end (its state none of :data:`NOT_ENDED`); cancel it past ``timeout``
        (returns TIMEOUT)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state not in NOT_ENDED:
                return state
            time.sleep(0.3)
        self.run(["scancel", str(job_id)], timeout=10)
        return "TIMEOUT"


#: The states scontrol shows for a job that has not ended.  SIGNALING is shown while slurmctld
#: delivers a signal (the --signal warning of a time limit): a cold CI run saw it there, once.
NOT_ENDED = ("PENDING", "CONFIGURING", "RUNNING", "SIGNALING", "RESIZING", "SUSPENDED", "COMPLETING", "STAGE_OUT")


def shlex_join(argv: Sequence[str]) -> str:
    import shlex

    return shlex.join([str(a) for a in argv])


def tools_missing() -> list[str]:
    """The tools of :data:`TOOLS` not on PATH."""
    return [t for t in TOOLS if shutil.which(t) is None]
