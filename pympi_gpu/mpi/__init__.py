"""The MPI world: what the launcher says, how work is split, which MPI library runs.

``environment``    launcher, scheduler and container variables (no MPI; the names are
                   the table of ``pympi_gpu.launchers``)
``decomposition``  block distributions of work over ranks (pure)
``blocks``         rows streamed to and from one rank in bounded blocks (checkpoints)
``worldcheck``     a world of 1 where the launcher said more: launcher and MPI mismatched
``library``        the MPI implementation a version text names (one parser)
``launch``         ibrun, srun or mpiexec: the argv to start a job (pure planning)
``cuda_aware``     whether the MPI takes device buffers, agreed by all ranks; the transport

May import: the standard library, NumPy, mpi4py (inside functions: importing
``mpi4py.MPI`` starts MPI); of pympi_gpu, only this package, ``launchers`` and
``device.jitcache`` (``numba_calls`` compiles cached kernels: their saves guarded).
"""
