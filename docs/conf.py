"""Sphinx configuration of the pympi_gpu documentation (MyST Markdown pages).

Build: ``sphinx-build -W -n -b html docs docs/_build/html`` (``tests/cli/test_docs.py`` does it).
"""

from importlib import metadata
from pathlib import Path

project = "pympi_gpu"
author = "the pympi_gpu developers"
copyright = "the pympi_gpu developers, BSD-3-Clause"
try:
    release = version = metadata.version("pympi_gpu")
except metadata.PackageNotFoundError:  # building from a checkout that is not installed
    release = version = "unknown"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links such as install.md#when-no-mpi-library-is-found
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
html_title = f"pympi_gpu {release}"
html_static_path: list[str] = []

#: Pages other branches write; the index names them, and a name is dropped from the
#: toctree while its page does not exist yet (Sphinx -W refuses a missing toctree entry).
OPTIONAL_PAGES = ("lj", "gpu", "performance", "faults")


def _drop_missing_pages(app, docname, source):
    if docname != "index":
        return
    lines = source[0].splitlines(keepends=True)
    here = Path(app.srcdir)
    source[0] = "".join(line for line in lines
                        if line.strip() not in OPTIONAL_PAGES or (here / f"{line.strip()}.md").exists())


def setup(app):
    from pygments.lexers.special import TextLexer
    from sphinx.highlighting import lexers

    lexers["lammps"] = TextLexer()  # Pygments has no LAMMPS lexer: lj.md's ```lammps input shown as plain text
    app.connect("source-read", _drop_missing_pages)
