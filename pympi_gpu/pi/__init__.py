"""Estimating pi over MPI ranks: Monte Carlo sampling and the trapezoid rule.

``driver`` holds the collective functions, ``kernels_cpu`` and
``kernels_cuda`` the backends, ``grid`` the trapezoid decomposition.
"""
