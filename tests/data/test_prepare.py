"""The data stage: partition specs validated, real offline data parsed, partitioned and written end to end."""

import copy

import numpy as np
import pytest
import yaml

from fedrepro.config import REPO_ROOT, load_global, load_partitions
from fedrepro.data import catalog, fedformat
from fedrepro.data.prepare import prepare
from fedrepro.data.sources import fetch, is_available
from fedrepro.errors import ConfigError

SHARED = REPO_ROOT.parent / "shared" / "data"


def _cfg(tmp_path, mirror=None):
    cfg = copy.deepcopy(load_global())
    cfg["data"] = {"dir": str(tmp_path / "data"), "mirror": mirror}
    return cfg


def test_repository_partitions_are_valid():
    specs = load_partitions(load_global())
    assert {"femnist_sample_writers3", "fashion_mnist_pathological_m50"} <= set(specs)


@pytest.mark.parametrize(
    "key, value, msg",
    [
        ("dataset", "nope", "partitions.p.dataset: unknown dataset 'nope'"),
        ("scheme", "nope", "partitions.p.scheme: unknown scheme 'nope'"),
        ("seed", -1, "partitions.p.seed"),
    ],
)
def test_bad_partition_spec_names_the_key(tmp_path, key, value, msg):
    spec = {"dataset": "digits", "scheme": "dirichlet", "seed": 0, "description": "x"}
    spec[key] = value
    p = tmp_path / "partitions.yaml"
    p.write_text(yaml.safe_dump({"partitions": {"p": spec}}))
    with pytest.raises(ConfigError, match=msg):
        load_partitions(dict(load_global(), partitions=str(p)))


def test_bundled_digits_partitioned_deterministically(tmp_path):
    cfg = _cfg(tmp_path)
    fetch(cfg, "digits", offline=True)
    spec = {
        "dataset": "digits",
        "scheme": "dirichlet",
        "params": {"n_clients": 5, "alpha": 0.5},
        "seed": 3,
        "description": "t",
    }
    a, b = (fedformat.load(prepare(cfg, "d", spec, tmp_path / n)) for n in ("a", "b"))
    assert a.n_clients == 5 and a.features.shape[1:] == (8, 8) and 1790 <= a.features.shape[0] <= 1797
    np.testing.assert_array_equal(a.client_id, b.client_id)
    assert a.manifest["extra"]["name"] == "d" and a.manifest["partition"]["seed"] == 3


@pytest.mark.skipif(not (SHARED / "leaf_femnist_sf005").is_dir(), reason="shared LEAF FEMNIST sample not present")
def test_leaf_sample_through_mirror_writer_groups(tmp_path):
    cfg = _cfg(tmp_path, mirror=str(SHARED))
    assert is_available(cfg, "leaf_femnist_sf005")
    fetch(cfg, "leaf_femnist_sf005", offline=True)
    spec = load_partitions(load_global())["femnist_sample_writers3"]
    ds = fedformat.load(prepare(cfg, "femnist_sample_writers3", spec, tmp_path / "out"), verify=True)
    assert ds.n_clients == 35 and ds.n_classes == 62
    assert ds.counts("train").sum() == 14708 and ds.counts("test").sum() == 1685
    sources = ds.manifest["source"]["files"]
    assert len(sources) == 40 and all(len(h) == 64 for h in sources.values())
    # the manifest records the pinned sha256 each input matched when it was verified again for this build
    assert sources == {f.name: f.sha256 for f in catalog.get_dataset("leaf_femnist_sf005").files}
    assert ds.manifest["source"]["unpinned"] == []
    x, y = ds.client_arrays(0, "train")
    assert x.shape[1] == 784 and 0.0 <= float(x.min()) and float(x.max()) <= 1.0
