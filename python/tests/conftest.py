"""Shared fixtures. LOOM_PY_REQUIRE_INTEROP=1 (set by the README's test
command) turns a missing safetensors/torch into a failure instead of skips,
so CI cannot pass without the interop tests."""
import gc
import os

import pytest

import loom


def pytest_sessionstart(session):
    if os.environ.get("LOOM_PY_REQUIRE_INTEROP") == "1":
        import safetensors  # noqa: F401
        import torch  # noqa: F401


def pytest_report_header(config):
    return f"loom package: {loom.__file__}; libloom: {loom.library_path}"


def needs(module):
    if os.environ.get("LOOM_PY_REQUIRE_INTEROP") == "1":
        return __import__(module)
    return pytest.importorskip(module)


@pytest.fixture
def no_leak():
    """Yields; afterwards every loom tensor made in the test must be gone."""
    gc.collect()
    before = loom.memory_allocated()
    yield
    gc.collect()
    assert loom.memory_allocated() == before, "loom memory still allocated after the test"


cuda = pytest.mark.skipif(not loom.cuda_is_available() and os.environ.get("LOOM_TEST_DEVICE") != "cuda",
                          reason=f"no CUDA device ({loom.cuda_unavailable_reason()})")
