"""Devices: GPUs found and bound one per rank, device buffers, the CPU numba compiles for.

``gpu``             finding a usable GPU, the node-local rank, binding before and after MPI_Init
``backend_choice``  ``--backend auto``: the GPU only if every rank has one (collective)
``buffers``         device arrays on one stream, pinned staging, what mpi4py takes (numba.cuda);
                    the array namespace (CuPy on a GPU, imported there only) and the copy counter
``jitcache``        numba's kernel cache and CPU tuning, set before numba is imported

May import: the standard library, NumPy, numba (``buffers`` at import, the
others inside functions), mpi4py inside functions that take a communicator;
of pympi_gpu, only this package and ``launchers`` (the launchers' local-rank
variables).  Never CuPy at import time.
"""
