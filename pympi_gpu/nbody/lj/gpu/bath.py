"""The thermostat on the device: its kernels (numba.cuda) around the run's style's hooks, and its state.

The integrator calls a thermostat (:mod:`~pympi_gpu.nbody.lj.thermostats`) at three points of a
step, and on the device each is a launch or a few, queued like the step's others (no wait on one
rank: the state stays in device memory, the host never reads it between two outputs):

* the step's start (``scales``: Nose-Hoover): :func:`make_kernels`' ``begin``, one thread per atom,
  each making the chain's half-step itself from the state (the same operations, the same numbers in
  every thread), scaling its atom's velocity, thread 0 writing the new state to the other of two
  slots (no thread reads the slot written: the host keeps which is current);
* after the forces (``forces``: Langevin): ``force_kick``, each atom's force from the run's counter
  stream at the step's number, added, then the closing kick (in place of ``forces_kick``'s, which the
  step's ghost-list launch then leaves out: ``forces`` with ``add``);
* the step's end (``scales``): ``partials`` (each block's sum of m v^2, a fixed tree), ``end`` (one
  block: the blocks' sums in a fixed order, the chain's half-step, its factor) and ``scale`` (the
  velocities).  Over several ranks ``end`` runs twice, the host reading this rank's sum, reducing it
  over the ranks and writing the total back between them (one wait, one upload).

So the sums are the same at every run of the same state (restarts continue bit for bit on the
device too), and a step queued again after a wait (:meth:`DeviceAtoms.settle`) makes the same
numbers.  The multiplications and additions of the kick and the scaling are rounded each (never an
FMA), as the step's other kernels do them.  Importing this module imports numba.cuda: do it only for
``--backend gpu``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numba
import numpy as np
from numba import cuda, float64

from pympi_gpu.nbody.lj import thermostats

__all__ = ["BLOCK", "BathKernels", "make_kernels", "DeviceBath", "LOCAL", "GLOBAL", "ALONE"]

BLOCK = 128
#: ``end``'s modes: this rank's sum into ``mv2[0]`` only; the half-step from the total the host wrote into
#: ``mv2[1]``; both, one rank (its sum is the total)
LOCAL, GLOBAL, ALONE = range(3)

if numba.config.ENABLE_CUDASIM:  # kernels run as Python: NumPy rounds each operation, and uint64 wraps
    def _mul(a, b):
        return a * b

    def _add(a, b):
        return a + b

    def _wrapping(fn):
        def call(*args):
            with np.errstate(over="ignore"):  # the counter-based stream's uint64 arithmetic wraps by design
                return fn(*args)

        return call
else:  # rounded each, never contracted into an FMA (PTX mul.rn/add.rn)
    from numba.cuda import libdevice

    _mul, _add = libdevice.dmul_rn, libdevice.dadd_rn

    def _wrapping(fn):
        return fn


class BathKernels(NamedTuple):
    """The device kernels of one thermostat (:func:`make_kernels`)."""

    begin: object
    force_kick: object
    partials: object
    end: object
    scale: object


@functools.cache
def make_kernels(name: str) -> BathKernels:
    """The kernels of thermostat ``name`` (its hooks compiled in; a style without one gets kernels it never
    launches)."""
    from pympi_gpu import rng

    rng.register_numba()
    style = thermostats.style(name)
    thermostats.hooks()  # (every style's hooks registered with numba)
    return BathKernels(_make_begin(style.begin, max(style.state_size, 1)), _make_force_kick(_wrapping(style.force)),
                       partials, _make_end(style.end), scale)


def _make_begin(hook, size: int):
    """The step's start around a style's ``begin`` hook (its state of ``size`` numbers)."""

    @cuda.jit
    def begin(v, n, p, state, src, dst):
        """The step's start: every thread makes the half-step from ``state[src]``, scales its atom's velocity
        (``v`` flat, ``(3 n,)``); thread 0 writes the state to ``state[dst]``.  Launch at least one block."""
        s = cuda.local.array(size, float64)
        for k in range(size):
            s[k] = state[src, k]
        factor = hook(p, s)
        i = cuda.grid(1)
        if i == 0:
            for k in range(size):
                state[dst, k] = s[k]
        if i < n:
            b = 3 * i
            v[b] = _mul(v[b], factor)
            v[b + 1] = _mul(v[b + 1], factor)
            v[b + 2] = _mul(v[b + 2], factor)

    return begin


def _make_force_kick(hook):
    """The forces and the closing kick around a style's ``force`` hook."""

    @cuda.jit
    def force_kick(v, f, gid, n, p, key, step, h, kick):
        """After the forces: atom i's thermostat force at ``step`` added to ``f[i]``, then (``kick``) ``v += h
        f``, each operation rounded.  ``v``, ``f`` flat (the owned rows of ``f``)."""
        i = cuda.grid(1)
        if i >= n:
            return
        b = 3 * i
        fx, fy, fz = hook(p, key, step, gid[i], v[b], v[b + 1], v[b + 2])
        gx = f[b] + fx
        gy = f[b + 1] + fy
        gz = f[b + 2] + fz
        f[b] = gx
        f[b + 1] = gy
        f[b + 2] = gz
        if kick:
            v[b] = _add(v[b], _mul(h, gx))
            v[b + 1] = _add(v[b + 1], _mul(h, gy))
            v[b + 2] = _add(v[b + 2], _mul(h, gz))

    return force_kick


@cuda.jit(device=True)
def _block_sum(buf, x):
    """``x`` summed over the block through shared ``buf`` (:data:`BLOCK`), by a tree in a fixed order; in
    ``buf[0]``."""
    t = cuda.threadIdx.x
    buf[t] = x
    cuda.syncthreads()
    half = BLOCK // 2
    while half > 0:
        if t < half:
            buf[t] = buf[t] + buf[t + half]
        cuda.syncthreads()
        half //= 2


@cuda.jit
def partials(v, n, out):
    """Each block's sum of ``vx^2 + vy^2 + vz^2`` over its atoms into ``out[block]`` (a tree in shared memory: a
    fixed order).  Launch with :data:`BLOCK` threads a block."""
    buf = cuda.shared.array(BLOCK, float64)
    i = cuda.grid(1)
    x = 0.0
    if i < n:
        b = 3 * i
        x = v[b] * v[b] + v[b + 1] * v[b + 1] + v[b + 2] * v[b + 2]
    _block_sum(buf, x)
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = buf[0]


def _make_end(hook):
    """The step's end around a style's ``end`` hook."""

    @cuda.jit
    def end(parts, m, mv2, p, state, slot, factor, mode):
        """One block of :data:`BLOCK` threads: the ``m`` blocks' sums (each thread its stride in order, then a
        tree), and by ``mode``: ``LOCAL`` into ``mv2[0]``; ``GLOBAL`` the half-step from ``mv2[1]`` (the
        ranks' total, written by the host); ``ALONE`` both.  The half-step updates ``state[slot]`` and leaves
        its factor in ``factor[0]``."""
        buf = cuda.shared.array(BLOCK, float64)
        t = cuda.threadIdx.x
        if mode != GLOBAL:
            x = 0.0
            k = t
            while k < m:
                x += parts[k]
                k += BLOCK
            _block_sum(buf, x)
        if t == 0:
            if mode != GLOBAL:
                mv2[0] = buf[0]
                if mode == ALONE:
                    mv2[1] = buf[0]
            if mode != LOCAL:
                factor[0] = hook(p, state[slot], mv2[1])

    return end


@cuda.jit
def scale(v, n, factor):
    """``v *= factor[0]`` for atoms [0, n) (``v`` flat), each product rounded."""
    i = cuda.grid(1)
    if i >= n:
        return
    b = 3 * i
    s = factor[0]
    v[b] = _mul(v[b], s)
    v[b + 1] = _mul(v[b + 1], s)
    v[b + 2] = _mul(v[b + 2], s)


def _blocks(n: int) -> int:
    return max(1, math.ceil(n / BLOCK))


class DeviceBath:
    """The run's thermostat on the device (the twin of what the CPU's steps do with ``bath``): its constants,
    its state in two slots (``slot`` the current one), the blocks' sums, and the launches at the step's
    three points.  ``bath`` is the system's :class:`~pympi_gpu.nbody.lj.thermostats.Bath` (its state as
    set up or restored, on the host), ``dev`` the :class:`~pympi_gpu.device.buffers.DeviceArrays`."""

    def __init__(self, bath, dev):
        self.host, self.dev = bath, dev
        self.style = bath.style
        self.kernels = make_kernels(self.style.name) if bath.active else None
        self.key = np.uint64(bath.key)
        self.params = dev.from_host(bath.params) if bath.active else None
        self.state = dev.from_host(np.stack([bath.state, bath.state])) if self.style.scales else None
        self.mv2 = dev.from_host(np.zeros(2)) if self.style.scales else None
        self.factor = dev.from_host(np.ones(1)) if self.style.scales else None
        self.parts = None
        self.slot = 0
        self._total = np.zeros(1)

    @property
    def active(self) -> bool:
        """Does the thermostat act at all (not ``nve``)?"""
        return self.host.active

    # -- the step's three points --------------------------------------------
    def begin(self, v, n: int) -> None:
        """Before the opening kick (``scales``): the chain's half-step and the velocities scaled, one launch."""
        if not self.style.scales:
            return
        view = self.dev.view
        self.dev.launch(self.kernels.begin, _blocks(n), BLOCK, v, n, view(self.params), view(self.state), self.slot,
                        1 - self.slot)
        self.slot = 1 - self.slot

    def force_kick(self, v, f, gid, n: int, step: int, h: float, kick: bool = True) -> None:
        """After the forces (``forces``): the thermostat's forces at ``step`` added, then ``v += h f`` where
        ``kick``; one launch."""
        self.dev.launch(self.kernels.force_kick, _blocks(n), BLOCK, v, f, gid, n, self.dev.view(self.params),
                        self.key, step, h, kick)

    def end(self, v, n: int, comm) -> None:
        """After the closing kick (``scales``): the sum of m v^2 over every rank of ``comm`` (collective), the
        chain's half-step, the velocities scaled.  On one rank three launches; over several, four, one wait
        and one upload."""
        if not self.style.scales:
            return
        dev, view, k = self.dev, self.dev.view, self.kernels
        m = _blocks(n)
        if self.parts is None or self.parts.shape[0] < m:
            self.parts = dev.xp.empty(m + m // 4 + 16, np.float64)
        parts, mv2, state, factor, params = (view(a) for a in (self.parts, self.mv2, self.state, self.factor,
                                                               self.params))
        dev.launch(k.partials, m, BLOCK, v, n, parts)
        if comm.Get_size() == 1:
            dev.launch(k.end, 1, BLOCK, parts, m, mv2, params, state, self.slot, factor, ALONE)
        else:
            from mpi4py import MPI

            dev.launch(k.end, 1, BLOCK, parts, m, mv2, params, state, self.slot, factor, LOCAL)
            self._total[0] = dev.scalar(self.mv2[0])
            comm.Allreduce(MPI.IN_PLACE, self._total, op=MPI.SUM)
            dev.into_device(self._total, self.mv2[1:])
            dev.launch(k.end, 1, BLOCK, parts, m, mv2, params, state, self.slot, factor, GLOBAL)
        dev.launch(k.scale, _blocks(n), BLOCK, v, n, factor)

    # -- the start, the state ------------------------------------------------
    def setup(self, v, f, gid, n: int, step: int, had: bool, comm) -> None:
        """At the start (LAMMPS's ``setup``; collective): the thermostat's forces added to the forces just
        computed (not to a checkpoint's, which hold them), and the state from every atom's sum of m v^2 (not
        a checkpoint's), uploaded."""
        if self.style.forces and not had:
            self.force_kick(v, f, gid, n, step, 0.0, kick=False)
        if self.style.scales and not self.host.restored:
            from mpi4py import MPI

            dev, view, k = self.dev, self.dev.view, self.kernels
            m = _blocks(n)
            parts = dev.xp.empty(m, np.float64)
            dev.launch(k.partials, m, BLOCK, v, n, view(parts))
            dev.launch(k.end, 1, BLOCK, view(parts), m, view(self.mv2), view(self.params), view(self.state), 0,
                       view(self.factor), LOCAL)
            total = np.array([dev.scalar(self.mv2[0])])
            comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
            self.host.setup(float(total[0]))
            dev.into_device(np.stack([self.host.state, self.host.state]), self.state)
            self.slot = 0

    def state_host(self) -> np.ndarray:
        """A host copy of the current state (one wait; counted with the sums)."""
        if not self.style.scales:
            return self.host.state.copy()
        return self.dev.to_host(self.state[self.slot], "sums")

    def kept(self):
        """What :meth:`restore` puts back: a device copy of the current state, and the slot (one operation)."""
        if not self.style.scales:
            return None
        with self.dev.ops(1):
            return self.state[self.slot].copy(), self.slot

    def restore(self, kept) -> None:
        """The state :meth:`kept` took, back in its slot (one operation)."""
        if kept is None:
            return
        state, self.slot = kept
        with self.dev.ops(1):
            self.state[self.slot] = state

    def warm(self, v, f, gid, h: float) -> None:
        """Compile the kernels a step launches, over no atom (``DeviceAtoms._warm``)."""
        if self.style.forces:
            self.force_kick(v, f, gid, 0, 0, h)
        if self.style.scales:  # (into scratch: the run's state is not touched; no atom reads what it holds)
            view, xp = self.dev.view, self.dev.xp
            state, parts, mv2, factor = xp.empty_like(self.state), xp.empty(1), xp.empty(2), xp.empty(1)
            self.dev.launch(self.kernels.begin, 1, BLOCK, v, 0, view(self.params), view(state), 0, 1)
            self.dev.launch(self.kernels.partials, 1, BLOCK, v, 0, view(parts))
            self.dev.launch(self.kernels.end, 1, BLOCK, view(parts), 0, view(mv2), view(self.params), view(state), 0,
                            view(factor), GLOBAL)
            self.dev.launch(self.kernels.scale, 1, BLOCK, v, 0, view(factor))
