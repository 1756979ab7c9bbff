"""The LJ engine on a GPU (numba.cuda kernels, CuPy arrays; NumPy under the simulator).

``atoms`` (:class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms`: a brick's atoms,
ghosts and lists device-resident, a step, a rebuild), ``kernels`` (the CUDA
kernels: integration, lists, forces compiled around a pair term, row
gathers), ``bath`` (the thermostat's kernels and its state on the device),
``halo`` (the device halo: migration, ghosts, forward and reverse
messages, device buffers to a CUDA-aware MPI or staged through the host).
Importing it imports numba.cuda: only for ``--backend gpu``.  Never imports ``cpu``.
"""
