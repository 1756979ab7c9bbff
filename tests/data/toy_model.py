"""A third model for tests/cli/test_models.py: a module and one registry line are all a model needs.

Gravity of a cold uniform ball whose softening is this model's own option
(``--toy-softening``), built from the gravity recipe's pieces.  Registered
by the test with ``models.MODULES["toy"] = "toy_model"`` before the command
is built: ``--model toy`` then runs it, its option is refused for the other
models and theirs for it.
"""

import click

from pympi_gpu.cli.nbody_gravity import Gravity
from pympi_gpu.nbody.gravity.config import NbodyConfig


class Toy(Gravity):
    name = "toy"
    summary = "a test's model: gravity of a cold uniform ball"
    defaults = {"dt": 2e-3, "seed": 7, "energy_tolerance": 1e-2}
    options = (click.Option(["--toy-softening"], type=float, default=0.05, show_default=True,
                            help="toy: the softening length."),)

    def config(self, args) -> NbodyConfig:
        return NbodyConfig(bodies=args.bodies, dt=args.dt or self.defaults["dt"],
                           softening=args.model_options["toy_softening"], init="uniform",
                           seed=self.defaults["seed"] if args.seed is None else args.seed)

    def system(self, comm, config, device, restart, args):
        from pympi_gpu.nbody.gravity.backends import make_backend
        from pympi_gpu.nbody.gravity.driver import GravitySystem, initial_state
        from pympi_gpu.nbody.gravity.exchange import make_exchange

        backend = make_backend(device, config.precision)
        exchange = make_exchange(comm, backend, config.bodies, "ring", device.transport)
        return GravitySystem(comm, config, backend, exchange, initial_state(comm, backend, config))

    def thermo_rows(self, args) -> bool:
        return True

    def stop_name(self, config) -> str:
        return f"pympi-nbody-toy-{config.bodies}"


MODEL = Toy()
