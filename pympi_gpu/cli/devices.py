"""The device a run computes on: one choice for every command, made once, together, at the command line's edge.

:func:`choose_device` turns ``--backend`` and ``--transport`` into a
:class:`~pympi_gpu.device.device.Device` that every rank holds alike (HOOMD's
``Simulation(device=...)``), which the command hands down:

- ``auto``: NumPy where the command says the work is small (``small``:
  ``pympi-pi``'s, which NumPy finishes before numba has loaded), else the GPU
  where every rank has one (asked of every rank together), else numba;
- ``gpu`` on a job where some rank has no usable GPU is refused on every rank
  together, naming that rank;
- on the GPU the rank's device is bound (:func:`~pympi_gpu.device.gpu.bind_device`:
  one per local rank), and the transport of device buffers chosen from the
  MPI library's CUDA-awareness, which the ranks agree on and a round trip
  proves (``--transport``); a command that sends no device buffers passes ``host``.

Every refusal is one usage error on every rank.  The command's settings that
are no option (``PYMPI_CUDA_AWARE``, ``PYMPI_COMPILED_MPI``) are read here,
not below.
"""

from __future__ import annotations

import dataclasses

from pympi_gpu.cli import settings
from pympi_gpu.cli.common import fail, prove_device_transport, refuse_together
from pympi_gpu.device.device import AUTO, Device

__all__ = ["choose_device"]


def choose_device(comm, backend: str, early, *, transport: str = "host", dtype=None,
                  small: str | None = None) -> Device:
    """The job's :class:`~pympi_gpu.device.device.Device`; collective over comm (see the module docstring).

    ``backend`` and ``transport`` are the options; ``early`` the GPU binding
    made before ``MPI_Init`` (:func:`~pympi_gpu.cli.common.select_gpu_early`);
    ``dtype`` that of the device buffers whose round trip proves a CUDA-aware
    MPI (the run's own); ``small``: why ``auto`` takes NumPy for this work (the
    same on every rank), or None where it does not.
    """
    from pympi_gpu.device.gpu import simulator

    if backend == AUTO:
        if small:
            name, reason = "numpy", small
        else:
            from pympi_gpu.device.backend_choice import gpu_everywhere

            has_gpu, why = gpu_everywhere(comm)
            name, reason = ("gpu" if has_gpu else "numba"), f"auto: {why}"
    else:
        name, reason = backend, "requested"
    if backend == "gpu":
        from pympi_gpu.device.gpu import gpu_usable

        usable, why = gpu_usable()
        # decided together, so that a rank on a node without a GPU leaves none waiting in the binding
        refuse_together(comm, None if usable or simulator() else
                        f"--backend gpu: no usable GPU ({why}); use --backend numba or auto")
    binding, awareness = {}, None
    if name == "gpu":
        from pympi_gpu.device.gpu import bind_device

        binding = bind_device(comm, early)
        if transport in ("auto", "device"):
            from pympi_gpu.mpi.cuda_aware import agree, detect

            awareness = agree(comm, detect(forced=settings.cuda_aware()))  # one verdict: no rank refuses alone
    from pympi_gpu.mpi.cuda_aware import choose_transport

    try:
        transport_name, transport_why = choose_transport(transport, name == "gpu", awareness)
    except ValueError as exc:
        fail(str(exc))
    device = Device(name, reason, transport_name, transport_why, name == "gpu" and simulator(), binding, awareness,
                    compiled_mpi=settings.compiled_mpi())
    if transport_name == "device" and not awareness.forced:
        why = prove_device_transport(comm, device.buffers(dtype), transport, transport_why)
        device = dataclasses.replace(device, transport_reason=why)
    return device
