"""Short-range Lennard-Jones molecular dynamics over a 3-D domain decomposition.

The LAMMPS ``bench/in.lj`` system: LJ 12-6 (epsilon = sigma = mass = 1) cut at
2.5 sigma, fcc lattice at reduced density 0.8442, T = 1.44, velocity Verlet
with dt = 0.005, Verlet lists with a 0.3 sigma skin.  Modules: ``lattice``
(initial state), ``kernels_cpu`` (cells, neighbour lists, forces; numba),
``kernels_cuda`` (lists and forces on a GPU), ``domain`` (Cartesian bricks),
``halo`` (ghost exchange and migration), ``gpu_system`` and ``halo_device``
(the step, migration and ghosts on a GPU, device-resident), ``thermo`` (LAMMPS-style thermo),
``driver`` (the step loop), ``checkpoint``, ``record``.  Importing this
package imports neither mpi4py nor numba.  May import the shared modules of
``pympi_gpu.nbody``, never the gravity model.
"""
