"""The n-body models over MPI ranks (``pympi-nbody``), side by side.

``gravity/``     all-pairs softened gravity: a ring or allgather of blocks, leapfrog KDK
``lj/``          Lennard-Jones 12-6 over a 3-D domain decomposition with ghost halos
``checkpoint``   what both models' checkpoint files share: atomic ``.npz`` writing, the error
``record``       what both models' records share: the ``--verify`` verdict

May import: ``rng``, ``mpi``, ``device``, ``run`` and this package; a model
imports the shared modules here, never the other model.  Importing this
package imports neither mpi4py nor numba.
"""
