"""The thermostats' own formulas (nbody/lj/thermostats/), without a process: the registry, the Nose-Hoover
chain against what it must conserve and where it must lead, Langevin's forces against the
fluctuation-dissipation theorem and its counter-based stream, the compiled hooks against the plain
functions.  Runs of the command and LAMMPS: tests/cli/test_thermostats_cli.py."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from pympi_gpu.nbody.lj import thermostats
from pympi_gpu.nbody.lj.thermostats import Bath, Setting, langevin
from pympi_gpu.nbody.lj.thermostats import nose_hoover as nh

SETTING = Setting(temperature=1.5, tdamp=0.5, dt=0.005, atoms=500, seed=87287)


def test_the_registry_names_each_style_once_nve_first():
    styles = thermostats.styles()
    assert list(styles) == ["nve", "nvt", "langevin"] and thermostats.DEFAULT == "nve"
    assert [thermostats.code(n) for n in styles] == [0, 1, 2]
    assert not (styles["nve"].scales or styles["nve"].forces)
    assert styles["nvt"].scales and styles["nvt"].couples and not styles["nvt"].forces
    assert styles["langevin"].forces and not styles["langevin"].scales
    with pytest.raises(ValueError, match="unknown thermostat 'berendsen' \\(known: nve, nvt, langevin\\)"):
        thermostats.style("berendsen")
    assert thermostats.default_tdamp(0.005) == 0.5  # 100 steps, LAMMPS's advice


def test_each_style_writes_the_lammps_fixes_of_the_same_run():
    assert thermostats.style("nve").lammps(SETTING) == ["fix 1 all nve"]
    assert thermostats.style("nvt").lammps(SETTING) == ["fix 1 all nvt temp 1.5 1.5 0.5"]
    assert thermostats.style("langevin").lammps(SETTING) == ["fix 1 all nve", "fix 2 all langevin 1.5 1.5 0.5 87287"]


def _mv2(temperature: float, atoms: int = 500) -> float:
    return temperature * (3 * atoms - 3)


def test_the_chain_at_its_target_leaves_the_velocities_alone():
    """Set up at the target temperature the chain's first thermostat feels no force: the factor is 1, exactly."""
    bath = Bath("nvt", SETTING)
    bath.setup(_mv2(1.5))
    assert bath.state[nh.S_TCUR] == pytest.approx(1.5, rel=1e-15)
    assert bath.style.begin(bath.params, bath.state) == 1.0
    assert bath.state[nh.S_DOT + 1] < 0  # the outer thermostats are pulled by -kT / Q_k, LAMMPS's setup


def test_the_chain_conserves_its_extended_energy_and_leads_to_the_target():
    """Atoms that feel no force but the chain (their kinetic energy only scaled): kinetic energy plus the chain's
    (LAMMPS's ecouple) is conserved to the integrator's error (1.3e-6 after 20,000 steps), and the temperature's
    mean over many damping times is the target's."""
    bath = Bath("nvt", SETTING)
    mv2 = _mv2(3.0)  # twice too hot
    bath.setup(mv2)
    conserved0 = 0.5 * mv2 + bath.coupling()
    temps = []
    for _ in range(20_000):  # 100 damping times
        mv2 *= bath.style.begin(bath.params, bath.state) ** 2
        mv2 *= bath.style.end(bath.params, bath.state, mv2) ** 2
        temps.append(mv2 / (3 * 500 - 3))
    assert (0.5 * mv2 + bath.coupling()) == pytest.approx(conserved0, rel=1e-5)
    assert np.mean(temps[10_000:]) == pytest.approx(1.5, rel=0.02)
    assert bath.state[nh.S_ETA] != 0 and bath.coupling() != 0


def test_langevin_forces_are_the_fluctuation_dissipation_theorems():
    """At rest the random force has mean 0 and variance 2 k T m / (damp dt) per component (uniform numbers
    scaled by sqrt(24 k T m / (damp dt)), LAMMPS's), components and atoms uncorrelated; the drag is -m / damp v."""
    p, key = langevin.params(SETTING), thermostats.Bath("langevin", SETTING).key
    with np.errstate(over="ignore"):
        f = np.array([langevin.force(p, key, 7, i, 0.0, 0.0, 0.0) for i in range(1, 20_001)])
        moving = np.array(langevin.force(p, key, 7, 1, 0.4, -0.2, 0.1)) - f[0]
    variance = 2 * SETTING.temperature / (SETTING.tdamp * SETTING.dt)
    assert np.abs(f.mean(axis=0)).max() < 4 * np.sqrt(variance / len(f))
    assert f.var(axis=0) == pytest.approx([variance] * 3, rel=0.03)
    assert np.abs(np.corrcoef(f.T)[np.triu_indices(3, 1)]).max() < 0.05
    assert np.abs(np.corrcoef(f[:-1, 0], f[1:, 0])[0, 1]) < 0.05
    assert np.abs(f).max() <= np.sqrt(24 * SETTING.temperature / (SETTING.tdamp * SETTING.dt)) / 2
    assert moving == pytest.approx(-np.array([0.4, -0.2, 0.1]) / SETTING.tdamp, rel=1e-12)


def test_langevin_kicks_are_a_pure_function_of_seed_step_and_atom():
    """The same (seed, step, id) gives the same kick whatever else was drawn (any rank count, any restart);
    another step, atom or seed another one."""
    p = langevin.params(SETTING)
    key = Bath("langevin", SETTING).key
    other = Bath("langevin", dataclasses.replace(SETTING, seed=87288)).key
    with np.errstate(over="ignore"):
        ids = np.random.default_rng(1).permutation(np.arange(1, 101))
        shuffled = {int(i): langevin.force(p, key, 12, int(i), 0.0, 0.0, 0.0) for i in ids}
        ordered = {i: langevin.force(p, key, 12, i, 0.0, 0.0, 0.0) for i in range(1, 101)}
        assert shuffled == ordered
        assert langevin.force(p, key, 13, 5, 0, 0, 0) != ordered[5]
        assert langevin.force(p, other, 12, 5, 0, 0, 0) != ordered[5]
        assert ordered[5] != ordered[6]


@pytest.mark.parametrize("name", ["nve", "nvt", "langevin"])
def test_the_compiled_hooks_are_the_functions_bit_for_bit(name):
    """One compiled dispatcher serves every style by its number (the CPU's steps compile it in): its numbers are
    the plain functions', bit for bit."""
    from numba import njit

    begin, end, force = thermostats.hooks()

    @njit
    def step(kind, p, s, key, mv2):
        a = begin(kind, p, s)
        b = end(kind, p, s, mv2)
        return a, b, force(kind, p, key, 9, 17, 0.3, -0.1, 0.2)

    bath = Bath(name, SETTING)
    bath.setup(_mv2(1.2))
    compiled, plain = bath.state.copy(), bath.state.copy()
    got = step(bath.kind, bath.params, compiled, np.uint64(bath.key), _mv2(1.7))
    with np.errstate(over="ignore"):
        want = (bath.style.begin(bath.params, plain), bath.style.end(bath.params, plain, _mv2(1.7)),
                bath.style.force(bath.params, bath.key, 9, 17, 0.3, -0.1, 0.2))
    assert got[:2] == want[:2] and tuple(got[2]) == tuple(float(x) for x in want[2])
    assert np.array_equal(compiled, plain)


def test_a_checkpoints_state_is_the_state_exactly():
    """The chain's state goes into a checkpoint's JSON meta and comes back bit for bit."""
    bath = Bath("nvt", SETTING)
    bath.setup(_mv2(2.0))
    for _ in range(37):
        bath.style.end(bath.params, bath.state, _mv2(1.9) * bath.style.begin(bath.params, bath.state) ** 2)
    back = Bath("nvt", SETTING, json.loads(json.dumps(bath.saved())))
    assert back.restored and np.array_equal(back.state, bath.state)
    back.setup(_mv2(1.0))  # a restored state is not set up again
    assert np.array_equal(back.state, bath.state)
    with pytest.raises(ValueError, match="holds 14 numbers, not 3"):
        Bath("nvt", SETTING, [1.0, 2.0, 3.0])


def test_thermo_columns_carry_econserve_where_the_thermostat_has_an_energy():
    from pympi_gpu.nbody.lj.record import Thermo
    from pympi_gpu.nbody.lj.thermo import HEADER, columns, format_row

    row = Thermo(step=5, temp=1.0, e_pair=-5.0, ke=1.5, etotal=-3.5, press=0.5, momentum=(0.0, 0.0, 0.0))
    assert columns(False).HEADER == HEADER and columns(False).format_row(row) == format_row(row)
    assert row.total_energy == -3.5
    coupled = dataclasses.replace(row, econserve=-3.25)
    assert coupled.total_energy == -3.25
    cols = columns(True)
    assert cols.KEYWORDS[-1] == "Econserve" and cols.HEADER.split()[-1] == "Econserve"
    assert cols.values(coupled) == (5, 1.0, -5.0, 1.5, -3.5, 0.5, -3.25)
    assert cols.format_row(coupled).split()[-1] == "-3.25"
