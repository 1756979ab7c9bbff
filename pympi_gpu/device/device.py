"""The device a run computes on: chosen once, at the command line's edge, and handed down.

A :class:`Device` says where the kernels run (``numba`` or ``numpy`` on the
CPU, ``gpu``), why, how messages travel (``host`` memory, or ``device``
buffers straight to a CUDA-aware MPI), whether the GPU is numba's CUDA
simulator (whose array namespace is NumPy), the GPU binding and the
CUDA-awareness verdict (HOOMD-blue's ``Simulation(device=...)``).  The
library reads these from the object it is given, never from the
environment; :meth:`Device.arrays` and :meth:`Device.buffers` make the
device memory the models use.  Nothing here imports numba.cuda or CuPy until
those are asked for.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Device", "CPU", "BACKENDS", "CHOICES", "AUTO"]

#: where kernels run: numba's on the CPU cores, NumPy's on one core, CUDA kernels on a GPU
BACKENDS = ("gpu", "numba", "numpy")
#: what ``--backend`` takes: a backend, or ``auto`` (chosen for the job by the command)
AUTO = "auto"
CHOICES = (AUTO, *BACKENDS)


@dataclasses.dataclass(frozen=True)
class Device:
    """Where a run computes and how its messages travel, with the reasons, the same on every rank.

    ``backend``: ``numba``, ``numpy`` or ``gpu``; ``transport``: ``host`` or
    ``device``; ``simulated``: the GPU is numba's CUDA simulator;
    ``binding``: the GPU binding (:func:`pympi_gpu.device.gpu.bind_device`),
    ``{}`` on CPUs; ``awareness``: the agreed
    :class:`~pympi_gpu.mpi.cuda_aware.CudaAwareness`, or None where it was not asked;
    ``compiled_mpi``: whether compiled kernels may call MPI themselves (``PYMPI_COMPILED_MPI``,
    read by the command line and agreed by the ranks).
    """

    backend: str = "numba"
    backend_reason: str = "requested"
    transport: str = "host"
    transport_reason: str = "CPU backend: the bodies are in host memory"
    simulated: bool = False
    binding: dict = dataclasses.field(default_factory=dict)
    awareness: object = None
    #: may compiled kernels make MPI calls themselves (the LJ engine on the CPU); the command's setting
    compiled_mpi: bool = True

    @property
    def gpu(self) -> bool:
        return self.backend == "gpu"

    def provenance(self) -> dict[str, str]:
        """The device's entries for a run's provenance."""
        from pympi_gpu.device.gpu import describe

        return {"backend_reason": self.backend_reason,
                **({"gpu": describe(self.binding)} if self.binding else {})}

    def arrays(self):
        """A :class:`~pympi_gpu.device.buffers.DeviceArrays` on this GPU: its array namespace and a stream."""
        from pympi_gpu.device.buffers import DeviceArrays

        return DeviceArrays(self.simulated)

    def buffers(self, dtype):
        """A :class:`~pympi_gpu.device.buffers.DeviceBuffers` of ``dtype`` on this GPU (its own stream)."""
        from pympi_gpu.device.buffers import DeviceBuffers

        return DeviceBuffers(dtype, self.simulated)


#: numba's kernels on this process's share of the node's cores
CPU = Device()
