"""pympi_gpu: MPI + GPU Python applications.

The package in layers, each importing only those before it
(``docs/architecture.md``; ``tests/unit/test_architecture.py`` checks it):

``rng``              the counter-based random stream (numba, pure)
``launchers``        the launcher and MPI-library tables: variables, detection, flags (data)
``device``           GPUs and the CPU numba compiles for: finding, binding, device buffers
``mpi``              the MPI world: launchers, decomposition, which MPI library, CUDA-awareness
``run``              what a run reports and leaves: records, provenance, progress, atomic files
``pi``, ``nbody``,   the applications: pi estimates, the n-body models (gravity, lj),
``scale``            strong- and weak-scaling studies
``cli``              the command lines: parse, bind ``MPI.COMM_WORLD``, choose backends, print

Importing the package imports neither mpi4py nor any GPU library: those are
bound at the command-line edge (``pympi_gpu.cli``) or by the caller.
"""

__version__ = "0.1.0"
