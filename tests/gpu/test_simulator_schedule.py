"""The test run's schedule for numba's CUDA simulator (``tests/data/cudasim/sitecustomize.py``): the
same results as the simulator's own, threads one after the other where a kernel's threads do not
depend on one another, greenlets of the launching thread meeting at the block's barrier where they do,
and a thread's error raised with where it came from."""

from __future__ import annotations

import json
import os
import sys

import pytest

from helpers.commands import SIMULATOR_PATH, clean_env, run

KERNELS = r'''
import json, threading
import numpy as np
from numba import cuda

threads_seen = set()

@cuda.jit
def scale(a, out):  # no thread depends on another
    i = cuda.grid(1)
    threads_seen.add(threading.current_thread() is threading.main_thread())
    if i < a.size:
        out[i] = 2.0 * a[i] + a[(i + 1) % a.size]

@cuda.jit(device=True)
def block_sum(x, buf):  # a device function that synchronises
    t = cuda.threadIdx.x
    buf[t] = x
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step:
        if t < step:
            buf[t] += buf[t + step]
        cuda.syncthreads()
        step //= 2
    return buf[0]

@cuda.jit
def sums(a, out, counts):  # its threads meet at the device function's barriers
    buf = cuda.shared.array(32, np.float64)
    i = cuda.grid(1)
    threads_seen.add(threading.get_ident())
    s = block_sum(a[i] if i < a.size else 0.0, buf)
    c = cuda.syncthreads_count(i % 3 == 0)
    every = cuda.syncthreads_and(i < 70)
    some = cuda.syncthreads_or(i == 40)
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = s
        counts[cuda.blockIdx.x] = c
        counts[3 + cuda.blockIdx.x] = every
        counts[6 + cuda.blockIdx.x] = some

@cuda.jit
def early(out):  # threads that return before the barrier no longer count at it (the simulator's rule)
    buf = cuda.shared.array(32, np.float64)
    t = cuda.threadIdx.x
    if t >= 20:
        return
    buf[t] = t
    cuda.syncthreads()
    out[t] = buf[19 - t]

@cuda.jit
def fails(a):
    i = cuda.grid(1)
    a[i + 1000 * (i == 37)] = 1.0

@cuda.jit
def fails_before_the_barrier(a):  # the others must not wait for thread 3 for ever
    buf = cuda.shared.array(32, np.float64)
    t = cuda.threadIdx.x
    buf[t] = a[t + 1000 * (t == 3)]
    cuda.syncthreads()
    a[t] = buf[31 - t]

a = np.arange(80, dtype=np.float64) ** 1.5
out = np.zeros(80)
scale[3, 32](a, out)
plain = sorted(threads_seen)  # ran in the launching (main) thread?
threads_seen.clear()
got, counts = np.zeros(3), np.zeros(9, np.int64)
sums[3, 32](a, got, counts)
back = np.full(32, -1.0)
early[1, 32](back)
try:
    fails[3, 32](np.zeros(96))
    error = None
except IndexError as exc:
    error = str(exc)
try:
    fails_before_the_barrier[1, 32](np.zeros(32))
    barrier_error = None
except IndexError as exc:
    barrier_error = str(exc)
print(json.dumps({"barrier_error": barrier_error, "a": a.tolist(), "scale": out.tolist(), "sums": got.tolist(),
                  "counts": counts.tolist(), "early": back.tolist(),
                  "plain_threads": plain, "block_threads": len(threads_seen),
                  "main": threading.main_thread().ident in threads_seen, "error": error}))
'''


def _tree(xs: list[float]) -> float:
    """The block's sum in its kernel's order: halves added pairwise, 32 slots (zeros past the end)."""
    buf = xs + [0.0] * (32 - len(xs))
    step = 16
    while step:
        buf = [buf[t] + buf[t + step] for t in range(step)]
        step //= 2
    return buf[0]


def _run(tmp_path, source: str, schedule: str, ours: bool = True) -> dict:
    """``source`` run under the simulator with ``schedule``; the JSON its last line prints.
    ``ours=False``: without this folder's sitecustomize (the simulator as numba ships it)."""
    script = tmp_path / "script.py"
    script.write_text(source)
    env = clean_env(NUMBA_ENABLE_CUDASIM="1", PYMPI_TEST_SIMULATOR=schedule)
    if not ours:
        env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                            if p and p != SIMULATOR_PATH)
    done = run([sys.executable, str(script)], env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("schedule", ["tests", "threads"])
def test_both_schedules_give_the_kernels_results(tmp_path, schedule):
    got = _run(tmp_path, KERNELS, schedule)
    a = got["a"]  # (NumPy's power: on AVX-512 its vector code may differ from Python's in the last place)
    assert a == pytest.approx([i ** 1.5 for i in range(80)], rel=1e-15, abs=0)
    assert got["scale"] == [2.0 * a[i] + a[(i + 1) % 80] for i in range(80)]
    assert got["sums"] == [_tree(a[b:b + 32]) for b in (0, 32, 64)]
    assert got["counts"] == [sum(i % 3 == 0 for i in range(b, b + 32)) for b in (0, 32, 64)] + [1, 1, 0] + [0, 1, 0]
    assert got["early"] == [19.0 - t for t in range(20)] + [-1.0] * 12
    assert got["error"].startswith("tid=[5, 0, 0] ctaid=[1, 0, 0]"), got["error"]
    assert got["barrier_error"].startswith("tid=[3, 0, 0] ctaid=[0, 0, 0]"), got["barrier_error"]
    # a kernel that synchronises: under the test schedule its CUDA threads are greenlets of the launching
    # thread (no OS thread started), under numba's an OS thread each (32 a block, one block at a time)
    if schedule == "tests":
        assert got["block_threads"] == 1 and got["main"], got
    else:
        assert got["block_threads"] >= 32 and not got["main"], got
    # one that does not runs in the launching thread under the test schedule, in threads of its own under
    # numba's (thread idents are reused once a thread has ended: which thread, not how many)
    assert got["plain_threads"] == ([True] if schedule == "tests" else [False]), got


def test_every_child_of_the_test_run_gets_the_schedule():
    probe = "import sys, sitecustomize; print(sitecustomize.__file__)"
    done = run([sys.executable, "-c", probe], env=clean_env(NUMBA_ENABLE_CUDASIM="1"))
    assert done.stdout.strip().startswith(SIMULATOR_PATH), done.stdout + done.stderr


SHARED = r'''
import json, sys, time
import numpy as np
from numba import cuda

seen = set()

@cuda.jit
def share(out):
    buf = cuda.shared.array(32, np.float64)
    seen.add((cuda.blockIdx.x, id(buf)))
    t = cuda.threadIdx.x
    buf[t] = t
    cuda.syncthreads()
    out[cuda.blockIdx.x * 32 + t] = buf[31 - t]

empty = np.empty
def slow_empty(*args, **kw):  # a thread switch between a block's lookup of its array and the store
    time.sleep(0.005)
    return empty(*args, **kw)

out = np.zeros(64)
np.empty = slow_empty
share[2, 32](out)
np.empty = empty
arrays = {b: len({i for blk, i in seen if blk == b}) for b in (0, 1)}
print(json.dumps({"arrays_per_block": [arrays[0], arrays[1]], "right": out.tolist() == [31.0 - t for t in range(32)] * 2}))
'''


@pytest.mark.parametrize("schedule", ["tests", "threads", "numba as shipped"])
def test_the_threads_of_a_block_share_one_shared_array(tmp_path, schedule):
    """numba's simulator finds a block's ``cuda.shared.array`` by the caller's line, and makes it where
    missing, without a lock: with the making slowed, each thread of a block made its own (read as
    memory no thread wrote).  The test run's simulator, under either schedule, makes it under a lock."""
    got = _run(tmp_path, SHARED, schedule, ours=schedule != "numba as shipped")
    if schedule == "numba as shipped":  # the race this repairs (if numba mends it, the repair can go)
        assert got["arrays_per_block"] != [1, 1], got
    else:
        assert got == {"arrays_per_block": [1, 1], "right": True}, got
