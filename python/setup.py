"""Build hook: bundle libloom.so into the package when one is at hand.

`pip install ./python` copies the library named by $LOOM_LIBRARY, or else the
one in ../build/lib (a CMake build next to this directory), into the
installed package as loom/libloom.so. Without either, the package installs
without it and finds libloom at import time ($LOOM_LIBRARY, a build
directory of the source tree, or the system's libloom.so.0: see
loom/_lib.py).
"""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _library():
    env = os.environ.get("LOOM_LIBRARY")
    if env:
        if os.path.isdir(env):
            env = os.path.join(env, "libloom.so")
        if not os.path.exists(env):
            raise SystemExit(f"LOOM_LIBRARY={env} does not exist")
        return env
    for cand in sorted(glob.glob(os.path.join(HERE, "..", "build", "lib", "libloom.so"))):
        return cand
    return None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = _library()
        if lib:
            dst = os.path.join(self.build_lib, "loom", "libloom.so")
            shutil.copyfile(os.path.realpath(lib), dst)
            print(f"loom: bundled {lib}")
        else:
            print("loom: no libloom.so to bundle; set LOOM_LIBRARY at run time")


setup(cmdclass={"build_py": BuildPyWithLibrary})
