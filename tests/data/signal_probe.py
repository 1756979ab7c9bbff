"""A rank that notes every signal it gets (and when) in DIR/rank-N.log, then ends 0.2 s after a stop request.

For tests/cli/test_stop_launchers.py: what a launcher does with each signal it is
sent, measured on the ranks themselves.  DIR/rank-N.ready says the rank runs.
"""

import os
import signal
import sys
import time

from mpi4py import MPI

where = sys.argv[1]
rank = MPI.COMM_WORLD.Get_rank()
log = open(os.path.join(where, f"rank-{rank}.log"), "w", buffering=1)
stop_at = [None]


def note(signum, frame):
    log.write(f"{time.time():.4f} {signal.Signals(signum).name}\n")
    if signum != signal.SIGCONT and stop_at[0] is None:
        stop_at[0] = time.monotonic() + 0.2


for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
    signal.signal(s, note)
MPI.COMM_WORLD.Barrier()
open(os.path.join(where, f"rank-{rank}.ready"), "w").close()
deadline = time.monotonic() + 60
while time.monotonic() < deadline and (stop_at[0] is None or time.monotonic() < stop_at[0]):
    time.sleep(0.01)
log.write(f"{time.time():.4f} exit\n")
