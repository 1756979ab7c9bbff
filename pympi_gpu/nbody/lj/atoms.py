"""What a brick's atoms are to the system that drives them, on either engine: the :class:`Atoms` protocol.

:class:`~pympi_gpu.nbody.lj.system.LjSystem` holds one of two implementations,
:class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms` (host memory, numba) or
:class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms` (device-resident), and
reaches them only through these members: each engine defines every one (what
it does not measure it says with None), so the system never asks whether an
engine has something.  ``tests/unit/test_lj_model.py`` holds both to it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Atoms", "MEMBERS"]


@runtime_checkable
class Atoms(Protocol):
    """A brick's owned atoms, their ghosts and lists, and the steps that move them (collective methods
    are called on every rank)."""

    #: the halo: ghosts, migration, messages (``comm_time``, ``ghosts``, its clock)
    halo: Any
    #: owned atoms
    nlocal: int
    #: rebuilds so far
    rebuilds: int
    #: can :meth:`steps` take many steps in one call (else one)
    batched: bool
    #: seconds in rebuilds so far, or None where the engine does not time them (the device's are asynchronous)
    rebuild_seconds: float | None
    #: where the engine decides the rebuilds itself and the host does not wait between two outputs (a GPU's
    #: one brick): its books at its last wait, ``(step of the last build, dangerous builds)``; else None
    books: tuple[int, int] | None

    @property
    def pairs(self) -> float: ...                           # listed pairs (neighbours within cutoff + skin)
    @property
    def host_copies(self) -> int | None: ...                # atom arrays copied device-to-host (None: on the host)

    def start(self) -> None: ...                            # collective: lists and forces
    def step(self, force_rebuild: bool = False, eflag: bool = False) -> None: ...   # collective: one step
    def steps(self, most: int) -> list[float]: ...          # collective: up to ``most`` quiet steps, their seconds
    def wrap(self) -> None: ...                             # positions folded into the box
    def settle(self) -> None: ...                           # collective: wait for the steps queued, adopt them
    def finite(self) -> bool: ...                           # this brick's state finite?
    def local_sums(self) -> np.ndarray: ...                 # [sum v^2, px, py, pz, E_pair, virial]
    def owned(self) -> dict[str, np.ndarray]: ...           # host copies of x, v, f, id
    def bath_state(self) -> np.ndarray: ...                 # a host copy of the thermostat's state
    def reference(self) -> np.ndarray: ...                  # host copy of x at the last rebuild (the owned rows)
    def calls(self) -> dict[str, list[int]] | None: ...     # device launches and syncs so far (None on the CPU)
    def calls_per_step(self, comm, since, steps: int) -> dict | None: ...   # collective, where calls() is not None
    def close(self) -> None: ...                            # what it holds on the communicator, freed


#: the members every engine defines (the protocol's, as :func:`typing.get_protocol_members` would list them)
MEMBERS = ("halo", "nlocal", "rebuilds", "batched", "rebuild_seconds", "books", "pairs", "host_copies", "start",
           "step", "steps", "wrap", "settle", "finite", "local_sums", "owned", "bath_state", "reference", "calls",
           "calls_per_step", "close")
