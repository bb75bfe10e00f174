"""The installed package: `python -m loom` prints the build configuration,
loom.build_info() parses it, and the package ships its type marker."""
import os
import subprocess
import sys

import loom


def test_python_m_loom_prints_the_build():
    out = subprocess.run([sys.executable, "-m", "loom"], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"loom {loom.__version__} ")
    assert f"library: {loom.library_path}" in out
    for line in ("built with: ", "built without: ", "devices: cpu", "cpu: "):
        assert line in out, out
    assert loom.cpu_isa() in out


def test_build_info():
    info = loom.build_info()
    assert info["version"] == loom.__version__
    for key in ("cuda", "cudnn", "nccl", "mpi", "openblas", "zlib", "jansson", "profiler"):
        assert isinstance(info[key], bool), key
    assert info["mpi"] == loom.dist.have_mpi()
    if not info["cuda"]:
        assert "built without" in loom.cuda_unavailable_reason()


def test_type_marker_is_shipped():
    assert os.path.exists(os.path.join(os.path.dirname(loom.__file__), "py.typed"))
