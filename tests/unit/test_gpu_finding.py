"""pympi_gpu.device.gpu's first look for a GPU: the driver's device files or its library, before numba.cuda."""

import ctypes
import glob

import pytest

from pympi_gpu.device import gpu


def _fresh():
    gpu._driver_present.cache_clear()
    return gpu._driver_present()


def test_no_driver_is_told_without_a_process(monkeypatch):
    """Where no device file and no libcuda are, the answer is no, and the look starts no process (the unit
    tier fails a test that does: ``ctypes.util.find_library`` ran ldconfig, gcc and ld, 0.1 CPU-s a rank)."""
    monkeypatch.setattr(glob, "glob", lambda pattern: [])

    def absent(name, *args, **kw):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", absent)
    assert _fresh() is False
    assert gpu.gpu_usable() == (False, "no NVIDIA driver (no /dev/nvidia* device, no libcuda)")


@pytest.mark.parametrize("where", ["device file", "library"])
def test_a_device_file_or_the_driver_library_is_a_driver(monkeypatch, where):
    opened = []
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/dev/nvidia0"] if where == "device file"
                        and pattern.startswith("/dev/nvidia") else [])
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **kw: opened.append(name))
    assert _fresh() is True
    assert opened == ([] if where == "device file" else ["libcuda.so.1"])


def test_this_machine_answers_as_its_loader_does():
    gpu._driver_present.cache_clear()
    try:
        ctypes.CDLL("libcuda.so.1")
        loadable = True
    except OSError:
        loadable = False
    files = bool(glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/dxg"))
    assert _fresh() is (files or loadable)
