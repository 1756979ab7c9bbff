"""All-pairs gravitational n-body over MPI ranks (``pympi-nbody``).

One concern per module:

``initial``      initial conditions; body i depends only on (seed, i)
``precision``    fp32 / fp64 by name
``kernels_cpu``  numba and NumPy force kernels, the float64 reference
``kernels_cuda`` the GPU backend (numba.cuda, tiled like cuda-samples)
``backends``     the backend objects, chosen once at the command-line edge
``exchange``     ring and allgather exchange, device or host-staged transport
``driver``       leapfrog KDK, diagnostics, the run record
``checkpoint``   the model's checkpoint files and their validation
``memory``       the memory a run needs, checked before it allocates
``verify``       ``--verify``
``record``       result records

Importing this package imports neither mpi4py nor numba.
"""
