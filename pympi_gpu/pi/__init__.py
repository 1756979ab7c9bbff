"""Estimating pi over MPI ranks: Monte Carlo sampling and the trapezoid rule.

``driver`` holds the collective functions, ``kernels_numpy``, ``kernels_cpu``
(numba, with ``mc_simd``'s explicit vectors) and ``kernels_cuda`` the kernels,
``backends`` the choice among them, ``grid`` the trapezoid decomposition,
``record`` the result records.

May import: ``rng``, ``mpi``, ``device``, ``run`` and this package.
"""
