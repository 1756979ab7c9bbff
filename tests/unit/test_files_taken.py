"""A directory removed between the watcher's last look and a write (the race under `rm -rf out`).

`OutputsKept` looks at the claimed files before the writers due at a step;
`rm -rf out` can come after that look and before the frame or checkpoint
write, which then fails with ENOENT.  The run must still say the cause (the
files were removed) and save the state to a name of its own, not try the
removed directory again ("the state ... could not be saved either").  The
race is made certain here by a writer that removes the directory between
the two.
"""

from __future__ import annotations

import shutil

import pytest

from pympi_gpu.cli.simulation import OutputsKept
from pympi_gpu.nbody.loop import Checkpoints, Frames, RunOptions, Writer, run
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt
from pympi_gpu.run.outputs import OutputError


class RemoveAt(Writer):
    """Removes ``directory`` (as `rm -rf`) at step ``step``: after the watcher, before the writer."""

    def __init__(self, step: int, directory):
        self.every, self.step, self.directory = step, step, directory

    def write(self, run) -> None:
        if run.system.timestep == self.step:
            shutil.rmtree(self.directory)


@pytest.mark.parametrize("taken_before", ["frame", "checkpoint"])
def test_a_write_into_a_directory_removed_after_the_look_says_so_and_saves_elsewhere(tmp_path, monkeypatch,
                                                                                     taken_before):
    from mpi4py import MPI

    from pympi_gpu.nbody import dump
    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays
    from pympi_gpu.run.claims import Claim

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    claim = Claim("pympi-nbody")
    claim.beside("--checkpoint", "out/c.npz", "busy")
    claim.in_place("--dump", "out/d.extxyz", "busy")
    config = LjConfig(cells=3)
    cart = make_cart(MPI.COMM_SELF)
    writer = dump.open_dump("out/d.extxyz", config.box)
    # the directory goes at step 20, a frame's (every 10; checkpoints every 15), or at 45, a checkpoint's
    # (no frame after step 0): after the watcher's look at that step, before the write
    at = 20 if taken_before == "frame" else 45
    ckpt = Checkpoints("out/c.npz", 15, "pympi-nbody-lj-108.ckpt.npz")
    frames = Frames(10 if taken_before == "frame" else 1000, writer, "out/d.extxyz")
    written = [frames, ckpt] if taken_before == "frame" else [ckpt, frames]
    writers: list = [RemoveAt(at, out), *written]
    writers.insert(0, OutputsKept(cart, claim, writers, rows_to_file=False))
    try:
        system = LjSystem(cart, config, *initial_arrays(config, brick_of(config.box, (1, 1, 1), (0, 0, 0))))
        with pytest.raises(OutputError) as raised:
            run(cart, system, RunOptions(steps=100, checkpoint="out/c.npz", checkpoint_every=15,
                                         stop_checkpoint="pympi-nbody-lj-108.ckpt.npz"), writers)
    finally:
        cart.Free()
        writer.close()
        claim.release()
    message = str(raised.value)
    assert message.startswith("--checkpoint 'out/c.npz' (its lock file) and --dump 'out/d.extxyz' were removed "
                              "during the run with their directory 'out', which a run never makes again; the "
                              f"state at step {at} is saved in pympi-nbody-lj-108.ckpt.npz"), message
    assert "could not be saved" not in message and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pympi-nbody-lj-108.ckpt.npz"]
    assert lj_ckpt.read_file("pympi-nbody-lj-108.ckpt.npz")[0]["step"] == at
