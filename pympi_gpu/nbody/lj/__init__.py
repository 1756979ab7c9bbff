"""Short-range molecular dynamics (pair styles) over a 3-D domain decomposition.

The LAMMPS ``bench/in.lj`` system: LJ 12-6 (epsilon = sigma = mass = 1) cut at
2.5 sigma, fcc lattice at reduced density 0.8442, T = 1.44, velocity Verlet
with dt = 0.005, Verlet lists with a 0.3 sigma skin; other pair styles in
``pairs``.

What both engines share, here: ``config`` (the system), ``lattice`` (the
initial state), ``pairs`` (one file a pair style), ``thermostats`` (one file
a thermostat: nve, nvt, langevin), ``domain`` (Cartesian
bricks, the halo's message tags), ``atoms`` (the :class:`~pympi_gpu.nbody.lj.atoms.Atoms`
protocol a brick's atoms meet on either engine), ``system`` (what the run loop
drives, on either engine), ``thermo`` (LAMMPS-style thermo), ``checkpoint``,
``record``, ``verify``, ``memory`` and ``lammps`` (the same system for LAMMPS).
The engines beside them: ``cpu/`` (numba: the atoms in host memory, the
kernels, the lists, the rebuild, the steps between two outputs in one compiled
call, the halo) and ``gpu/`` (numba.cuda and CuPy: the atoms device-resident,
the kernels, the device halo); neither imports the other.  Importing this
package imports neither mpi4py nor numba.  May import the shared modules of
``pympi_gpu.nbody``, never the gravity model.
"""
