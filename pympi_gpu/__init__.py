"""pympi_gpu: MPI + GPU Python applications.

Importing the package imports neither mpi4py nor any GPU library: those are
bound at the command-line edge (``pympi_gpu.cli``) or by the caller.
"""

__version__ = "0.1.0"
