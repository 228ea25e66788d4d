# pip install of the checkout, as a user does it (README, docs/PYTHON.md): a virtual environment
# made with --system-site-packages (Debian's numpy, setuptools and wheel seen through it), then
# `pip install --no-build-isolation` with no index (no network), `import ferry` from another
# folder running a loader, `pip show`, and `pip uninstall`, which leaves nothing behind.
#
# The module is built by setup.py with CMake in $FERRY_PIP_BUILD_DIR (ctest's python.pip_install
# does not set it: build/pip of the checkout, kept between runs, and ccache reuses the objects of
# the release build). Skips, saying why, where python3-venv, pip, setuptools, wheel or cmake
# are missing.
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION_HPP = ROOT / "include" / "ferry" / "version.hpp"


def _env():
    env = dict(os.environ)
    # ctest points PYTHONPATH at the build tree's module: the installed one is under test here.
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env["PIP_NO_INDEX"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def _run(args, timeout, cwd=None, check=True):
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and done.returncode != 0:
        pytest.fail("%s exited %d:\n%s" % (" ".join(map(str, args)), done.returncode,
                                            done.stdout[-6000:]))
    return done


def _has(module):
    return _run([sys.executable, "-c", "import " + module], 60, check=False).returncode == 0


@pytest.fixture
def venv(tmp_path):
    for module, package in (("venv", "python3-venv"), ("ensurepip", "python3-venv"),
                            ("numpy", "python3-numpy"),
                            ("setuptools", "python3-setuptools"), ("wheel", "python3-wheel"),
                            ("pip", "python3-pip")):
        if not _has(module):
            pytest.skip("%s cannot import %s (Debian: %s)" % (sys.executable, module, package))
    if shutil.which("cmake") is None:
        pytest.skip("no cmake on PATH")
    where = tmp_path / "V"
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", where], 300,
                check=False)
    if made.returncode != 0:
        reason = made.stdout.strip().splitlines()[-1:] or ["?"]
        pytest.skip("python3 -m venv failed (Debian: python3-venv): " + reason[0])
    if not (where / "bin" / "pip").exists():
        pytest.skip("the venv has no pip (Debian: python3-venv, python3-pip-whl)")
    return where


def test_pip_installs_imports_shows_and_uninstalls(venv, tmp_path):
    pip = venv / "bin" / "pip"
    python = venv / "bin" / "python"
    _run([pip, "install", "--no-build-isolation", "--no-deps", ROOT], 3000)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import ferry, numpy as np\n"
        "ds = ferry.TensorDataset({'x': np.arange(40, dtype=np.float32).reshape(20, 2),\n"
        "                          'y': np.arange(20, dtype=np.int64)})\n"
        "loader = ferry.Loader(ds, batch_size=8, shuffle=True, device='cpu')\n"
        "seen = sorted(int(v) for b in loader.epoch(0) for v in b['y'].numpy())\n"
        "assert seen == list(range(20)), seen\n"
        "print(ferry.__file__)\n"
        "print(ferry.__version__)\n")
    ran = _run([python, "-c", probe], 300, cwd=elsewhere)
    where, version = ran.stdout.strip().splitlines()[-2:]
    site = pathlib.Path(where).resolve().parent.parent
    assert pathlib.Path(where).resolve().is_relative_to(venv.resolve()), where
    # The wheel's files: the pure-Python parts, the stubs and the extension.
    names = {p.name for p in (site / "ferry").iterdir()}
    assert {"__init__.py", "torch.py", "_worker.py", "_ferry.pyi", "py.typed"} <= names, names
    assert any(n.startswith("_ferry.") and n.endswith(".so") for n in names), names
    # pyproject.toml's version is the library's.
    assert '"%s"' % version in VERSION_HPP.read_text()

    shown = _run([pip, "show", "ferry"], 120).stdout
    assert "Name: ferry" in shown and ("Version: " + version) in shown, shown

    _run([pip, "uninstall", "-y", "ferry"], 120)
    assert not (site / "ferry").exists(), sorted(p.name for p in (site / "ferry").iterdir())
    assert not list(site.glob("ferry-*.dist-info")), list(site.glob("ferry-*"))
    assert _run([pip, "show", "ferry"], 120, check=False).returncode != 0
    # Importing ferry now finds none in the venv (a system-wide install, from
    # scripts/install-python, may still be seen through --system-site-packages).
    after = _run([python, "-c", "import ferry; print(ferry.__file__)"], 120, cwd=elsewhere,
                 check=False)
    if after.returncode == 0:
        found = pathlib.Path(after.stdout.strip().splitlines()[-1]).resolve()
        assert not found.is_relative_to(venv.resolve()), found
