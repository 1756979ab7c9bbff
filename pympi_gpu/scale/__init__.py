"""Scaling studies: run a pympi command at several sizes and compare.

``points`` says which sizes, ``runner`` launches each run and reads its JSON
record, ``store`` keeps every finished run on disk as it comes, ``analysis``
turns runs into speedup and efficiency, ``report`` writes the JSON, CSV and
PNG files, ``projection`` fits the model that predicts more nodes and
``probes`` plans the runs at small sizes per rank that measure its floor.  The study is a driver on one process, not an MPI program.

May import: ``mpi``, ``run`` and this package (never an application's
modules: it runs them as commands and reads their JSON records).
"""
