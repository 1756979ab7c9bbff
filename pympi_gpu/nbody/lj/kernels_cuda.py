"""The LJ model on a GPU (numba.cuda): forces, kicks and halo packing on the device.

:class:`GpuLjSystem` keeps the atoms in device memory and runs every step
there: kick, drift, the displacement check (a device reduction), the
ghost-position refresh and the forces.  The halo buffers are packed on the
device (``pack``: rows of ``pos`` plus the periodic shift) and handed to MPI
as device arrays when MPI is CUDA-aware (``transport="device"``; the stream is
synchronised before every MPI call), else copied through pinned host buffers
(``transport="host"``).  The owned-owned forces of each third of the atoms
run on the stream while a stage's messages travel.  Forces use one-sided
(full) lists, one thread per atom, so no two threads write the same row.

At a rebuild (every ~10 steps) the owned atoms come to the host, where the
CPU path migrates them, sorts them and builds the ghosts and lists, which go
back to the device; building the cell and Verlet lists on the device is left
for later.  Importing this module imports numba.cuda: do it only for
``--backend gpu``.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import cuda

from pympi_gpu.device.buffers import mpi_buffer
from pympi_gpu.nbody.lj.driver import LjSystem
from pympi_gpu.nbody.lj.kernels_cpu import lj_row

__all__ = ["GpuLjSystem"]

BLOCK = 128


@cuda.jit
def _forces(pos, f, e, w, i0, i1, cnt, nbr, rc2, add):
    """One-sided LJ forces of atoms [i0, i1) over their listed neighbours.

    ``add``: 0 overwrites f, e, w (the first list), 1 adds (the ghost list).
    e and w hold each pair's full energy/virial (halved by the caller's sum).
    """
    i = cuda.grid(1) + i0
    if i >= i1:
        return
    fx, fy, fz, ei, wi = lj_row(pos, i, cnt, nbr, rc2)
    if add:
        f[i, 0] += fx
        f[i, 1] += fy
        f[i, 2] += fz
        e[i] += ei
        w[i] += wi
    else:
        f[i, 0] = fx
        f[i, 1] = fy
        f[i, 2] = fz
        e[i] = ei
        w[i] = wi


@cuda.jit
def _pack(pos, idx, sx, sy, sz, buf):
    """buf[k] = pos[idx[k]] + shift: a halo message packed on the device."""
    k = cuda.grid(1)
    if k < idx.shape[0]:
        j = idx[k]
        buf[k, 0] = pos[j, 0] + sx
        buf[k, 1] = pos[j, 1] + sy
        buf[k, 2] = pos[j, 2] + sz


@cuda.jit
def _kick(v, f, h, n):
    i = cuda.grid(1)
    if i < n:
        for d in range(3):
            v[i, d] += h * f[i, d]


@cuda.jit
def _drift_disp(x, v, dt, x0, d2, n):
    """x += dt v; d2 = squared displacement since the last rebuild, infinite where not finite."""
    i = cuda.grid(1)
    if i < n:
        s = 0.0
        for d in range(3):
            x[i, d] += dt * v[i, d]
            dd = x[i, d] - x0[i, d]
            s += dd * dd
        d2[i] = s if s == s else math.inf  # the max reduction would pass a NaN over


_max = cuda.reduce(lambda a, b: max(a, b))
_sum = cuda.reduce(lambda a, b: a + b)


def _grid(n: int) -> int:
    return max(1, math.ceil(n / BLOCK))


class GpuLjSystem(LjSystem):
    """:class:`~pympi_gpu.nbody.lj.driver.LjSystem` with its atoms in GPU memory.

    ``transport``: ``"device"`` (CUDA-aware MPI gets device buffers) or
    ``"host"`` (staged through pinned host memory).  Needs full lists
    (``config.newton`` False).
    """

    def __init__(self, cart, config, x, v, ids, f=None, transport: str = "host"):
        if config.newton:
            raise ValueError("the GPU path uses full neighbour lists: config.newton must be False")
        super().__init__(cart, config, x, v, ids, f)
        if transport not in ("device", "host"):
            raise ValueError(f"transport must be 'device' or 'host', got {transport!r}")
        self.transport = transport
        self.stream = cuda.stream()
        self.on_device = False

    # -- moving the atoms between host (rebuilds) and device (steps) ------
    def _to_host(self) -> None:
        if self.on_device:
            n = self.nlocal
            self.stream.synchronize()
            self.pos = self.d_pos.copy_to_host()
            self.v = self.d_v.copy_to_host()
            self.f = self.d_f.copy_to_host()
            assert self.pos.shape[0] >= n
            self.on_device = False

    def _to_device(self) -> None:
        s = self.stream
        self.d_pos = cuda.to_device(self.pos, stream=s)
        self.d_v = cuda.to_device(self.v, stream=s)
        self.d_f = cuda.to_device(self.f, stream=s)
        self.d_x0 = cuda.to_device(self.x0, stream=s)
        self.d_lists = [cuda.to_device(a, stream=s) for a in self.lists]
        n = self.nlocal
        self.d_e = cuda.device_array(max(n, 1), np.float64, stream=s)
        self.d_w = cuda.device_array(max(n, 1), np.float64, stream=s)
        self.d_d2 = cuda.device_array(max(n, 1), np.float64, stream=s)
        self.d_plan = []
        for (_, idx, shift, dest, source, start, count) in self.halo.plan:
            d_idx = cuda.to_device(idx.astype(np.int64), stream=s)
            d_buf = cuda.device_array((max(idx.size, 1), 3), np.float64, stream=s)
            host = (cuda.pinned_array((max(idx.size, 1), 3), np.float64),
                    cuda.pinned_array((max(count, 1), 3), np.float64)) if self.transport == "host" else None
            self.d_plan.append((d_idx, tuple(float(c) for c in shift), dest, source, start, count, d_buf, host))
        self.on_device = True

    def rebuild(self) -> None:
        self._to_host()
        super().rebuild()
        self._to_device()


    # -- the step on the device -------------------------------------------
    def forward_device(self, work) -> None:
        """Refresh the ghost rows of ``d_pos`` stage by stage; ``work(stage)`` runs meanwhile."""
        from mpi4py import MPI

        s = self.stream
        clock = self.halo.clock
        t0 = time.perf_counter()
        busy = waited = 0.0
        for d in range(3):
            reqs, unstage = [], []
            for k, (d_idx, (sx, sy, sz), dest, source, start, count, d_buf, host) in \
                    enumerate(self.d_plan[2 * d:2 * d + 2]):
                n = d_idx.shape[0]
                if n:
                    _pack[_grid(n), BLOCK, s](self.d_pos, d_idx, sx, sy, sz, d_buf)
                tag = 0x4C20 + 2 * d + k
                if self.transport == "device":
                    s.synchronize()  # MPI reads what the kernel wrote
                    reqs.append(self.cart.Irecv(mpi_buffer(self.d_pos[start:start + count]), source, tag))
                    reqs.append(self.cart.Isend(mpi_buffer(d_buf[:n]), dest, tag))
                else:
                    hsend, hrecv = host
                    if n:
                        d_buf[:n].copy_to_host(hsend[:n], stream=s)
                    s.synchronize()
                    reqs.append(self.cart.Irecv(hrecv[:count], source, tag))
                    reqs.append(self.cart.Isend(hsend[:n], dest, tag))
                    unstage.append((hrecv, start, count))
                clock.sent(n * 3 * 8)
            tw = time.perf_counter()
            work(d)  # launched on the stream: runs while the messages travel
            busy += time.perf_counter() - tw
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
            for hrecv, start, count in unstage:
                if count:
                    self.d_pos[start:start + count].copy_to_device(hrecv[:count], stream=s)
        tw = time.perf_counter()
        s.synchronize()  # the kernels launched by work(): compute
        busy += time.perf_counter() - tw
        self.halo.comm_time += time.perf_counter() - t0 - busy
        clock.add("waiting", waited)
        clock.add("communication", time.perf_counter() - t0 - busy - waited)

    def compute_forces(self, forward: bool) -> None:
        if not self.on_device:
            return super().compute_forces(forward)
        s = self.stream
        oc, on, gc, gn = self.d_lists
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        bounds = [0, n // 3, (2 * n) // 3, n]

        def work(stage):
            a, b = bounds[stage], bounds[stage + 1]
            if b > a:
                _forces[_grid(b - a), BLOCK, s](self.d_pos, self.d_f, self.d_e, self.d_w, a, b, oc, on, rc2, 0)

        if forward:
            self.forward_device(work)
        else:
            for st in range(3):
                work(st)
        if n:
            _forces[_grid(n), BLOCK, s](self.d_pos, self.d_f, self.d_e, self.d_w, 0, n, gc, gn, rc2, 1)
        self.energy = self.virial = None  # summed on demand (local_sums)

    def step(self, force_rebuild: bool = False, eflag: bool = False) -> None:
        if not self.on_device:
            return super().step(force_rebuild, eflag)
        s = self.stream
        n = self.nlocal
        h = 0.5 * self.config.dt
        d2 = 0.0
        if n:
            _kick[_grid(n), BLOCK, s](self.d_v, self.d_f, h, n)
            _drift_disp[_grid(n), BLOCK, s](self.d_pos, self.d_v, self.config.dt, self.d_x0, self.d_d2, n)
            s.synchronize()  # the reduction runs on the default stream
            d2 = float(_max(self.d_d2[:n], init=0.0))
        if self.agree_displacement(d2) or force_rebuild:  # collective; a blow-up raises on every rank
            self.rebuild()
            self.compute_forces(forward=False)
        else:
            self.compute_forces(forward=True)
        n = self.nlocal  # a rebuild migrates atoms
        if n:
            _kick[_grid(n), BLOCK, s](self.d_v, self.d_f, h, n)

    def start(self) -> bool:
        had = self.have_forces
        self.rebuild()  # the CPU rebuild (which carries the loaded forces along), then to the device
        keep = self.f.copy()
        self.compute_forces(forward=False)
        if had:  # a restart: keep the checkpoint's forces (bit-identical continuation)
            self.f = keep
            self.d_f = cuda.to_device(keep, stream=self.stream)
        return had

    def local_sums(self) -> np.ndarray:
        s = self.stream
        n = self.nlocal
        v = self.d_v.copy_to_host(stream=s)
        s.synchronize()
        e = 0.5 * _sum(self.d_e[:n], init=0.0) if n else 0.0
        w = 0.5 * _sum(self.d_w[:n], init=0.0) if n else 0.0
        vv = v[:n]
        return np.array([float(np.sum(vv * vv)), *vv.sum(axis=0), e, w])

    def wrap(self) -> None:
        self._to_host()
        super().wrap()
        self.pos = np.ascontiguousarray(self.pos)
        self.d_pos = cuda.to_device(self.pos, stream=self.stream)
        self.d_v = cuda.to_device(self.v, stream=self.stream)
        self.d_f = cuda.to_device(self.f, stream=self.stream)
        self.d_x0 = cuda.to_device(self.x0, stream=self.stream)
        self.on_device = True

    def owned(self) -> dict[str, np.ndarray]:
        s = self.stream
        n = self.nlocal
        s.synchronize()
        return {"x": self.d_pos[:n].copy_to_host(), "v": self.d_v.copy_to_host()[:n],
                "f": self.d_f.copy_to_host()[:n], "id": self.ids.copy()}
