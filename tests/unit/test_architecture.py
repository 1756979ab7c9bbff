"""The package's layers (docs/architecture.md): no import circle, lazy imports included,
and each layer importing only the layers its package docstring allows.  And the test suite's
own layout (docs/testing.md): every test file in a tier's folder, none importing another."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from helpers.commands import ROOT

PACKAGE = ROOT / "pympi_gpu"

#: layer -> the layers it may import (itself included); "" is the package root (``__version__``)
ALLOWED = {
    "": {""},
    "rng": {"", "rng"},
    "launchers": {"", "launchers"},
    "device": {"", "launchers", "device"},
    "mpi": {"", "launchers", "device", "mpi"},  # device: jitcache, for numba_calls' cached kernels
    "run": {"", "mpi", "device", "run"},
    "pi": {"", "rng", "mpi", "device", "run", "pi"},
    "nbody": {"", "rng", "mpi", "device", "run", "nbody"},
    "nbody.gravity": {"", "rng", "mpi", "device", "run", "nbody", "nbody.gravity"},
    "nbody.lj": {"", "rng", "mpi", "device", "run", "nbody", "nbody.lj"},
    "scale": {"", "mpi", "run", "scale"},
    "cli": {"", "rng", "mpi", "device", "run", "pi", "nbody", "nbody.gravity", "nbody.lj", "scale", "cli"},
    "__main__": {"", "cli"},
}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file, function bodies included."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join(here + ([base] if base else []))
            # ``from pkg import mod`` imports pkg.mod; ``from mod import name`` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(package)
    return {name: imports(name, path, set(found)) for name, path in found.items()}


@functools.cache
def package_graph() -> dict[str, set[str]]:
    return graph()


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> str:
    rest = module.removeprefix("pympi_gpu").lstrip(".")
    if rest.startswith(("nbody.gravity", "nbody.lj")):
        return ".".join(rest.split(".")[:2])
    return rest.split(".")[0]


def test_the_cycle_finder_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "pympi_gpu"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "sub" / "b.py").write_text("from pympi_gpu.sub.a import f\n")
    g = graph(pkg)
    assert g["pympi_gpu.sub.a"] == {"pympi_gpu.sub.b"} and g["pympi_gpu.sub.b"] == {"pympi_gpu.sub.a"}
    assert cycles(g) == [["pympi_gpu.sub.a", "pympi_gpu.sub.b"]]


def test_no_import_circle_anywhere():
    assert cycles(package_graph()) == []


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in modules()} <= set(ALLOWED)


@pytest.mark.parametrize("module", sorted(modules()))
def test_layers_import_only_what_they_may(module):
    allowed = ALLOWED[layer(module)]
    wrong = sorted(t for t in package_graph()[module] if layer(t) not in allowed)
    assert not wrong, f"{module} ({layer(module) or 'root'}) may not import {wrong}"


def test_the_models_do_not_import_each_other():
    g = package_graph()
    for module, targets in g.items():
        if layer(module) in ("nbody.gravity", "nbody.lj"):
            other = "nbody.lj" if layer(module) == "nbody.gravity" else "nbody.gravity"
            assert not [t for t in targets if layer(t) == other], module
        if module in ("pympi_gpu.cli.nbody_gravity", "pympi_gpu.cli.nbody_lj"):
            other = "pympi_gpu.cli.nbody_lj" if module.endswith("gravity") else "pympi_gpu.cli.nbody_gravity"
            assert other not in targets and "pympi_gpu.cli.nbody" not in targets, module


def _decorated_as_kernel(node) -> bool:
    """Decorated with numba's njit, jit, cuda.jit, vectorize or guvectorize: a compiled kernel."""
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = ast.unparse(target)
        if name.split(".")[-1] in ("njit", "jit", "vectorize", "guvectorize"):
            return True
    return False


def test_no_function_outside_the_compiled_kernels_is_longer_than_60_lines():
    """Glue, drivers, commands: small functions a second contributor reads at a glance (issue 29)."""
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _decorated_as_kernel(node):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, long


#: the most arguments a compiled function takes (issue 51): more travel as records (nbody/lj/cpu/records.py)
MOST_ARGUMENTS = 25


def _compiled(node) -> bool:
    """A compiled kernel, or a function compiled into one (``register_jitable``, an ``intrinsic``)."""
    names = {ast.unparse(d.func if isinstance(d, ast.Call) else d).split(".")[-1] for d in node.decorator_list}
    return _decorated_as_kernel(node) or bool(names & {"register_jitable", "intrinsic", "keyed_by_handles"})


def test_no_compiled_function_takes_more_than_25_arguments():
    """The state of a compiled step, batch or rebuild travels as named records, so no argument order is
    long enough to be written out again by hand (was: 109, 65 and 33 positional arguments)."""
    found, wide = 0, []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _compiled(node):
                found += 1
                count = len(node.args.posonlyargs) + len(node.args.args) + len(node.args.kwonlyargs)
                if count > MOST_ARGUMENTS or node.args.vararg:  # (*args: any number)
                    wide.append(f"{name}.{node.name}: {count}" + (" and *args" if node.args.vararg else ""))
    assert found > 100, found  # (the scan sees the kernels)
    assert not wide, wide


def test_a_record_is_made_of_its_fields_by_name():
    from pympi_gpu.nbody.lj.cpu import records

    with pytest.raises(TypeError, match=r"Work: missing \['times'\], unknown \['time'\]"):
        records.make(records.Work, **{k: None for k in records.Work.FIELDS if k != "times"}, time=None)
    for record in (records.Rows, records.Lists, records.Build, records.Plan, records.Mpi, records.Grid,
                   records.Work):
        assert len(record.FIELDS) == len(set(record.FIELDS)) <= MOST_ARGUMENTS, record


def test_launcher_variables_are_written_in_one_module():
    """A launcher's rank and size variables are data of the launcher table, nowhere else in the package."""
    said = {name for name, path in modules().items()
            for var in ("SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")
            if f'"{var}"' in path.read_text()}
    assert said == {"pympi_gpu.launchers"}, said


# ---------------------------------------------------------------- issue 51: settings and private names

def _pympi_settings_read(tree: ast.Module) -> list[str]:
    """The ``PYMPI_*`` variables a module reads from an environment mapping (``environ.get("PYMPI_X")``,
    ``os.getenv``, ``env["PYMPI_X"]``, ``"PYMPI_X" in env``), directly or through a module constant."""
    consts = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
              for t in node.targets if isinstance(t, ast.Name)}

    def named(node) -> str | None:
        value = node.value if isinstance(node, ast.Constant) else consts.get(getattr(node, "id", None))
        return value if isinstance(value, str) and value.startswith("PYMPI_") else None

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            attr = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if attr in ("get", "getenv", "pop", "setdefault", "putenv"):
                key = named(node.args[0])
        elif isinstance(node, ast.Subscript):
            key = named(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            key = named(node.left)
        if key:
            found.append(f"{key} (line {node.lineno})")
    return found


def test_the_settings_detector_sees_every_form_of_read():
    tree = ast.parse('import os\nK = "PYMPI_K"\ndef f(env):\n    return (env.get("PYMPI_A"), os.getenv("PYMPI_B"),\n'
                     '            env["PYMPI_C"], "PYMPI_D" in env, env.get(K), CudaAwareness(True, "PYMPI_E"))\n')
    found = sorted(r.split()[0] for r in _pympi_settings_read(tree))
    assert found == ["PYMPI_A", "PYMPI_B", "PYMPI_C", "PYMPI_D", "PYMPI_K"]  # a label (PYMPI_E) is no read


def test_no_setting_is_read_below_the_command_line():
    """The package's own settings (PYMPI_*) are the command line's to read (cli/settings.py) and hand down:
    a library that reads them itself decides behind its caller's back (issue 51).  What the platform says
    (the launcher's, the MPI library's, numba's and CUDA's variables) its own modules read."""
    reads = {name: found for name, path in modules().items() if not name.startswith("pympi_gpu.cli")
             and (found := _pympi_settings_read(ast.parse(path.read_text(), str(path))))}
    assert not reads, reads


def test_no_private_name_is_imported_across_modules():
    """A name that starts with ``_`` is its module's own: another module that needs it makes it public
    there, in one place (issue 51)."""
    known = set(modules())
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            if not base.startswith("pympi_gpu"):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and f"{base}.{alias.name}" not in known:
                    found.append(f"{name} imports {base}.{alias.name}")
    assert not found, found


def test_the_lj_engines_stand_side_by_side():
    """``nbody/lj/cpu/`` and ``nbody/lj/gpu/`` each import what both share (``nbody/lj/``), never each other
    (issue 51): a CPU edit changes nothing of the GPU's (its static figures' hash), and the reverse."""
    g = package_graph()
    for module, targets in g.items():
        for engine, other in (("cpu", "gpu"), ("gpu", "cpu")):
            if module.startswith(f"pympi_gpu.nbody.lj.{engine}"):
                assert not [t for t in targets if t.startswith(f"pympi_gpu.nbody.lj.{other}")], module
        if module.startswith("pympi_gpu.nbody.lj.") and not module.startswith(("pympi_gpu.nbody.lj.cpu",
                                                                                "pympi_gpu.nbody.lj.gpu")):
            shared = [t for t in targets if t.startswith(("pympi_gpu.nbody.lj.cpu", "pympi_gpu.nbody.lj.gpu"))]
            allowed = module == "pympi_gpu.nbody.lj.system"  # it makes one engine's atoms (lazily)
            assert allowed or not shared, f"{module} (shared) imports an engine: {shared}"


def test_both_engines_meet_the_atoms_protocol():
    """Every member of ``nbody.lj.atoms.Atoms`` is defined by both engines' atoms, so the system reaches
    them without asking whether one has it (no getattr fallback: issue 51)."""
    import typing

    from pympi_gpu.nbody.lj import atoms

    declared = set(typing.get_type_hints(atoms.Atoms)) | {
        name for name, value in vars(atoms.Atoms).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    assert declared == set(atoms.MEMBERS)
    for path in ("cpu/atoms.py", "gpu/atoms.py"):
        tree = ast.parse((PACKAGE / "nbody" / "lj" / path).read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Atoms"))
        defined = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        defined |= {t.id for n in cls.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        defined |= {t.attr for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
        missing = sorted(set(atoms.MEMBERS) - defined)
        assert not missing, f"{cls.name} lacks {missing}"
    system = (PACKAGE / "nbody" / "lj" / "system.py").read_text()
    assert "getattr(self.atoms" not in system and "hasattr(self.atoms" not in system


# ---------------------------------------------------------------- the test suite's own layout

TESTS = ROOT / "tests"
#: the tiers (docs/testing.md): every test file lives in the folder of one
TIERS = ("unit", "cli", "gpu", "mpi", "system")


def suite_files(root: Path = TESTS) -> list[Path]:
    """Every test module under ``root`` (pytest's pattern, ``test_*.py``)."""
    return sorted(p for p in root.rglob("test_*.py") if "__pycache__" not in p.parts)


def imported_tests(path: Path) -> list[str]:
    """What ``path`` imports, anywhere in the file, of a test module or a conftest: absolute, relative,
    or as a name from a package (``from . import test_x``), as written (``.test_x.name``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + ".".join(filter(None, [node.module, a.name])) for a in node.names]
        else:
            continue
        found |= {n for n in names if any(part.startswith("test_") or part == "conftest"
                                          for part in n.lstrip(".").split("."))}
    return sorted(found)


def test_the_import_finder_sees_every_form(tmp_path):
    source = tmp_path / "test_x.py"
    source.write_text("import test_a\nfrom test_b import f\nfrom .test_c import g\nfrom . import test_d\n"
                      "from cli.test_e import h\nimport conftest\nfrom helpers.commands import run\n"
                      "from pympi_gpu import rng\n\ndef later():\n    from test_f import k\n")
    assert imported_tests(source) == [".test_c.g", ".test_d", "cli.test_e.h", "conftest", "test_a", "test_b.f",
                                      "test_f.k"]


def test_every_test_file_is_in_a_tier_folder():
    """No ``tests/test_*.py`` at the top, nor in a folder that is no tier; and every tier has its tests."""
    files = suite_files()
    outside = [str(p.relative_to(TESTS)) for p in files if p.relative_to(TESTS).parts[0] not in TIERS]
    assert outside == [], f"test files outside the tier folders {TIERS}: {outside} (docs/testing.md)"
    assert {p.relative_to(TESTS).parts[0] for p in files} == set(TIERS)


def test_no_test_file_imports_another_or_a_conftest():
    """What tests share is in tests/helpers/; conftest.py files hold fixtures and hooks, for pytest to load."""
    found = {str(p.relative_to(TESTS)): imported_tests(p) for p in sorted(TESTS.rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}, "import what tests share from tests/helpers/"


def test_the_pytest_mpi_tests_are_the_suite_and_all_of_it():
    """Tests marked ``mpi`` run under mpiexec through tests/cli/test_mpi_suite.py, which runs tests/mpi
    (left out of pytest's own collection): every such file is there, and every file there is one.  (A
    folder's name is a keyword of every test in it, and without ``--with-mpi`` pytest-mpi skips every test
    with the keyword ``mpi``: a test of any other kind in tests/mpi/ would never run.)"""
    marked = {p for p in suite_files() if re.search(r"\bpytest\.mark\.mpi\b", p.read_text())}
    suite = set(suite_files(TESTS / "mpi"))
    assert suite and marked == suite, {"marked, elsewhere": sorted(map(str, marked - suite)),
                                       "in the suite, unmarked": sorted(map(str, suite - marked))}
