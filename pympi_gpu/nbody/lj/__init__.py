"""Short-range molecular dynamics (pair styles) over a 3-D domain decomposition.

The LAMMPS ``bench/in.lj`` system: LJ 12-6 (epsilon = sigma = mass = 1) cut at
2.5 sigma, fcc lattice at reduced density 0.8442, T = 1.44, velocity Verlet
with dt = 0.005, Verlet lists with a 0.3 sigma skin; other pair styles in
``pairs``.  Modules: ``config`` (the system), ``lattice`` (initial state),
``pairs`` (one file a pair style), ``kernels_cpu`` (cells, neighbour lists,
forces; numba), ``lists_cpu`` (the one-thread build of the same lists), ``kernels_cuda`` (lists and forces on a GPU), ``domain``
(Cartesian bricks), ``halo`` and ``halo_device`` (ghost exchange and
migration, on the host and on the device), ``system`` (what the run loop
drives, shared by both backends), ``host_atoms`` and ``device_atoms`` (a
brick's atoms, ghosts and lists in host memory with numba's kernels, or
device-resident on a GPU), ``thermo`` (LAMMPS-style thermo), ``memory``,
``lammps`` (the same system for LAMMPS), ``checkpoint``, ``record``.  Importing this
package imports neither mpi4py nor numba.  May import the shared modules of
``pympi_gpu.nbody``, never the gravity model.
"""
