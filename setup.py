"""The build of the Python module for pip (pyproject.toml holds the package's metadata).

The extension ferry._ferry is CMake's target ferry_python (python/CMakeLists.txt): this file
configures the tree with the tests, benchmarks and samples off, builds that one target for the
interpreter that runs pip, and puts the module into the wheel beside python/ferry/*.py.

    FERRY_PIP_BUILD_DIR   the CMake build folder (default: build/pip in the checkout); it is
                          kept, so that the next install rebuilds only what changed
    FERRY_PIP_CMAKE_ARGS  more arguments for CMake's configure step, split on blanks; they come
                          last, so that "-DFERRY_WITH_CUDA=OFF" overrides AUTO
    CMAKE_BUILD_PARALLEL_LEVEL  the build's jobs (default: every core)

ccache, where installed, is used as in any build of ferry (CMakeLists.txt); the build folder is
at the depth of the presets' build/<preset>, so that the objects of a release build are reused.
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# pip builds a wheel with setuptools' bdist_wheel, which needs the wheel package in the Python
# that runs pip (--no-build-isolation does not fetch it): without it pip says only "invalid
# command 'bdist_wheel'".
if "bdist_wheel" in sys.argv:
    try:
        import wheel  # noqa: F401
    except ImportError:
        sys.exit("ferry: building a wheel needs the 'wheel' package in " + sys.executable +
                 ": install it (Debian: apt-get install python3-wheel, which scripts/setup "
                 "does), or make the venv from /usr/bin/python3 as README says")

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        cmake = shutil.which("cmake")
        if cmake is None:
            raise RuntimeError("ferry: building the module needs cmake (scripts/setup installs it)")
        build_dir = os.environ.get("FERRY_PIP_BUILD_DIR") or os.path.join(ROOT, "build", "pip")
        build_dir = os.path.abspath(build_dir)
        env = dict(os.environ)
        # ccache: paths under the checkout hashed relative to it (as scripts/test does), so that
        # another build folder's objects of the same sources are reused.
        env.setdefault("CCACHE_BASEDIR", ROOT)
        env.setdefault("CCACHE_NOHASHDIR", "1")
        configure = [
            cmake, "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DFERRY_BUILD_TESTS=OFF", "-DFERRY_BUILD_BENCH=OFF", "-DFERRY_BUILD_SAMPLES=OFF",
            "-DFERRY_WITH_CUDA=AUTO",
            "-DFERRY_PYTHON=ON",
            "-DPython3_EXECUTABLE=" + sys.executable,
        ]
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")) and shutil.which("ninja"):
            configure += ["-G", "Ninja"]  # as the presets: the same compile lines, for ccache
        configure += shlex.split(os.environ.get("FERRY_PIP_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True, env=env)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run([cmake, "--build", build_dir, "--target", "ferry_python", "-j", jobs],
                       check=True, env=env)

        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        built = os.path.join(build_dir, "python", "ferry", "_ferry" + suffix)
        if not os.path.exists(built):
            found = glob.glob(os.path.join(build_dir, "python", "ferry", "_ferry*.so"))
            raise RuntimeError("ferry: the build made %s, not _ferry%s for %s"
                               % (found or "no module", suffix, sys.executable))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        shutil.copymode(built, target)


setup(ext_modules=[CMakeExtension("ferry._ferry")], cmdclass={"build_ext": CMakeBuild})
