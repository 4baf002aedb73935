import copy

import pytest

from fedrepro.config import load_global


@pytest.fixture()
def cfg(tmp_path):
    """The repository's global config, with outputs redirected into a temp dir."""
    c = copy.deepcopy(load_global())
    c["results_dir"] = str(tmp_path / "results")
    c["figures_dir"] = str(tmp_path / "figures")
    c["logs_dir"] = str(tmp_path / "logs")
    c["data"] = {"dir": str(tmp_path / "data"), "mirror": None}
    return c
