# README's Python example runs as written (on Fashion-MNIST, Debian's dataset-fashion-mnist),
# with the module under test (PYTHONPATH, as ctest sets it), from another folder.
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def blocks(language):
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```%s\n(.*?)^```" % language, text, flags=re.S | re.M)


def test_readme_has_one_python_and_one_cpp_example():
    assert len(blocks("python")) == 1
    assert len(blocks("cpp")) == 1


def test_readme_python_example_runs(tmp_path):
    pytest.importorskip("torch")
    if not FASHION.exists():
        pytest.skip("no Fashion-MNIST (Debian: dataset-fashion-mnist)")
    (code,) = blocks("python")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-4000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("0 ") and lines[-1].startswith("1 "), done.stdout
