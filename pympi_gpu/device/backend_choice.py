"""``--backend auto``: one answer for the whole job, decided collectively.

Every rank probes its own GPU, and the job takes the GPU only if every rank
can: ranks that chose differently would part ways at the first collective
that only GPU ranks enter (the device binding's ``Split_type``), and the job
would hang.  Both command lines (``pympi-pi``, ``pympi-nbody``) use
:func:`gpu_everywhere`.

Testing switch
--------------
``PYMPI_TESTING_GPU_PROBE`` replaces the probe's answer, by rank: a comma list
of ``yes``/``no`` indexed by the rank in ``comm`` (the last entry repeats).
``yes,no`` makes rank 0 claim a GPU and rank 1 deny one, which is how the
tests check the agreement on machines without GPUs.  It is for tests only:
with ``yes`` and no GPU (or ``NUMBA_ENABLE_CUDASIM=1``) the run fails later.
"""

from __future__ import annotations

import os

__all__ = ["PROBE_ENV", "gpu_probe", "gpu_everywhere"]

PROBE_ENV = "PYMPI_TESTING_GPU_PROBE"


def gpu_probe(rank: int = 0, environ=None) -> tuple[bool, str]:
    """This rank's own answer: can it run GPU kernels, and why (not)."""
    env = os.environ if environ is None else environ
    fake = env.get(PROBE_ENV)
    if fake:
        answers = [a.strip().lower() for a in fake.split(",")]
        answer = answers[min(rank, len(answers) - 1)]
        return answer in ("1", "yes", "true", "on"), f"{PROBE_ENV}={fake} says {answer!r}"
    from pympi_gpu.device.gpu import gpu_usable

    return gpu_usable()


def gpu_everywhere(comm) -> tuple[bool, str]:
    """Whether every rank of comm can use a GPU, and why (not); collective over comm.

    Every rank returns the same answer.  The reason names the first rank
    without a GPU, or says what rank 0 found.
    """
    answers = comm.allgather(gpu_probe(comm.Get_rank()))
    for rank, (ok, why) in enumerate(answers):
        if not ok:
            where = f"rank {rank} of {len(answers)}: " if len(answers) > 1 else ""
            return False, f"no GPU on {where}{why}" if where else f"no GPU: {why}"
    return True, f"GPU on every rank ({answers[0][1]})"
