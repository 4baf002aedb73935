import copy
import os

import pytest
from hypothesis import settings

# CI explores a fixed set of examples (reproducible failures); locally hypothesis keeps searching new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

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
