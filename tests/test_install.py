"""A non-editable install (``pip install .``: the package in site-packages, the workflow's files not) works from the
checkout it is run in: the wheel carries the package data (schemas, report templates), the root is found from the
working directory or FEDREPRO_ROOT, and outside any checkout the command line says what to do in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fedrepro.checkout import ROOT_ENV, find_root, is_checkout
from fedrepro.config import REPO_ROOT

pytestmark = pytest.mark.slow  # builds a wheel (~10 s)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package as `pip install .` lays it out: a wheel built from a copy of the sources, unpacked (no checkout
    around it)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src_copy"
    shutil.copytree(REPO_ROOT / "src", src / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(REPO_ROOT / name, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(src)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = tmp.glob("fedrepro-*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


def _run(site: Path, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != ROOT_ENV} | {"PYTHONPATH": str(site)} | (env or {})
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=environ)


def test_the_installed_package_reads_the_checkout_it_runs_in(installed, tmp_path):
    where = _run(
        installed,
        REPO_ROOT,
        "-c",
        "import fedrepro, fedrepro.checkout as c; print(fedrepro.__file__); print(c.REPO_ROOT)",
    )
    assert where.returncode == 0, where.stderr
    module, root = where.stdout.split()
    assert Path(module).is_relative_to(installed) and Path(root) == REPO_ROOT  # the copy, reading this checkout
    listed = _run(installed, REPO_ROOT / "config", "-m", "fedrepro", "list")  # a subdirectory finds it too
    assert listed.returncode == 0 and "adaped.table4_femnist_sample" in listed.stdout, listed.stderr[-2000:]
    elsewhere = _run(installed, tmp_path, "-m", "fedrepro", "list")
    assert elsewhere.returncode == 2 and elsewhere.stderr.count("\n") == 1, elsewhere.stderr
    assert "no fedrepro checkout here" in elsewhere.stderr and ROOT_ENV in elsewhere.stderr
    named = _run(installed, tmp_path, "-m", "fedrepro", "list", env={ROOT_ENV: str(REPO_ROOT)})
    assert named.returncode == 0 and "ppsgd.fig1c_emnist" in named.stdout, named.stderr[-2000:]


def test_find_root_order(tmp_path):
    co = tmp_path / "co"
    (co / "config").mkdir(parents=True)
    (co / "Snakefile").write_text("")
    (co / "config" / "config.yaml").write_text("")
    deep = co / "a" / "b"
    deep.mkdir(parents=True)
    site = tmp_path / "site"
    assert is_checkout(co) and not is_checkout(site)
    assert find_root(site, deep, {}) == co  # an installed copy: the checkout above the working directory
    assert find_root(co, tmp_path, {}) == co  # its own checkout first
    assert find_root(co, deep, {ROOT_ENV: str(site)}) == site  # the variable wins
    assert find_root(site, tmp_path, {}) == tmp_path  # none: the working directory (config lookups fail, loudly)
