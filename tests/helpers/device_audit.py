"""The simulator's audit of what the GPU path says it launches (not a test module: imported by test scripts).

:class:`~pympi_gpu.device.buffers.DeviceArrays` counts kernel launches and host waits where they happen:
numba.cuda launches and the waits at its doors, and CuPy's operations where the code declares them
(``with dev.ops(launches, syncs):``), since CuPy has no hook that counts its launches.  A declaration can
go stale when the code changes.  Under numba's simulator the array namespace is NumPy, and this module
makes every device array a :class:`Watched` array, which sees each NumPy operation made on it:

* inside a declared block, the operations are counted by what each stands for on CuPy (:func:`cost`) and
  must add up to the declaration when the block ends;
* inside a door of ``DeviceArrays`` (a launch, a copy, a sync) nothing is counted: the door counts itself;
* anywhere else an operation on device memory is an error: it would be a launch nobody counted.

What one NumPy operation stands for on CuPy (:func:`cost`): an elementwise operation or a reduction is one
kernel; a gather by indices, a cast or a copy, a slice assignment, ``zeros`` (a memset) and ``arange`` one
each; ``empty`` and views (basic slicing, reshapes, transposes) none; a sort, a scan, a concatenation or a
stack one call (a few kernels behind some of them).  Boolean indexing, ``nonzero`` and ``bincount``
wait for the device once besides (CuPy reads the output's size back before it allocates it).  Host data
comes in through ``dev.from_host`` (an upload, counted there), never through ``xp.asarray``.

``install()`` makes :meth:`Device.arrays <pympi_gpu.device.device.Device.arrays>` hand out
:class:`AuditedArrays` from then on, in this process.
"""

from __future__ import annotations

import contextlib
import traceback

import numpy as np

from pympi_gpu.device import buffers

__all__ = ["Watched", "AuditedArrays", "install", "AUDIT", "cost"]

#: array functions that launch nothing: views, shapes, metadata
FREE = {"reshape", "transpose", "shape", "ndim", "size", "result_type", "can_cast", "empty_like", "broadcast_to",
        "squeeze", "expand_dims", "moveaxis", "swapaxes", "atleast_1d", "atleast_2d", "iscomplexobj", "isrealobj"}
#: array functions that also wait for the device once (their output's size depends on the data)
WAITS = {"nonzero", "bincount", "flatnonzero", "argwhere", "unique", "compress"}


def cost(name: str, args=()) -> tuple[int, int]:
    """``(launches, syncs)`` that NumPy's array function ``name`` stands for on CuPy."""
    if name in FREE:
        return 0, 0
    if name == "ascontiguousarray":  # CuPy returns a contiguous array itself
        return (0, 0) if args and isinstance(args[0], np.ndarray) and args[0].flags.c_contiguous else (1, 0)
    if name == "ravel":
        return (0, 0) if args and args[0].flags.c_contiguous else (1, 0)
    return (1, 1) if name in WAITS else (1, 0)


class Audit:
    """What the watched arrays saw: the open declaration, the doors, the totals and the errors."""

    def __init__(self):
        self.quiet = 0            # > 0 inside a door or inside an operation already counted
        self.block = None         # [launches, syncs] seen in the open declared block, or None
        self.seen = {"launches": 0, "syncs": 0, "blocks": 0, "operations": 0}

    def op(self, name: str, launches: int, syncs: int = 0) -> None:
        """One NumPy operation on device memory: counted into the open block, or an error outside one."""
        if self.quiet or (self.block is None and not launches and not syncs):  # a view, an empty array
            return
        if self.block is None:
            where = "".join(traceback.format_stack(limit=8)[:-2])
            raise AssertionError(f"device operation {name!r} outside a declared block (dev.ops) or a door:\n{where}")
        self.block[0] += launches
        self.block[1] += syncs
        self.seen["operations"] += 1

    @contextlib.contextmanager
    def silent(self):
        self.quiet += 1
        try:
            yield
        finally:
            self.quiet -= 1

    @contextlib.contextmanager
    def declared(self, launches: int, syncs: int):
        if self.block is not None:
            raise AssertionError("declared blocks (dev.ops) do not nest")
        self.block = [0, 0]
        try:
            yield
            got = tuple(self.block)
        finally:
            self.block = None
        if got != (launches, syncs):
            where = "".join(traceback.format_stack(limit=6)[:-3])
            raise AssertionError(f"dev.ops({launches}, {syncs}) declared, the block made {got[0]} launches and "
                                 f"{got[1]} syncs:\n{where}")
        self.seen["launches"] += launches
        self.seen["syncs"] += syncs
        self.seen["blocks"] += 1


AUDIT = Audit()


def _plain(x):
    """``x`` with watched arrays as plain ones (lists and tuples looked into)."""
    if isinstance(x, Watched):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(y) for y in x)
    return x


def _watched(x):
    """Results as device arrays again (NumPy's scalars from full reductions as CuPy's 0-d arrays)."""
    if isinstance(x, np.ndarray):
        return x.view(Watched)
    if isinstance(x, np.generic):
        return np.asarray(x).view(Watched)
    if isinstance(x, tuple):
        return tuple(_watched(y) for y in x)
    if isinstance(x, list):
        return [_watched(y) for y in x]
    return x


def _fancy(key) -> tuple[int, int] | None:
    """``(launches, syncs)`` of indexing with ``key`` when it gathers (an array in it), None for a view."""
    keys = key if isinstance(key, tuple) else (key,)
    arrays = [k for k in keys if isinstance(k, (np.ndarray, list))]
    if not arrays:
        return None
    return (1, 1) if any(np.asarray(k).dtype == bool for k in arrays) else (1, 0)


class Watched(np.ndarray):
    """A device array under the simulator: each operation made on it is audited (see the module docstring)."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        AUDIT.op(f"{ufunc.__name__}.{method}", 1)
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        with AUDIT.silent():
            res = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _watched(res)

    def __array_function__(self, func, types, args, kwargs):
        AUDIT.op(func.__name__, *cost(func.__name__, args))
        with AUDIT.silent():
            res = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        return _watched(res)

    def __getitem__(self, key):
        fancy = _fancy(key)
        if fancy is not None:
            AUDIT.op("gather" if fancy == (1, 0) else "compaction", *fancy)
        with AUDIT.silent():
            res = np.ndarray.__getitem__(self.view(np.ndarray), _plain(key))
        return _watched(res)

    def __setitem__(self, key, value):
        AUDIT.op("setitem", *(_fancy(key) or (1, 0)))  # a copy, a fill or a scatter
        with AUDIT.silent():
            np.ndarray.__setitem__(self.view(np.ndarray), _plain(key), _plain(value))

    def astype(self, dtype, *a, **k):
        AUDIT.op("astype", 1)
        return _watched(self.view(np.ndarray).astype(dtype, *a, **k))

    def copy(self, *a, **k):
        AUDIT.op("copy", 1)
        return _watched(self.view(np.ndarray).copy(*a, **k))

    def fill(self, value):
        AUDIT.op("fill", 1)
        self.view(np.ndarray).fill(value)

    def _read(self, name):
        if not AUDIT.quiet:
            raise AssertionError(f"{name}() of a device array outside a door: a read the counter does not see")

    def item(self, *a):
        self._read("item")
        return self.view(np.ndarray).item(*a)

    def tolist(self):
        self._read("tolist")
        return self.view(np.ndarray).tolist()

    def __bool__(self):
        self._read("bool")
        return bool(self.view(np.ndarray))

    def __float__(self):
        self._read("float")
        return float(self.view(np.ndarray))

    def __int__(self):
        self._read("int")
        return int(self.view(np.ndarray))

    def __index__(self):
        self._read("index")
        return self.view(np.ndarray).__index__()


class Namespace:
    """NumPy as the audited array namespace: arrays made from host data are watched device arrays."""

    #: creation functions: what each stands for on CuPy
    MAKE = {"zeros": (1, 0), "zeros_like": (1, 0), "full": (1, 0), "ones": (1, 0), "arange": (1, 0),
            "empty": (0, 0), "empty_like": (0, 0)}

    def __getattr__(self, name):
        obj = getattr(np, name)
        if not callable(obj) or isinstance(obj, type):
            return obj

        def call(*args, **kwargs):
            if any(isinstance(a, Watched) for a in _flat(args, kwargs)):
                if name == "asarray":  # a device array already: CuPy returns it
                    return args[0]
                return obj(*args, **kwargs)  # dispatched to Watched, which counts it
            res = obj(*args, **kwargs)
            if not isinstance(res, np.ndarray):
                return res
            if name not in self.MAKE:  # xp.asarray(host data): an upload the counter would not see
                raise AssertionError(f"xp.{name} of host data: copy host data in with dev.from_host (counted)")
            AUDIT.op(name, *self.MAKE[name])
            return res.view(Watched)

        return call


def _flat(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


class AuditedArrays(buffers.DeviceArrays):
    """``DeviceArrays`` under the simulator whose arrays are :class:`Watched`: its doors count themselves,
    its declared blocks are checked."""

    def __init__(self, simulated: bool = True):
        if not simulated:
            raise ValueError("the audit runs under the simulator only")
        super().__init__(simulated=True)
        self.xp = Namespace()

    @contextlib.contextmanager
    def ops(self, launches: int, syncs: int = 0):
        with super().ops(launches, syncs), AUDIT.declared(launches, syncs):
            yield

    def _door(name):
        real = getattr(buffers.DeviceArrays, name)

        def door(self, *args, **kwargs):
            with AUDIT.silent():
                res = real(self, *args, **kwargs)
            return res.view(Watched) if name == "from_host" else res

        door.__name__ = name
        return door

    for _name in ("launch", "sync", "to_host", "scalar", "from_host", "into_device", "view", "mpi_buffer"):
        locals()[_name] = _door(_name)
    del _name, _door


def install() -> None:
    """From now on, in this process, ``Device.arrays()`` of a simulated GPU hands out :class:`AuditedArrays`."""
    from pympi_gpu.device import device

    device.Device.arrays = lambda self: AuditedArrays(self.simulated)
