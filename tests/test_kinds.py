"""The experiment-kind registry: lookup by name imports only the defining module."""

import subprocess
import sys

import pytest

from fedrepro.errors import ConfigError
from fedrepro.experiments import _kind_index, all_kinds, get_kind


def test_index_matches_what_modules_register():
    index = _kind_index()
    kinds = all_kinds()
    assert set(index) == set(kinds)
    assert all(kinds[name].module == module for name, module in index.items())


def test_lookup_does_not_import_other_experiments_dependencies():
    code = ("import sys; from fedrepro.experiments import get_kind; get_kind('gaussian_remark1'); "
            "print('sklearn' in sys.modules, 'fedrepro.experiments.adaped_adamix' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_unknown_kind_lists_known_ones():
    with pytest.raises(ConfigError, match="unknown experiment kind 'nope'.*gaussian_remark1"):
        get_kind("nope")
