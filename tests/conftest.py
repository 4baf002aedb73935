import copy
import os

import pytest
from hypothesis import settings

from fedrepro.config import load_global

# CI explores a fixed set of examples (reproducible failures); locally hypothesis keeps searching new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture()
def cfg(tmp_path):
    """The repository's global config, with outputs redirected into a temp dir."""
    c = copy.deepcopy(load_global())
    c["results_dir"] = str(tmp_path / "results")
    c["figures_dir"] = str(tmp_path / "figures")
    c["logs_dir"] = str(tmp_path / "logs")
    c["data"] = {"dir": str(tmp_path / "data"), "mirror": None}
    return c


@pytest.fixture(scope="module")
def one_thread():
    """Single-threaded torch for a module (small models: threading only adds overhead and nondeterminism).

    Opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``; torch is imported only when used."""
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(scope="session")
def blobs_factory():
    """``learning_helpers.make_blobs``: Gaussian-blob federated datasets for the learning tests (imported lazily,
    so that tests without torch do not import it)."""
    from learning_helpers import make_blobs

    return make_blobs


@pytest.fixture
def emnist_mirror(tmp_path):
    """A mirror holding a 3-writer TFF federated EMNIST digits archive in the upstream format:
    (config, mirror dir of the dataset, the arrays written). See tests/helpers/tff_fixtures.py."""
    pytest.importorskip("h5py")
    from tff_fixtures import make_emnist_mirror

    return make_emnist_mirror(tmp_path)


@pytest.fixture
def so_mirror(tmp_path):
    """A mirror holding TFF Stack Overflow (h5 + sqlite) and its word/tag counts in the upstream formats:
    (config, mirror dir). See tests/helpers/tff_fixtures.py."""
    pytest.importorskip("h5py")
    from tff_fixtures import make_so_mirror

    return make_so_mirror(tmp_path)
