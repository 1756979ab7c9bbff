"""MPI calls made from numba-compiled code: persistent requests started and waited for inside a kernel.

A step of the LJ model at a few hundred atoms a rank is a few tens of
microseconds of compiled work between MPI calls, and the Python around each
call (the mpi4py call, the return to the interpreter, the next kernel's
dispatch) costs as much as the call.  So the step's kernel makes its MPI calls
itself, on persistent requests that mpi4py made once (``Send_init``,
``Recv_init``, ``Allreduce_init``):

- :func:`start_all` is ``MPI_Startall``, :func:`wait_all` is ``MPI_Waitall``
  and :func:`wtime` is ``MPI_Wtime``.  Their arguments are a count and
  pointers, so their machine code is the same whatever the library's handle
  types (MPICH's ints, Open MPI's pointers): numba's cache of a kernel that
  calls them serves any MPI.
- The requests travel as bytes (:func:`handles`): each request's handle as
  mpi4py holds it, copied once per set of persistent requests.
- The rebuild's messages, whose sizes change from one rebuild to the next,
  are sent and probed for: :func:`exchange_rows` calls ``MPI_Isend``,
  ``MPI_Probe``, ``MPI_Get_count`` and ``MPI_Recv``, which take a
  communicator and a datatype by value.  Their declarations take the handle
  type of the library loaded at compile time (an int or a pointer), and
  :func:`keyed_by_handles` keys the kernel's cache entries by it.
- The symbols are found by name in the libmpi that mpi4py loaded:
  :func:`link` hands that library to LLVM, and must have answered True before
  a kernel calling them is compiled or loaded from numba's cache.

`numba-mpi <https://pypi.org/project/numba-mpi/>`_ calls MPI from numba too,
but on ``MPI_COMM_WORLD`` only and without persistent requests or probes; a
step runs on a Cartesian communicator and starts the same messages every step.

``PYMPI_COMPILED_MPI=0`` keeps every MPI call in Python (the command line reads it:
``Device.compiled_mpi``), the path of a library without MPI 4's persistent collectives.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable

from pympi_gpu.device.jitcache import guard_cache

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["link", "handles", "request_size", "statuses", "calls", "failure", "persistent_collectives",
           "start_all", "wait_all", "wtime", "handle_width", "handle", "keyed_by_handles", "exchange_rows",
           "SYMBOLS", "NOT_LINKED", "EXCHANGED", "NEED_ROOM", "EXCHANGE_FAILED"]

#: what the kernels call, each resolved by name in the loaded libmpi
SYMBOLS = ("MPI_Startall", "MPI_Waitall", "MPI_Wtime", "MPI_Isend", "MPI_Recv", "MPI_Probe", "MPI_Get_count")

#: the return code of a call in a kernel compiled where the symbols did not resolve (:func:`calls`)
NOT_LINKED = -1

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()


@functools.cache
def link() -> bool:
    """Make :data:`SYMBOLS` of the libmpi mpi4py loaded resolvable by numba's JIT; did they all resolve?

    MPI must be loaded (``from mpi4py import MPI``).  A library linked into the
    process statically resolves as well; where nothing does, the kernels are
    compiled without the calls and every MPI call stays in Python.
    """
    import llvmlite.binding as llvm
    from mpi4py import MPI  # noqa: F401  (loads libmpi)

    from pympi_gpu.mpi.cuda_aware import loaded_mpi_libraries

    for path in loaded_mpi_libraries():
        try:
            llvm.load_library_permanently(path)
        except RuntimeError:
            continue
    return all(llvm.address_of_symbol(name) for name in SYMBOLS)


@functools.cache
def persistent_collectives() -> bool:
    """Has the loaded library MPI 4's persistent collectives (``MPI_Allreduce_init``)?  Asked of the
    library, not of its version: Open MPI 5 has them and calls itself MPI 3.1."""
    from mpi4py import MPI

    send, recv = np.zeros(1), np.zeros(1)
    try:
        request = MPI.COMM_SELF.Allreduce_init(send, recv, MPI.MAX)
    except (NotImplementedError, MPI.Exception):
        return False
    request.Free()
    return True


def handles(requests) -> np.ndarray:
    """The handles of mpi4py ``requests`` one after the other, as bytes: the array a kernel passes to
    :func:`start_all` and :func:`wait_all`.  Valid while the requests are (persistent requests keep
    their handles from one start to the next)."""
    from mpi4py import MPI

    size = MPI._sizeof(MPI.Request)
    raw = b"".join(ctypes.string_at(MPI._addressof(r), size) for r in requests)
    return np.frombuffer(raw, np.uint8).copy() if raw else np.zeros(0, np.uint8)


def request_size() -> int:
    """Bytes of one request handle in :func:`handles`."""
    from mpi4py import MPI

    return MPI._sizeof(MPI.Request)


def statuses(count: int) -> np.ndarray:
    """Room for ``count`` ``MPI_Status`` records (``MPI_STATUSES_IGNORE`` is not the same value in every
    library, so :func:`wait_all` is given real ones)."""
    from mpi4py import MPI

    return np.zeros(count * MPI._sizeof(MPI.Status), np.uint8)


def _declared(builder, name: str, ret, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


@intrinsic
def _startall(typingctx, count, address):
    def codegen(context, builder, sig, args):
        fn = _declared(builder, "MPI_Startall", _I32, [_I32, _PTR])
        rc = builder.call(fn, [builder.trunc(args[0], _I32), builder.inttoptr(args[1], _PTR)])
        return builder.sext(rc, _I64)

    return types.int64(types.intp, types.uintp), codegen


@intrinsic
def _waitall(typingctx, count, address, status):
    def codegen(context, builder, sig, args):
        fn = _declared(builder, "MPI_Waitall", _I32, [_I32, _PTR, _PTR])
        rc = builder.call(fn, [builder.trunc(args[0], _I32), builder.inttoptr(args[1], _PTR),
                               builder.inttoptr(args[2], _PTR)])
        return builder.sext(rc, _I64)

    return types.int64(types.intp, types.uintp, types.uintp), codegen


@intrinsic
def _wtime(typingctx):
    def codegen(context, builder, sig, args):
        return builder.call(_declared(builder, "MPI_Wtime", ir.DoubleType(), []), [])

    return types.float64(), codegen


@register_jitable
def start_all(reqs, at, count):
    """``MPI_Startall`` of the ``count`` requests of ``reqs`` (:func:`handles`) from byte ``at``; MPI's
    return code."""
    return _startall(count, reqs.ctypes.data + at)


@register_jitable
def wait_all(reqs, at, count, status):
    """``MPI_Waitall`` of the ``count`` requests of ``reqs`` from byte ``at``, their statuses into
    ``status`` (:func:`statuses`); MPI's return code."""
    return _waitall(count, reqs.ctypes.data + at, status.ctypes.data)


@register_jitable
def wtime():
    """``MPI_Wtime()``: seconds."""
    return _wtime()


@register_jitable
def _unlinked_start(reqs, at, count):
    return NOT_LINKED


@register_jitable
def _unlinked_wait(reqs, at, count, status):
    return NOT_LINKED


@register_jitable
def _unlinked_wtime():
    return 0.0


def failure(code: int) -> Exception:
    """The exception of a call a kernel made that returned ``code``."""
    if code == NOT_LINKED:
        return RuntimeError("an MPI call from a kernel compiled without MPI's symbols (numba_calls.link)")
    from mpi4py import MPI

    return MPI.Exception(code)


def calls(linked: bool):
    """``(start_all, wait_all, wtime)`` for a kernel to close over: MPI's where :func:`link` resolved the
    symbols; else calls that answer :data:`NOT_LINKED`, for a kernel whose callers keep MPI in Python."""
    return (start_all, wait_all, wtime) if linked else (_unlinked_start, _unlinked_wait, _unlinked_wtime)


# -- calls with handles by value: the kernel's code depends on the library's handle types -----------------
# MPICH, Intel MPI and MVAPICH hand out ints, Open MPI pointers: these calls are declared with the type of
# the library loaded when the kernel is compiled, and a kernel that makes them is cached per handle width
# (:func:`keyed_by_handles`).  Python passes each handle as the integer mpi4py holds (:func:`handle`).

def handle_width() -> int:
    """Bytes of the loaded library's communicator and datatype handles (4: ints; 8: pointers)."""
    from mpi4py import MPI

    return MPI._sizeof(MPI.Comm)


def handle(obj) -> int:
    """The handle of an mpi4py communicator or datatype as a signed 64-bit integer, for the calls below
    (mpi4py gives MPICH's ints sign-extended and unsigned)."""
    from mpi4py import MPI

    value = MPI._handleof(obj) & 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >> 63 else value


def _handle(builder, value):
    """An int64 argument as the library's handle type."""
    return builder.trunc(value, _I32) if handle_width() == 4 else builder.inttoptr(value, _PTR)


def _handle_type():
    return _I32 if handle_width() == 4 else _PTR


def _argument(builder, value, kind: str):
    """``p``: an address (uintp) as a pointer; ``i``: an int64 as an int; ``h``: a handle."""
    if kind == "p":
        return builder.inttoptr(value, _PTR)
    if kind == "i":
        return builder.trunc(value, _I32)
    return _handle(builder, value)


def _codegen(name: str, kinds: str):
    """The code of a call to ``name`` whose arguments are of ``kinds`` (:func:`_argument`); MPI's code."""
    def codegen(context, builder, sig, args):
        ir_types = [_PTR if k == "p" else _I32 if k == "i" else _handle_type() for k in kinds]
        fn = _declared(builder, name, _I32, ir_types)
        return builder.sext(builder.call(fn, [_argument(builder, a, k) for a, k in zip(args, kinds)]), _I64)
    return codegen


def _signature(kinds: str):
    return types.int64(*(types.uintp if k == "p" else types.int64 for k in kinds))


@intrinsic
def _isend(typingctx, buf, count, datatype, dest, tag, comm, request):
    return _signature("pihiihp"), _codegen("MPI_Isend", "pihiihp")


@intrinsic
def _recv(typingctx, buf, count, datatype, source, tag, comm, status):
    return _signature("pihiihp"), _codegen("MPI_Recv", "pihiihp")


@intrinsic
def _probe(typingctx, source, tag, comm, status):
    return _signature("iihp"), _codegen("MPI_Probe", "iihp")


@intrinsic
def _get_count(typingctx, status, datatype, count):
    return _signature("php"), _codegen("MPI_Get_count", "php")


def keyed_by_handles(kernel, *more):
    """Key ``kernel``'s cache entries by the handle width too: its code declares the handle types of the
    library it was compiled with, and one cache directory may serve MPICH and Open MPI in turn.  ``more``:
    functions of no argument whose answers join the key (as
    :func:`~pympi_gpu.device.jitcache.sources`' do).  Returns ``kernel`` (a ``numba.njit(cache=True)``
    function; as it is without numba's JIT)."""
    if hasattr(kernel, "py_func"):
        kernel._cache = _handle_keyed_cache()(kernel.py_func)
        kernel._cache.more = more
    return kernel


@functools.cache
def _handle_keyed_cache():
    from numba.core.caching import FunctionCache

    class HandleKeyedCache(FunctionCache):
        more = ()

        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), ("MPI handle bytes", handle_width()),
                    *(part() for part in self.more))

    return HandleKeyedCache


#: what :func:`exchange_rows` returns: done; ``out`` too short (``got[:2]`` the messages' rows: call again
#: with room and ``resume``); an MPI call failed (its code in ``got[2]``)
EXCHANGED, NEED_ROOM, EXCHANGE_FAILED = range(3)


@keyed_by_handles
@njit(cache=True)
def exchange_rows(buf, split, total, out, at, lower, upper, tag, comm, double, requests, rsize, status, resume,
                  got):
    """Rows ``buf[:split]`` to rank ``lower`` and ``buf[split:total]`` to ``upper`` (float64, ``double``
    the ``MPI_DOUBLE`` handle, ``comm`` the communicator's), theirs received into ``out[at:]``: the
    upper neighbour's rows then the lower's, their counts in ``got[:2]``.  Each side learns the size of
    what comes by a probe; where the two neighbours are one rank the rows go as one message each way,
    the split in one more row (``buf`` has that row of room) and ``got[:2]`` the neighbour's two parts.
    ``requests``: room for two requests of ``rsize`` bytes; ``status``: for two statuses.  Returns
    :data:`EXCHANGED`, :data:`NEED_ROOM` (then again with a longer ``out`` and ``resume``) or
    :data:`EXCHANGE_FAILED`; the same messages as ``halo._exchange`` makes from Python."""
    width = buf.shape[1]
    one = lower == upper
    rc = 0
    if not resume:
        if one:
            buf[total, 0] = split
            rc = _isend(buf.ctypes.data, (total + 1) * width, double, lower, tag, comm, requests.ctypes.data)
        else:
            rc = _isend(buf.ctypes.data, split * width, double, lower, tag, comm, requests.ctypes.data)
            if rc == 0:
                rc = _isend(buf[split:].ctypes.data, (total - split) * width, double, upper, tag + 2, comm,
                            requests.ctypes.data + rsize)
        count = np.zeros(1, np.int32)
        for k in range(1 if one else 2):
            if rc == 0:
                rc = _probe(upper if k == 0 else lower, tag + 2 * k, comm, status.ctypes.data)
            if rc == 0:
                rc = _get_count(status.ctypes.data, double, count.ctypes.data)
            got[k] = count[0] // width
        if one:
            got[1] = 0
    if rc == 0 and out.shape[0] < at + got[0] + got[1]:
        return NEED_ROOM
    if rc == 0:
        rc = _recv(out[at:].ctypes.data, got[0] * width, double, upper, tag, comm, status.ctypes.data)
    if rc == 0 and not one:
        rc = _recv(out[at + got[0]:].ctypes.data, got[1] * width, double, lower, tag + 2, comm, status.ctypes.data)
    if rc == 0:
        rc = _waitall(1 if one else 2, requests.ctypes.data, status.ctypes.data)
    if rc != 0:
        got[2] = rc
        return EXCHANGE_FAILED
    if one:  # the neighbour's split: its rows sent down came first
        m = got[0]
        got[0] = int(out[at + m - 1, 0])
        got[1] = m - 1 - got[0]
    return EXCHANGED
