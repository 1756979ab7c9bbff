"""What a run reports and leaves behind.

``records``     the provenance record and the JSON serialisation of every record
``provenance``  versions, MPI library, hosts and launcher of a run (collective)
``info``        ``pympi-info``'s report of what a job runs on
``progress``    plain progress lines for logs
``fileio``      files written atomically (temporary file, fsync, rename)

May import: the standard library, NumPy, mpi4py inside functions; of
pympi_gpu, ``mpi``, ``device`` and this package.
"""
