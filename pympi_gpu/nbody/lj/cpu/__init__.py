"""The LJ engine on the CPU (numba): a brick's atoms in host memory and what acts on them.

``atoms`` (:class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms`: the owned atoms,
their ghosts and lists, a step, the steps between two outputs), ``kernels``
(cells, neighbour lists, the force kernels compiled around a pair term, a
step's program, the thermostats' operations in it), ``lists`` (the one-thread build of the Verlet lists),
``rebuild`` (a rebuild in one compiled call, its MPI calls in it), ``steps``
(the quiet steps in one compiled call, their rebuilds in it), ``halo`` (the
ghost exchange and migration between bricks).  Never imports ``gpu``.
"""
