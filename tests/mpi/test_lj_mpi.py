"""LJ over MPI ranks: run under ``mpiexec -n 2`` and ``-n 3`` (and 4, 8 by hand) with ``--with-mpi``.

Every check compares the run over the world's bricks with the same run on
COMM_SELF (one brick, ghosts are periodic images only).  They differ only in
the order in which pair forces are summed, so they agree to round-off that the
chaotic dynamics amplifies slowly: after 60 steps positions agree to 1e-11
sigma and thermo to 1e-11 relative (measured: 4e-15 and 1e-15 at 2, 3, 4 and
8 ranks; the bounds leave room for other rank grids and compilers).
"""

import dataclasses

import numpy as np
import pytest

from pympi_gpu.device.device import CPU
from pympi_gpu.nbody.lj import checkpoint as ckpt
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays
from pympi_gpu.nbody.loop import RunOptions, simulate

from .halo_checks import reverse

pytestmark = pytest.mark.mpi(min_size=2)

POS_TOL = 1e-11
THERMO_TOL = 1e-11


def _run(comm, config, options, drift=(0.0, 0.0, 0.0), restart=None, device=CPU):
    """Run ``config`` with ``options`` over comm's bricks on ``device``; return (record, whole system by id on
    every rank)."""
    cart = make_cart(comm)
    system = None
    try:
        brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        if restart is None:
            x, v, ids = initial_arrays(config, brick)
            v = v + np.array(drift)
            system = LjSystem(cart, config, x, v, ids, device=device)
        else:
            meta, local = ckpt.load(cart, restart, lambda m: config.box, cart.Get_topo()[0])
            from pympi_gpu.nbody.lj.record import Thermo

            init = Thermo(**{**meta["initial"], "momentum": tuple(meta["initial"]["momentum"])})
            system = LjSystem(cart, config, local["x"], local["v"], local["id"], local["f"], timestep=meta["step"],
                              initial=init, device=device, reference=local.get("x0"), built_at=meta.get("built_at"))
        run = simulate(cart, system, options)
        full = ckpt.gather(cart, system.atoms.owned())
        return run, cart.bcast(full, root=0)
    finally:
        if system is not None:
            system.close()
        cart.Free()


def _close(a, b, box):
    d = a["x"] - b["x"]
    d -= box * np.round(d / box)
    return float(np.abs(d).max()), float(np.abs(a["v"] - b["v"]).max())


@pytest.mark.parametrize("cells", [5, 6])
def test_ranks_agree_with_one_brick(cells):
    """5^3 cells make 2.8-sigma bricks at 3 ranks (the thinnest the halo allows); 6^3 uneven counts."""
    from mpi4py import MPI

    config = LjConfig(cells=cells)
    options = RunOptions(steps=60, thermo_every=20)
    run, full = _run(MPI.COMM_WORLD, config, options)
    ref, rfull = _run(MPI.COMM_SELF, config, options)
    assert run.grid == tuple(MPI.Compute_dims(MPI.COMM_WORLD.Get_size(), 3))
    assert sum(run.atoms_per_rank) == config.atoms
    assert np.array_equal(full["id"], np.arange(1, config.atoms + 1))
    dx, dv = _close(full, rfull, config.box)
    assert dx < POS_TOL and dv < POS_TOL
    assert [t.step for t in run.thermo] == [0, 20, 40, 60]
    for a, b in zip(run.thermo, ref.thermo):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=THERMO_TOL, abs=1e-12)
    # step 0 is LAMMPS's bench/in.lj: the lattice energy per atom
    assert run.thermo[0].e_pair == pytest.approx(-6.7733681, abs=5e-8)
    assert run.rebuilds >= 3  # the lists were rebuilt, so atoms migrated and ghosts were redrawn
    assert run.neighbors_per_atom == ref.neighbors_per_atom  # each pair listed once over all ranks
    assert run.momentum_change < 1e-12 * config.atoms


def test_mixed_precision_ranks_agree_with_one_brick_and_with_double():
    """``--precision mixed`` over the world's bricks and on one: after 100 steps the thermo within 1e-6 of each
    other (their sums in single precision are taken in other orders), and within 1e-5 of the double run's."""
    from mpi4py import MPI

    config = LjConfig(cells=5, precision="mixed")
    options = RunOptions(steps=100, thermo_every=50)
    run, full = _run(MPI.COMM_WORLD, config, options)
    ref, rfull = _run(MPI.COMM_SELF, config, options)
    double, _ = _run(MPI.COMM_SELF, LjConfig(cells=5), options)
    assert [t.step for t in run.thermo] == [0, 50, 100] and run.rebuilds >= 3
    for a, b, c in zip(run.thermo, ref.thermo, double.thermo):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-6, abs=1e-6), f
            assert getattr(a, f) == pytest.approx(getattr(c, f), rel=1e-5, abs=1e-5), f
    dx, dv = _close(full, rfull, config.box)
    assert dx < 1e-5 and dv < 1e-5


def test_atoms_cross_several_bricks():
    """A uniform drift carries every atom across several bricks and the periodic boundary.

    Galilean invariance: the drifting run's relative motion equals the resting
    run's, and the total momentum (N * drift) stays what it was.
    """
    from mpi4py import MPI

    config, options = LjConfig(cells=5), RunOptions(steps=60)
    drift = (9.0, -7.0, 5.0)  # 60 steps * 0.005 * 9 = 2.7 sigma: across a 2.8-sigma brick and more
    run, full = _run(MPI.COMM_WORLD, config, options, drift=drift)
    ref, rfull = _run(MPI.COMM_SELF, config, options, drift=drift)
    dx, dv = _close(full, rfull, config.box)
    assert dx < POS_TOL and dv < POS_TOL
    moved = np.array(drift) * options.steps * config.dt
    start = initial_arrays(config, brick_of(config.box, (1, 1, 1), (0, 0, 0)))[0]
    shift = full["x"] - start - moved
    shift -= config.box * np.round(shift / config.box)
    assert np.abs(shift).max() < 1.0  # each atom went with the flow (thermal motion < 1 sigma)
    assert np.allclose(run.thermo[-1].momentum, np.array(drift) * config.atoms, rtol=1e-12)
    assert run.rebuilds >= 10


def _restart_case(comm, config, path, steps, device=CPU):
    """The run of ``steps`` steps straight, then half of it with a checkpoint at ``path`` and a restart to the
    end: ``(straight, first half, resumed, whole systems straight and resumed, the checkpoint's x and x0)``."""
    straight, full = _run(comm, config, RunOptions(steps=steps), device=device)
    first, _ = _run(comm, config, RunOptions(steps=steps // 2, checkpoint=path), device=device)
    written = ckpt.read_file(path)[1] if comm.Get_rank() == 0 else None
    resumed, full_r = _run(comm, config, RunOptions(steps=steps), restart=path, device=device)
    return straight, first, resumed, full, full_r, written


def _continues(case, steps):
    """The restart continued the run that wrote no checkpoint, bit for bit (and its first thermo row is the
    checkpointing run's last), from a checkpoint between two rebuilds."""
    straight, first, resumed, full, full_r, written = case
    assert resumed.first_step == steps // 2 and resumed.last_step == steps
    for k in ("x", "v", "f"):
        assert np.array_equal(full[k], full_r[k]), k
    assert resumed.thermo[-1] == straight.thermo[-1]
    assert resumed.thermo[0] == first.thermo[-1]
    assert resumed.energy_drift == straight.energy_drift
    assert straight.rebuilds >= 3
    if written is not None:
        assert not np.array_equal(written["x"], written["x0"])  # the atoms had moved since the last rebuild


@pytest.mark.parametrize("threads, precision", [(1, "fp64"), (2, "fp64"), (1, "mixed"), (2, "mixed")])
def test_restart_continues_bit_for_bit(tmp_path_factory, agree, threads, precision):
    """Writing a checkpoint changes nothing, and a restart from it continues the run bit for bit: it makes
    the run's last rebuild again (the atoms on their ranks in their order, the ghosts, the lists) from the
    positions kept in it, then moves the atoms where they are (issue 60, item 21: a checkpoint made the next
    step rebuild, and the run it continued differed in the last digits).  Over the world's ranks and on one
    (COMM_SELF), with one thread a rank (half lists) and two (full lists), in double and mixed precision."""
    import numba
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    base = comm.bcast(str(tmp_path_factory.mktemp("lj") / "lj") if comm.Get_rank() == 0 else None)
    config = LjConfig(cells=5, newton=threads == 1, precision=precision)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        world = _restart_case(comm, config, base + ".npz", 30)
        alone = _restart_case(MPI.COMM_SELF, config, f"{base}.{comm.Get_rank()}.npz", 30)
    finally:
        numba.set_num_threads(old)
    agree(comm, lambda: (_continues(world, 30), _continues(alone, 30)))


@pytest.mark.cudasim
def test_gpu_restart_continues_bit_for_bit(tmp_path_factory, agree):
    """The same on the GPU path (the simulator, full lists), over the world's ranks (one rank's:
    tests/gpu/test_lj_gpu.py::test_gpu_restart_bit_for_bit)."""
    from mpi4py import MPI

    from pympi_gpu.device.device import Device

    comm = MPI.COMM_WORLD
    base = comm.bcast(str(tmp_path_factory.mktemp("lj") / "lj") if comm.Get_rank() == 0 else None)
    config = LjConfig(cells=5, newton=False, temperature=3.0, skin=0.1)  # hot, a thin skin: rebuilds in 10 steps
    device = Device(backend="gpu", transport="host", simulated=True)
    world = _restart_case(comm, config, base + ".npz", 10, device)
    agree(comm, lambda: _continues(world, 10))


@pytest.mark.parametrize("cells, newton, precision", [(5, True, "fp64"), (6, True, "fp64"), (5, False, "fp64"),
                                                      (5, True, "mixed")],
                         ids=["5 half", "6 half", "5 full", "5 half mixed"])
def test_the_kernels_mpi_calls_are_pythons(cells, newton, precision, monkeypatch):
    """A step's MPI calls made by its compiled kernels (persistent requests started from numba) and by
    Python between kernel pieces (``PYMPI_COMPILED_MPI=0``): the same states bit for bit, thermo, rebuilds
    and traffic, under whichever MPI runs the tier (mpi4py's MPICH here; Open MPI and Intel MPI in
    tests/cli/test_mpi_matrix.py); half lists and full lists (several threads: the same step path), and
    mixed precision's programs."""
    config = LjConfig(cells=cells, newton=newton, precision=precision)
    kernels = _kernels_as_python(config, RunOptions(steps=60, thermo_every=20), 3, monkeypatch)
    assert kernels.phases.waiting.max > 0 and kernels.phases.communication.max > 0


def _kernels_as_python(config, options, rebuilds, monkeypatch):
    """Run ``config`` over the world's bricks with the kernels making the MPI calls, then with Python
    (``PYMPI_COMPILED_MPI=0``): the same states bit for bit, thermo, rebuilds (at least ``rebuilds``) and
    traffic, the messages counted by the kernels or by Python.  Returns the kernels' record."""
    from mpi4py import MPI

    kernels, full_k = _run(MPI.COMM_WORLD, config, options)
    python, full_p = _run(MPI.COMM_WORLD, config, options, device=dataclasses.replace(CPU, compiled_mpi=False))
    assert (kernels.step_mpi, python.step_mpi) == ("kernels", "python")
    for k in ("x", "v", "f", "id"):
        assert np.array_equal(full_k[k], full_p[k]), k
    assert kernels.thermo == python.thermo and kernels.rebuilds == python.rebuilds >= rebuilds
    assert kernels.traffic == python.traffic
    return kernels


def test_a_compiled_rebuild_grows_short_buffers_as_python_does(monkeypatch):
    """The rebuild as one compiled call (``rebuild_cpu``), alone or in a batch of steps (``steps_cpu``),
    with every buffer it writes made short before each rebuild and each batch: it stops, the buffer grows
    and it goes on (in Python, after a batch; receiving the messages already on their way where a probe
    found the room short), and the run equals Python's pieces (``PYMPI_COMPILED_MPI=0``) bit for bit,
    with the same traffic; every kind of short buffer was met on some rank, and a batch's rebuild
    stopped at one."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.cpu import atoms as host_atoms
    from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
    from pympi_gpu.nbody.lj.cpu.lists import VerletLists

    met, in_batch = set(), set()
    compiled, batch, rebuild_brick = (host_atoms.HostAtoms._rebuild_compiled, host_atoms.HostAtoms._run_steps,
                                      rebuild_cpu.rebuild_brick)

    def noted(*args):
        done = rebuild_brick(*args)
        met.add(rebuild_cpu.GROW.get(done, "done"))
        return done

    def starve(atoms):
        n = atoms.nlocal
        atoms._work["rows"] = np.empty((n, 10))  # no room for the atoms that come
        atoms._spare, atoms._sort_space = host_atoms._Rows(1), None
        atoms._verlet = VerletLists((1, 1))
        h = atoms.halo
        h._leaving, h._msg, h._kernel.rows = np.empty((0, 10)), np.empty((0, 4)), np.empty((0, 4))
        h._plan_rows = np.zeros(1, np.int64)
        atoms._bound, h.version = None, h.version + 1  # (the records hold the buffers replaced)

    def starved(self, done=None, check=False):
        if done is None:  # (not a rebuild a batch began)
            starve(self)
        compiled(self, done, check)

    def starved_batch(self, most, h):
        starve(self)
        code, taken, done = batch(self, most, h)
        in_batch.add(rebuild_cpu.GROW.get(done, "done"))
        return code, taken, done

    monkeypatch.setattr(rebuild_cpu, "rebuild_brick", noted)
    monkeypatch.setattr(host_atoms.HostAtoms, "_rebuild_compiled", starved)
    monkeypatch.setattr(host_atoms.HostAtoms, "_run_steps", starved_batch)
    _kernels_as_python(LjConfig(cells=5), RunOptions(steps=150, thermo_every=50), 10, monkeypatch)
    met, in_batch = (set().union(*MPI.COMM_WORLD.allgather(m)) for m in (met, in_batch))
    assert met | in_batch == {"done", *rebuild_cpu.GROW.values()}, (met, in_batch)
    assert in_batch - {"done"}, in_batch  # a batch's rebuild stopped short, and Python finished it


def test_the_warmups_compile_what_a_run_calls():
    """``rebuild_cpu.warmup``, ``kernels_cpu.warmup`` and ``steps_cpu.warmup`` (the command's, before the
    run) compile the one signature of the rebuild and of a batch of steps that the run calls: none compiles
    inside the timed steps."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.cpu import kernels as kernels_cpu
    from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
    from pympi_gpu.nbody.lj.cpu import steps as steps_cpu

    config = LjConfig(cells=5)
    forces = kernels_cpu.force_kernels(config.pair_term)
    rebuild_cpu.warmup()
    kernels_cpu.warmup(forces)
    steps_cpu.warmup(forces)
    kernels = (rebuild_cpu.rebuild_brick, steps_cpu.kernel(forces))
    warmed = [set(k.signatures) for k in kernels]
    run, _ = _run(MPI.COMM_WORLD, config, RunOptions(steps=40))
    assert run.step_mpi == "kernels" and run.rebuilds >= 3
    assert [len(w) for w in warmed] == [1, 1]
    assert [set(k.signatures) for k in kernels] == warmed


def test_the_warm_up_where_the_kernels_call_mpi_compiles_all_a_run_calls_and_no_more(monkeypatch):
    """The command's warm-up where the step's kernels make its MPI calls (``steps_cpu.warm`` with
    ``kernels_call_mpi``, the run's one path) compiles the step's program, the rebuild and the batch of
    steps; the run then calls from Python no other kernel of the CPU modules (each replaced by one that
    records the call: what the warm-up left out) and compiles no other signature of those three."""
    from mpi4py import MPI
    from numba.core.dispatcher import Dispatcher

    from pympi_gpu.nbody.lj.cpu import kernels as kernels_cpu
    from pympi_gpu.nbody.lj.cpu import lists as lists_cpu
    from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
    from pympi_gpu.nbody.lj.cpu import steps as steps_cpu
    from pympi_gpu.nbody.lj.system import kernels_call_mpi

    config = LjConfig(cells=5)
    assert kernels_call_mpi(MPI.COMM_WORLD)
    steps_cpu.warm(config.pair_term, kernels_call_mpi=True)
    forces = kernels_cpu.force_kernels(config.pair_term)
    warmed = {k: set(k.signatures) for k in (forces.run_ops, rebuild_cpu.rebuild_brick, steps_cpu.kernel(forces))}
    called = []

    def recording(name, kernel):
        def call(*args, **kw):
            called.append(name)
            return kernel(*args, **kw)
        return call

    for module in (kernels_cpu, lists_cpu, rebuild_cpu, steps_cpu):
        for name, obj in list(vars(module).items()):
            if isinstance(obj, Dispatcher) and obj not in warmed:
                monkeypatch.setattr(module, name, recording(f"{module.__name__}.{name}", obj))
    run, _ = _run(MPI.COMM_WORLD, config, RunOptions(steps=40))
    assert run.step_mpi == "kernels" and run.rebuilds >= 3
    assert called == []
    assert {k: set(k.signatures) for k in warmed} == warmed


def _counting_batches(monkeypatch):
    """``HostAtoms.steps`` counted: a list of the steps each call took, on this rank."""
    from pympi_gpu.nbody.lj.cpu import atoms as host_atoms

    taken, steps = [], host_atoms.HostAtoms.steps

    def counted(self, most):
        times = steps(self, most)
        taken.append(len(times))
        return times

    monkeypatch.setattr(host_atoms.HostAtoms, "steps", counted)
    return taken


@pytest.mark.parametrize("one_at_a_time", ["no rank", "rank 0"])
def test_quiet_steps_in_one_call_are_the_steps_one_at_a_time(one_at_a_time, monkeypatch):
    """The steps between two thermo rows taken in compiled calls of many steps (``HostAtoms.steps``, a call
    until a rebuild) equal the steps taken one call each (``BATCH_SECONDS = 0``) bit for bit: states,
    thermo, rebuilds, traffic.  Also where one rank takes its steps one at a time and the others batch them:
    their steps make the same MPI calls, so the ranks need not agree on it."""
    from mpi4py import MPI

    from pympi_gpu.nbody import loop

    comm = MPI.COMM_WORLD
    config, options = LjConfig(cells=5), RunOptions(steps=120, thermo_every=40)
    taken = _counting_batches(monkeypatch)
    # (batches as long as the rows and rebuilds allow, however loaded the machine)
    monkeypatch.setattr(loop, "BATCH_SECONDS", 0.0 if one_at_a_time == "rank 0" and comm.rank == 0 else 60.0)
    batched, full_b = _run(comm, config, options)
    calls = len(taken)
    monkeypatch.setattr(loop, "BATCH_SECONDS", 0.0)
    single, full_s = _run(comm, config, options)
    assert len(taken) == calls  # none batched
    for k in ("x", "v", "f", "id"):
        assert np.array_equal(full_b[k], full_s[k]), k
    assert batched.thermo == single.thermo and batched.rebuilds == single.rebuilds >= 5
    assert batched.traffic == single.traffic
    assert batched.median_step_time > 0
    batching = comm.allgather(calls > 0)
    assert batching == [one_at_a_time == "no rank" or r > 0 for r in range(comm.size)]
    if calls:  # batches end at rebuilds and before rows (and the first step is one): one a rebuild or row
        assert sum(taken) >= 100 and calls <= batched.rebuilds + 4 and max(taken) > 1, (calls, taken)


def test_rebuilds_keep_the_halo_messages_and_the_batch_goes_on(monkeypatch):
    """A rebuild whose rows fit the halo's message regions keeps its persistent requests, whatever the
    layout: one message each way where a stage's two neighbours are one rank (2 ranks), two where they
    are two ranks (3 ranks, each message its own region).  So the plans make the requests a few times in
    a run of many rebuilds, and a batch of quiet steps goes on through its rebuilds instead of returning
    to Python for new ones (with regions of the rows exactly, 3 ranks made them at nearly every rebuild)."""
    from mpi4py import MPI

    from pympi_gpu.nbody import loop
    from pympi_gpu.nbody.lj.cpu import halo as halo

    comm = MPI.COMM_WORLD
    made, init = [], halo._Stage.__init__

    def counted(self, *args, **kwargs):
        made.append(args[1])
        init(self, *args, **kwargs)

    monkeypatch.setattr(halo._Stage, "__init__", counted)
    taken = _counting_batches(monkeypatch)
    monkeypatch.setattr(loop, "BATCH_SECONDS", 60.0)
    run, _ = _run(comm, LjConfig(cells=5), RunOptions(steps=300, thermo_every=300))
    stages = len(set(made))  # the remote stages (each made by the first plan)
    assert stages >= 1 and run.rebuilds >= 25
    assert len(made) <= 3 * stages, (len(made), run.rebuilds)
    assert len(taken) <= 8, (len(taken), run.rebuilds)


def test_a_stop_request_ends_a_batch_on_every_rank_at_the_same_step(monkeypatch):
    """One rank's stop request (from step 37 on) travels in the agreement of the first step after it is
    seen, batched or not: every rank stops after that step, within a batch of the request, with the state
    equal to an uninterrupted run's at that step."""
    import signal

    from mpi4py import MPI

    from pympi_gpu.nbody import loop

    monkeypatch.setattr(loop, "BATCH_SECONDS", 60.0)
    comm = MPI.COMM_WORLD
    config = LjConfig(cells=5)
    cart = make_cart(comm)
    brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
    x, v, ids = initial_arrays(config, brick)
    system = LjSystem(cart, config, x, v, ids)
    taken, seen = _counting_batches(monkeypatch), []
    late = comm.rank == comm.size - 1

    def request():  # polled before each step or batch
        if late and system.timestep >= 37:
            seen.append(system.timestep)
            return signal.SIGTERM
        return 0

    try:
        run = simulate(cart, system, RunOptions(steps=400, thermo_every=400), stop_requested=request)
        full = cart.bcast(ckpt.gather(cart, system.atoms.owned()), root=0)
    finally:
        system.close()
        cart.Free()
    longest = max(comm.allgather(max(taken)))
    assert run.stopped_by == "SIGTERM" and longest > 1
    stopped, first = comm.allgather(run.last_step), comm.bcast(seen[0] if late else None, root=comm.size - 1)
    assert stopped == [first + 1] * comm.size and first < 37 + longest, (stopped, first, taken)
    straight, full_s = _run(comm, config, RunOptions(steps=stopped[0], thermo_every=400))
    for k in ("x", "v", "id"):
        assert np.array_equal(full[k], full_s[k]), k


def _state_after(config, steps):
    """The whole system (x, v, ids) after ``steps`` steps on one brick: a lattice that has melted a little."""
    from mpi4py import MPI

    run, full = _run(MPI.COMM_SELF, LjConfig(cells=config.cells), RunOptions(steps=steps))
    return full["x"], full["v"], full["id"]


def _forces_at(comm, config, x, v, ids):
    """Forces (by id, on every rank), pair count and ghost-row forces of the state (x, v, ids) over comm's bricks."""
    from pympi_gpu.nbody.lj.domain import owner_coords, wrap

    cart = make_cart(comm)
    system = None
    try:
        brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        xw = wrap(x, config.box)
        mine = np.all(owner_coords(xw, config.box, brick.dims) == np.array(brick.coords), axis=1)
        system = LjSystem(cart, config, xw[mine], v[mine], ids[mine]).atoms
        system.rebuild()
        system.f[...] = 0.0
        system.pair_forces(system.f, eflag=True)
        ghost_share = float(np.abs(system.f[system.nlocal:]).sum())
        if config.newton:
            reverse(system.halo, system.f)
        full = cart.bcast(ckpt.gather(cart, system.owned()), root=0)
        pairs = cart.allreduce(system.pairs)
        ghost_share = cart.allreduce(ghost_share)
        e = cart.allreduce(system.energy)
        return full["f"], pairs, ghost_share, e
    finally:
        if system is not None:
            system.close()
        cart.Free()


@pytest.mark.parametrize("cells", [5, 6])
def test_reverse_forces_equal_one_brick(cells):
    """Newton across bricks: after the reverse communication the owned atoms carry the forces of one
    brick (periodic images only) and of the full lists without Newton, and every pair is counted once
    (the pair count and the energy of the 1-rank run).  6^3 cells split unevenly over 3 ranks."""
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.verify import reference_forces

    config = LjConfig(cells=cells)
    x, v, ids = _state_after(config, 30)
    f, pairs, ghost_share, e = _forces_at(MPI.COMM_WORLD, config, x, v, ids)
    f1, pairs1, _, e1 = _forces_at(MPI.COMM_SELF, config, x, v, ids)
    ffull, pairs_full, ghost_full, e_full = _forces_at(MPI.COMM_WORLD, LjConfig(cells=cells, newton=False),
                                                       x, v, ids)
    ref, mag = reference_forces(x, config.box, config.cutoff, np.arange(config.atoms))
    assert ghost_share > 1.0  # the ghosts did gather forces, which only the reverse pass brings home
    assert ghost_full == 0.0
    assert pairs == pairs1 == pairs_full
    assert e == pytest.approx(e1, rel=1e-13) and e == pytest.approx(e_full, rel=1e-13)
    for got in (f, f1, ffull):
        assert np.all(np.linalg.norm(got - ref, axis=1) <= 1e-13 * mag)
    assert np.abs(f - f1).max() < 1e-12


def test_reverse_sums_every_copy_of_a_ghost():
    """The reverse pass alone (halo_checks.reverse, the step's kernels over the halo's plan): each ghost row carries a value fixed by its atom's id; afterwards every atom
    holds that value times the number of its ghost copies over all ranks (edges and corners arrive
    through forwarding, so their forces must travel back the same way)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    config = LjConfig(cells=5)
    cart = make_cart(comm)
    try:
        brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        system = LjSystem(cart, config, *initial_arrays(config, brick)).atoms
        system.rebuild()
        n = system.nlocal
        gh = system.gid[n:]
        f = np.zeros_like(system.pos)
        f[n:] = gh[:, None] * np.array([1.0, -2.0, 0.5])
        f[:n] = 1000.0
        reverse(system.halo, f)
        copies = np.bincount(np.concatenate(cart.allgather(gh)), minlength=config.atoms + 1)
        want = 1000.0 + (copies[system.ids] * system.ids)[:, None] * np.array([1.0, -2.0, 0.5])
        assert np.array_equal(f[:n], want)
        assert cart.allreduce(int((copies[system.ids] > 1).sum())) > 0  # some atoms have several copies
        system.close()
    finally:
        cart.Free()
