"""``--backend auto``: one answer for the whole job, decided collectively.

Every rank probes its own GPU, and the job takes the GPU only if every rank
can: ranks that chose differently would part ways at the first collective
that only GPU ranks enter (the device binding's ``Split_type``), and the job
would hang.  Both command lines (``pympi-pi``, ``pympi-nbody``) use
:func:`gpu_everywhere`.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["gpu_everywhere"]


def gpu_everywhere(comm, probe: Callable[[], tuple[bool, str]] | None = None) -> tuple[bool, str]:
    """Whether every rank of comm can use a GPU, and why (not); collective over comm.

    ``probe()`` is this rank's own answer (default
    :func:`~pympi_gpu.device.gpu.gpu_usable`).  Every rank returns the same
    answer.  The reason names the first rank without a GPU, or says what rank 0 found.
    """
    if probe is None:
        from pympi_gpu.device.gpu import gpu_usable as probe
    answers = comm.allgather(probe())
    for rank, (ok, why) in enumerate(answers):
        if not ok:
            where = f"rank {rank} of {len(answers)}: " if len(answers) > 1 else ""
            return False, f"no GPU on {where}{why}" if where else f"no GPU: {why}"
    return True, f"GPU on every rank ({answers[0][1]})"
