"""What the tests of every tier share: starting commands as users do, watching a job's processes,
the expectations of a stop request, scratch MPI environments, reference algorithms.

``tests/`` is on ``sys.path`` in every run (pytest puts the directory of ``tests/conftest.py``
there, whichever tier is collected), so a test imports ``from helpers.commands import run``.
No test file imports another test file (``tests/unit/test_architecture.py`` holds it so).
"""
