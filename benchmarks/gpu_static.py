#!/usr/bin/env python3
"""Kernel quality from the compiler, without a GPU: every numba.cuda kernel of pympi_gpu.

    python benchmarks/gpu_static.py                    # writes benchmarks/results/gpu-static.json
    python benchmarks/gpu_static.py --samples ../shared/cuda-samples --arch 80 --arch 90

Each kernel is compiled by numba-cuda to PTX for the launch's types (no GPU is asked for: the
compute capability is given), assembled by ``ptxas`` for sm_80 (A100) and sm_90 (H100/H200),
as the driver does when it loads the kernel, and disassembled by ``nvdisasm``.  Reported per
kernel and architecture:

* registers per thread, spill stores and loads, stack frame, static shared memory (``ptxas -v``);
* theoretical occupancy at the block size the package launches it with (the CUDA occupancy
  calculator's arithmetic: registers allocated per warp in units of 256, four sub-partitions,
  shared memory per block plus the 1 KiB the runtime reserves, the SM's thread and block caps);
* SASS instructions per inner-loop item (interaction, neighbour, candidate, sample, node).

How the last is counted: the kernel's loops are its backward branches (``BRA`` to a label at or
before it).  Among the innermost loops (no other back edge inside), the one holding the most
instances of the item's marker instruction is the inner loop: the marker is an instruction each
item executes exactly once (``MUFU.RSQ`` for a gravity interaction, ``MUFU.RCP64H`` for an LJ
neighbour's ``1/r^2``, the first ``DMUL`` of r^2 for a list candidate, for a pi sample the
``IMAD.HI`` that ptxas makes of ``x*x`` added to ``y*y``, the high word of the exact test's sum).  Its instructions from the loop's head label through the back-edge
branch, all of them (an out-of-line slow path's call sequence too), divided by the number of
markers, is the figure.  cuda-samples' ``integrateBodies`` (fp32 and fp64), compiled from
``../shared/cuda-samples`` both ways the acceptance builds it, with the flags of NVIDIA's build
and with ``-use_fast_math`` besides (which makes ``rsqrtf`` a bare ``MUFU.RSQ``: no flush-to-zero
fix-up), is measured the same way beside them.

The tools: numba-cuda with NVVM and NVRTC (``pip install -e .[gpu-cu13]``), ``ptxas`` (the CUDA
toolkit), ``nvdisasm`` (the toolkit, or PyPI's ``nvidia-cuda-nvdisasm``), ``nvcc`` for
cuda-samples.  The JSON records their versions and a hash of the kernels' sources, which
``tests/gpu/test_gpu_static.py`` compares with the sources in the checkout.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SAMPLES = ROOT.parent / "shared" / "cuda-samples"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu-static.json"
ARCHS = (80, 90)

#: the sources whose kernels are measured: the JSON holds their hash, so a stale file is seen
SOURCES = ("pympi_gpu/nbody/gravity/kernels_cuda.py", "pympi_gpu/nbody/lj/gpu/kernels.py",
           "pympi_gpu/nbody/lj/gpu/rebuild_kernels.py", "pympi_gpu/nbody/lj/pairs/lj_cut.py", "pympi_gpu/nbody/lj/pairs/__init__.py",
           "pympi_gpu/pi/kernels_cuda.py", "pympi_gpu/rng.py", "benchmarks/gpu_static.py")

#: what an SM offers, for the occupancy arithmetic (CUDA C Programming Guide, table of
#: compute capabilities; shared memory is the largest carve-out)
SM_LIMITS = {
    80: {"regs": 65536, "threads": 2048, "blocks": 32, "smem": 167936, "smem_reserved": 1024},
    90: {"regs": 65536, "threads": 2048, "blocks": 32, "smem": 233472, "smem_reserved": 1024},
}

__all__ = ["Instr", "parse_sass", "inner_loop", "occupancy", "parse_ptxas", "measure", "main"]


# ------------------------------------------------------------------ what is measured

@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel as the package launches it: how to compile it and what its inner loop does."""

    name: str
    block: int                 # threads per block of the launch
    item: str | None = None    # what one pass of the inner loop's body handles, per marker
    marker: str | None = None  # regex of the instruction each item executes once
    dynamic_smem: int = 0      # bytes of dynamic shared memory of the launch


#: the package's kernels, measured by the child process (``_ptx``) under these names
KERNELS = (
    Kernel("gravity.accel fp32", 256, "interaction", r"MUFU\.RSQ\b"),
    Kernel("gravity.accel fp64", 256, "interaction", r"MUFU\.RSQ64H"),
    Kernel("gravity.potential fp32", 256, "interaction", r"MUFU\.RSQ\b"),
    Kernel("gravity.potential fp64", 256, "interaction", r"MUFU\.RSQ64H"),
    Kernel("gravity.axpy fp64", 256),
    Kernel("gravity.fill_zero fp64", 256),
    Kernel("gravity.count_nonfinite fp64", 256),
    Kernel("lj.forces", 128, "neighbour", r"MUFU\.RCP64H"),
    Kernel("lj.forces_newton", 128, "neighbour", r"MUFU\.RCP64H"),
    Kernel("lj.forces_kick", 128, "neighbour", r"MUFU\.RCP64H"),    # the step's last force launch
    Kernel("lj.integrate", 128),                                     # kick, drift, displacement, its max
    Kernel("lj.kick", 128),
    Kernel("lj.gather_rows", 128),                                   # the halo's rows
    Kernel("lj.add_rows", 128),                                      # half lists' reverse halo
    Kernel("lj.build_lists", 128, "candidate", r"^DMUL"),            # dx*dx: the first term of r^2
    # the rebuild's (issue 50): the counting sort, the ghosts, the ghost cells, the migration
    Kernel("lj.fold_owned", 128),
    Kernel("lj.bin_owned", 128),
    Kernel("lj.order_cells", 128),
    Kernel("lj.count_images", 128),
    Kernel("lj.write_images", 128),
    Kernel("lj.pack_border", 128),
    Kernel("lj.unpack_border", 128),
    Kernel("lj.order_ghost_cells", 128),
    Kernel("lj.gather_images", 128),
    Kernel("lj.migrate_count", 128),
    Kernel("lj.migrate_write", 128),
    Kernel("lj.unpack_owned", 128),
    Kernel("pi.mc", 256, "sample", r"^IMAD\.HI\b"),  # ptxas's high word of x*x + y*y: one a sample
    Kernel("pi.trapezoid", 256, "group", r"MUFU\.RCP64H"),  # four nodes a division
)

#: cuda-samples' kernel, measured beside ours (dynamic shared memory: one vec4 per thread), built as
#: NVIDIA ships it and with -use_fast_math (the names of the second end in FAST_MATH)
FAST_MATH = " fast-math"
SAMPLES = (
    Kernel("cuda-samples integrateBodies fp32", 256, "interaction", r"MUFU\.RSQ\b", 256 * 16),
    Kernel("cuda-samples integrateBodies fp64", 256, "interaction", r"MUFU\.RSQ64H", 256 * 32),
    Kernel("cuda-samples integrateBodies fp32" + FAST_MATH, 256, "interaction", r"MUFU\.RSQ\b", 256 * 16),
    Kernel("cuda-samples integrateBodies fp64" + FAST_MATH, 256, "interaction", r"MUFU\.RSQ64H", 256 * 32),
)
SAMPLES_SYMBOLS = {"fp32": "_Z15integrateBodiesIfE", "fp64": "_Z15integrateBodiesIdE"}


# ------------------------------------------------------------------ SASS: parsing and loops

@dataclasses.dataclass(frozen=True)
class Instr:
    addr: int
    text: str          # the instruction without predicate guard, e.g. "MUFU.RSQ R1, R2"
    target: str | None  # the label a branch goes to


_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*)?$")
_LABEL = re.compile(r"^\s*(\.L_x_\d+|\$[\w$.]+):\s*$")
_FUNC = re.compile(r"^\s*\.text\.(\S+):\s*$")


def parse_sass(text: str) -> dict[str, tuple[list[Instr], dict[str, int]]]:
    """``nvdisasm -c`` output as ``{function: (instructions, {label: address})}``.

    Labels belong to the function whose ``.text`` section they appear in; a label is placed
    at the address of the instruction that follows it.
    """
    out: dict[str, tuple[list[Instr], dict[str, int]]] = {}
    func = None
    pending: list[str] = []
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            func = m.group(1)
            out[func] = ([], {})
            pending = []
            continue
        if func is None:
            continue
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _LINE.search(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        body = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())
        t = re.search(r"`\((\.L_x_\d+)\)", body)
        instrs, labels = out[func]
        for lab in pending:
            labels[lab] = addr
        pending = []
        instrs.append(Instr(addr, body, t.group(1) if t else None))
    return out


def loops(instrs: list[Instr], labels: dict[str, int]) -> list[tuple[int, int]]:
    """``(head, back edge)`` address pairs: a branch to a label at or before itself."""
    return sorted({(labels[i.target], i.addr) for i in instrs
                   if i.target in labels and i.text.startswith("BRA") and labels[i.target] <= i.addr})


def inner_loop(instrs: list[Instr], labels: dict[str, int], marker: str) -> dict | None:
    """The innermost loop with the most ``marker`` instructions: its size and size per marker."""
    pat = re.compile(marker)
    spans = loops(instrs, labels)
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    best = None
    for head, back in inner:
        body = [i for i in instrs if head <= i.addr <= back]
        n = sum(1 for i in body if pat.search(i.text))
        if n and (best is None or n > best["items_per_pass"]):
            best = {"instructions": len(body), "items_per_pass": n, "per_item": round(len(body) / n, 2),
                    "head": f"{head:#06x}", "back_edge": f"{back:#06x}"}
    return best


# ------------------------------------------------------------------ resources and occupancy

def parse_ptxas(text: str) -> dict[str, dict]:
    """``ptxas -v`` output as ``{entry: {registers, spill_stores, spill_loads, stack, smem}}``."""
    out: dict[str, dict] = {}
    entry = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            entry = m.group(1)
            out[entry] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0, "smem": 0}
            continue
        if entry is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[entry].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[entry]["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            out[entry]["smem"] = int(s.group(1)) if s else 0
    return out


def occupancy(arch: int, registers: int, smem: int, block: int) -> dict:
    """Theoretical occupancy: resident warps per SM over the SM's 64, and what limits them."""
    lim = SM_LIMITS[arch]
    warps = math.ceil(block / 32)
    per_warp = math.ceil(max(registers, 1) * 32 / 256) * 256
    warps_by_regs = 4 * ((lim["regs"] // 4) // per_warp)  # the register file is split in four
    by = {"registers": warps_by_regs // warps,
          "threads": lim["threads"] // (warps * 32),
          "blocks": lim["blocks"]}
    if smem:
        per_block = math.ceil((smem + lim["smem_reserved"]) / 128) * 128
        by["shared memory"] = lim["smem"] // per_block
    blocks = min(by.values())
    limiter = min(by, key=lambda k: (by[k], k != "threads"))
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": round(blocks * warps / (lim["threads"] // 32), 4), "limited_by": limiter}


# ------------------------------------------------------------------ tools

def find_tool(name: str) -> str | None:
    """A CUDA tool: on PATH, under CUDA_HOME or /usr/local/cuda, or from a PyPI wheel (nvidia/cu*/bin)."""
    found = shutil.which(name)
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for r in filter(None, roots):
        if (Path(r) / "bin" / name).is_file():
            return str(Path(r) / "bin" / name)
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for cand in sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "bin", name)), reverse=True):
            return cand
    return None


def tool_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln or ln.startswith("Build")]
    return "; ".join(lines) or out.stdout.strip().splitlines()[-1]


def sources_digest(root: Path = ROOT) -> str:
    """sha256 over the measured sources (:data:`SOURCES`), so a result file knows what it measured."""
    h = hashlib.sha256()
    for rel in SOURCES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


# ------------------------------------------------------------------ compiling

#: run in a child process (one per architecture): each kernel's PTX for the launch's types
_CHILD = r'''
import json, sys, types
import numpy as np
import numba.cuda.dispatcher as dispatcher
from numba import cuda, boolean, float32, float64, int32, int64, uint64, void
cc = (int(sys.argv[1]) // 10, int(sys.argv[1]) % 10)
# device functions ask the current device for its capability: there is none here
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
from pympi_gpu.nbody.gravity import kernels_cuda as grav
from pympi_gpu.nbody.lj.gpu import kernels as lj
from pympi_gpu.nbody.lj.gpu import rebuild_kernels as rk
from pympi_gpu.pi import kernels_cuda as pik

def ptx(kernel, sig):
    opts = dict(getattr(kernel, "targetoptions", {}))
    text, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc, fastmath=bool(opts.get("fastmath", False)),
                               lineinfo=False, launch_bounds=opts.get("launch_bounds"))
    return text

out = {}
for prec, dt, nbt in (("fp32", np.float32, float32), ("fp64", np.float64, float64)):
    accel, potential, axpy, fill_zero = grav.make_kernels(dt, 256)
    a = nbt[::1]
    out[f"gravity.accel {prec}"] = ptx(accel, void(a, a, a, a, a, a, a, nbt, a, a, a))
    out[f"gravity.potential {prec}"] = ptx(potential, void(a, a, a, a, a, a, a, nbt, float64[::1]))
    if prec == "fp64":
        out["gravity.axpy fp64"] = ptx(axpy, void(a, nbt, a))
        out["gravity.fill_zero fp64"] = ptx(fill_zero, void(a))
        out["gravity.count_nonfinite fp64"] = ptx(grav._count_nonfinite, void(a, int64[::1]))
pos = float64[:, ::1]
from pympi_gpu.nbody.lj.config import LjConfig
lj_cut = lj.force_kernels(LjConfig(cells=1).pair_term)  # the default style, lj/cut at epsilon = sigma = 1
for name in ("forces", "forces_newton"):
    out[f"lj.{name}"] = ptx(getattr(lj_cut, name), lj.FORCES_SIGNATURE)
out["lj.forces_kick"] = ptx(lj_cut.forces_kick, lj.FORCES_KICK_SIGNATURE)
for name, sig in (("integrate", "INTEGRATE"), ("kick", "KICK"), ("gather_rows", "GATHER"), ("add_rows", "ADD")):
    out[f"lj.{name}"] = ptx(getattr(lj, name), getattr(lj, sig + "_SIGNATURE"))
for name, sig in (("build_lists", "BUILD"), ("fold_owned", "FOLD"), ("bin_owned", "BIN"), ("order_cells", "ORDER"),
                  ("count_images", "COUNT"), ("write_images", "WRITE"), ("pack_border", "PACK"),
                  ("unpack_border", "UNPACK"), ("order_ghost_cells", "GHOST_ORDER"),
                  ("gather_images", "GATHER_IMAGES"), ("migrate_count", "MIGRATE_COUNT"),
                  ("migrate_write", "MIGRATE_WRITE"), ("unpack_owned", "UNPACK_OWNED")):
    out[f"lj.{name}"] = ptx(getattr(rk, name), getattr(rk, sig + "_SIGNATURE"))
out["pi.mc"] = ptx(pik._mc_kernel, void(uint64, uint64, int64, int64, uint64[::1]))
out["pi.trapezoid"] = ptx(pik._trap_kernel, void(int64, int64, int64, float64, int64[::1]))
json.dump(out, sys.stdout)
'''


def numba_ptx(arch: int) -> dict[str, str]:
    """The package's kernels as PTX for sm_<arch> (a child process: numba's caches hold one capability)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(arch)], capture_output=True, text=True, env=env,
                         timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"compiling the kernels for sm_{arch} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def assemble(ptx_path: Path, arch: int, ptxas: str) -> tuple[Path, dict]:
    """``ptxas -v`` (default optimisation, as the driver's JIT) into a cubin; its resource report."""
    cubin = ptx_path.with_suffix(f".sm_{arch}.cubin")
    out = subprocess.run([ptxas, f"-arch=sm_{arch}", "-v", "-o", str(cubin), str(ptx_path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx_path.name}: {out.stderr[-2000:]}")
    return cubin, parse_ptxas(out.stdout + out.stderr)


def disassemble(cubin: Path, nvdisasm: str, dump: Path | None = None) -> dict:
    out = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / (cubin.stem + ".sass")).write_text(out.stdout)
    return parse_sass(out.stdout)


def samples_cubin(samples: Path, arch: int, nvcc: str, work: Path, gl_include: str | None,
                  fast_math: bool = False) -> tuple[Path, dict]:
    """cuda-samples' nbody kernels for sm_<arch>, with the flags the acceptance builds ``nbody`` with
    (``fast_math``: its second build's, with ``-use_fast_math``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_acceptance import SAMPLES_FAST_MATH_FLAGS, SAMPLES_NVCC_FLAGS, samples_source

    cubin = work / f"cuda-samples{'-fast-math' if fast_math else ''}.sm_{arch}.cubin"
    inc = [f"-I{samples / 'Common'}"] + ([f"-I{gl_include}"] if gl_include else [])
    flags = [*SAMPLES_NVCC_FLAGS, *(SAMPLES_FAST_MATH_FLAGS if fast_math else ())]
    argv = [nvcc, *flags, "-cubin", f"-arch=sm_{arch}", *inc, "-Xptxas", "-v", "-o", str(cubin),
            str(samples_source(samples) / "bodysystemcuda.cu")]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"nvcc failed on cuda-samples: {out.stderr[-2000:]}")
    return cubin, parse_ptxas(out.stdout + out.stderr)


def figures(kernel: Kernel, arch: int, res: dict, sass: tuple[list[Instr], dict[str, int]]) -> dict:
    instrs, labels = sass
    row = {"kernel": kernel.name, "arch": f"sm_{arch}", "block": kernel.block, **res,
           "sass_instructions": len(instrs),
           **occupancy(arch, res["registers"], res["smem"] + kernel.dynamic_smem, kernel.block)}
    if kernel.marker:
        loop = inner_loop(instrs, labels, kernel.marker)
        row["item"] = kernel.item
        row["inner_loop"] = loop
        row["per_item"] = loop["per_item"] if loop else None
    return row


def _one(entries: dict, symbol: str) -> tuple[str, dict]:
    """The entry of ``entries`` (ptxas report or SASS) whose mangled name starts with or contains ``symbol``."""
    hits = [k for k in entries if k.startswith(symbol) or symbol in k]
    if len(hits) != 1:
        raise RuntimeError(f"expected one function matching {symbol!r}, found {hits}")
    return hits[0], entries[hits[0]]


def measure(archs=ARCHS, samples: Path | None = DEFAULT_SAMPLES, gl_include: str | None = None,
            only: str | None = None, dump: Path | None = None) -> dict:
    """Compile, assemble and disassemble everything; the result document (see the module docstring)."""
    tools = {t: find_tool(t) for t in ("ptxas", "nvdisasm", "nvcc")}
    missing = [t for t in ("ptxas", "nvdisasm") if not tools[t]]
    if missing:
        raise RuntimeError(f"not found: {', '.join(missing)} (the CUDA toolkit; nvdisasm also from PyPI: "
                           f"pip install nvidia-cuda-nvdisasm)")
    import numba
    from importlib.metadata import version

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-static-") as tmp:
        work = Path(tmp)
        for arch in archs:
            ptx = numba_ptx(arch)
            for kernel in KERNELS:
                if only and not re.search(only, kernel.name):
                    continue
                path = work / (re.sub(r"[^\w]+", "_", kernel.name) + ".ptx")
                path.write_text(ptx[kernel.name])
                cubin, res = assemble(path, arch, tools["ptxas"])
                (entry, report), = res.items()
                rows.append(figures(kernel, arch, report, disassemble(cubin, tools["nvdisasm"], dump)[entry]))
            if samples is not None and (samples / "Common").is_dir() and tools["nvcc"]:
                for fast_math in (False, True):
                    cubin, res = samples_cubin(samples, arch, tools["nvcc"], work, gl_include, fast_math)
                    sass = disassemble(cubin, tools["nvdisasm"], dump)
                    for kernel in SAMPLES:
                        if kernel.name.endswith(FAST_MATH) != fast_math:
                            continue
                        entry, report = _one(res, SAMPLES_SYMBOLS[kernel.name.split()[2]])
                        rows.append(figures(kernel, arch, report, sass[entry]))
    return {
        "schema": "pympi_gpu.gpu_static/1",
        "date": datetime.date.today().isoformat(),
        "method": ("numba-cuda -> PTX for the launch's types; ptxas -arch=sm_XX (default -O3) -> cubin; "
                   "nvdisasm. per_item: SASS instructions from the innermost loop's head label through its "
                   "back-edge branch (slow-path call sequences included), over the instances of the item's "
                   "marker instruction in it; occupancy: theoretical, at the launch's block size"),
        "tools": {"ptxas": tool_version(tools["ptxas"]), "nvdisasm": tool_version(tools["nvdisasm"]),
                  "nvcc": tool_version(tools["nvcc"]) if tools["nvcc"] else None,
                  "numba": numba.__version__, "numba-cuda": _version_or_none(version, "numba-cuda")},
        "sources_sha256": sources_digest(),
        "cuda_samples": str(samples) if samples is not None and (samples / "Common").is_dir() else None,
        "kernels": rows,
    }


def _version_or_none(version, name):
    try:
        return version(name)
    except Exception:  # noqa: BLE001 - not installed
        return None


def table(doc: dict) -> str:
    lines = [f"{'kernel':<36} {'arch':<6} {'regs':>4} {'spill':>5} {'smem':>6} {'block':>5} {'occ':>5} "
             f"{'limit':<13} {'per item':>9}  item"]
    for r in doc["kernels"]:
        per = f"{r['per_item']:.2f}" if r.get("per_item") else "-"
        lines.append(f"{r['kernel']:<36} {r['arch']:<6} {r['registers']:>4} "
                     f"{r['spill_stores'] + r['spill_loads']:>5} {r['smem']:>6} {r['block']:>5} "
                     f"{r['occupancy']:>5.2f} {r['limited_by']:<13} {per:>9}  {r.get('item') or ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, action="append", choices=sorted(SM_LIMITS),
                    help="compute capability as 80, 90 (default: both)")
    ap.add_argument("--samples", type=Path, default=DEFAULT_SAMPLES,
                    help="cuda-samples checkout (Common/, Samples/5_Domain_Specific/nbody)")
    ap.add_argument("--gl-include", default=None,
                    help="where GL/gl.h is, if not in the compiler's own search path (the acceptance's "
                         "carried GL root: CARRY/gl/root/usr/include)")
    ap.add_argument("--only", default=None, metavar="REGEX", help="only the package kernels whose name matches")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--dump", type=Path, default=None, metavar="DIR", help="also write each cubin's SASS there")
    args = ap.parse_args(argv)
    try:
        doc = measure(tuple(args.arch or ARCHS), args.samples, args.gl_include, args.only, args.dump)
    except RuntimeError as exc:
        print(f"gpu_static: {exc}", file=sys.stderr)
        return 2
    print(table(doc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
