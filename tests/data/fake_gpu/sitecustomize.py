"""A test double, loaded by Python at start-up when this folder is on PYTHONPATH: the GPU probe behind
``--backend auto``'s agreement (``pympi_gpu.device.backend_choice.gpu_everywhere``) answers for this
process as ``PYMPI_FAKE_GPU`` says (``yes`` or ``no``).

For the tests of that agreement on machines without GPUs: launched as MPMD (``mpiexec -n 1 env
PYMPI_FAKE_GPU=yes cmd : -n 1 env PYMPI_FAKE_GPU=no cmd``), each rank answers for itself, and every
rank must still take the same backend.  Only the agreement's probe is faked (not the device binding,
which would then look for a driver).  The package itself has no such switch.
"""

import os

_answer = os.environ.get("PYMPI_FAKE_GPU", "").strip().lower()
if _answer:
    import pympi_gpu.device.backend_choice as _choice

    _real = _choice.gpu_everywhere

    def _fake_probe():
        return _answer == "yes", f"PYMPI_FAKE_GPU={_answer}"

    _choice.gpu_everywhere = lambda comm, probe=None: _real(comm, probe or _fake_probe)
