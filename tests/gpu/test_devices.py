"""One test body on each device (the ``device`` fixture: numba on the CPU, the GPU under the simulator).

Each test builds its system from the :class:`~pympi_gpu.device.device.Device`
it is given, as the command line does, and checks it against a reference that
does not depend on the device: so a model or kernel added for one device is
held to the same numbers on the other.
"""

from __future__ import annotations

import numpy as np
import pytest

from pympi_gpu.nbody.lj import pairs
from pympi_gpu.nbody.lj.config import LjConfig


def _lj_run(device, config, steps):
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.system import LjSystem, initial_arrays
    from pympi_gpu.nbody.loop import Labels, RunOptions, simulate

    cart = make_cart(MPI.COMM_SELF)
    try:
        brick = brick_of(config.box, (1, 1, 1), (0, 0, 0))
        system = LjSystem(cart, config, *initial_arrays(config, brick), device=device)
        labels = Labels(backend=device.backend, transport=device.transport)
        run = simulate(cart, system, RunOptions(steps=steps, thermo_every=steps // 2), labels=labels)
        return run, system.atoms.owned()
    finally:
        cart.Free()


@pytest.mark.parametrize("pair", sorted(pairs.styles()))
def test_lj_system_on_each_device(device, pair):
    """A hot 256-atom system, 10 steps, a rebuild on the way: each device's thermo matches numba's full lists
    to round-off, and its forces at the end the direct sum of the style's term; on the GPU no atom array is
    copied to the host by a step (the one copy is the final ``owned()``)."""
    from pympi_gpu.device.device import Device
    from pympi_gpu.nbody.lj.verify import reference_forces

    config = LjConfig(cells=4, temperature=3.0, pair=pair, newton=False)
    run, owned = _lj_run(device, config, 10)
    ref, _ = _lj_run(Device(), config, 10)
    assert run.backend == device.backend and run.rebuilds >= 2
    for a, b in zip(run.thermo, ref.thermo, strict=True):
        for k in ("temp", "e_pair", "etotal", "press"):
            assert a.__dict__[k] == pytest.approx(b.__dict__[k], rel=1e-11, abs=1e-12), k
    order = np.argsort(owned["id"])
    f, mag = reference_forces(owned["x"][order], config.box, config.cutoff, np.arange(config.atoms),
                              config.pair_term)
    assert np.all(np.linalg.norm(owned["f"][order] - f, axis=1) <= 1e-12 * mag)
    if device.gpu:
        assert run.host_copies_per_step == 0.0


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_gravity_backend_on_each_device(device, precision):
    """The device's gravity backend: accelerations of 70 bodies (two tiles of 32 and a padded one on the
    GPU) against the float64 direct sum, within the bound --verify uses."""
    from pympi_gpu.nbody.gravity.backends import make_backend
    from pympi_gpu.nbody.gravity.verify import error_bound, reference

    rng = np.random.default_rng(4)
    n, eps = 70, 0.05
    pos, mass = rng.standard_normal((n, 3)), rng.uniform(0.1, 1.0, n)
    b = make_backend(device, precision)
    p = [b.from_host(pos[:, k]) for k in range(3)]
    acc = [b.zeros(n) for _ in range(3)]
    b.accel(*p, *p, b.from_host(mass), eps * eps, *acc)
    b.sync()
    got = np.column_stack([b.to_host(a) for a in acc]).astype(np.float64)
    want, scale = reference(pos, mass, eps, np.arange(n))
    err = np.linalg.norm(got - want, axis=1) / scale
    assert err.max() <= error_bound(precision, n), err.max()
