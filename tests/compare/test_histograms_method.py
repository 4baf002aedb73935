"""The fourth paper takes a method too: a histogram estimator from a file of its own under the histograms paper's
synthetic protocol (fedrepro.papers.histograms.estimator), one more row beside the nine methods of the same users."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fedrepro.compare.method_file import load_method
from fedrepro.compare.protocol import compare
from fedrepro.compare.table import write_comparison
from fedrepro.config import load_global, resolve_experiment
from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext
from fedrepro.papers.histograms.estimator import HistogramEstimator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "histogram_shrinkage.py"


def _exp(**over):
    cfg = load_global()
    small = {"n_users": 400, "n_val": 100, "d": 50, "T": 3, "private": {"clip": 1.0, "ifca_clip": 0.5}}
    return cfg, resolve_experiment(cfg, "histograms.x_synthetic", "quick", {**small, **over})


def test_fedavg_ft_through_the_method_interface_equals_the_papers_row():
    """The example with the protocol's lambda is FedAvg + FT: equal to the paper's row without privacy, paired by
    seed; with privacy it spends the rows' budget through release.centers (one of Alg. 3's T steps)."""
    cfg, exp = _exp()
    cls = load_method(f"{EXAMPLE}:Shrinkage", HistogramEstimator)
    comp = compare(exp, cls, EXAMPLE, [0, 1], lambda seed: RunContext(exp.id, seed, config=cfg))
    rows = {r.name: r for r in comp.rows}
    mine, fedavg_ft = rows["shrinkage"], rows["fedavg_ft"]
    assert mine.failures == []
    for a, b in zip(mine.cells, fedavg_ft.cells):
        assert a["KL nonprivate"] == pytest.approx(b["KL nonprivate"], rel=1e-9)
        assert math.isfinite(a["KL private"])
    assert {r.name for r in comp.rows[:-1]} == {
        "local", "fedavg", "ifca", "alg2_dimred", "alg2", "fedavg_ft", "ifca_ft", "alg2_dimred_ft", "alg2_ft"
    }  # fmt: skip


def test_an_estimator_is_refused_where_an_algorithm_is_expected_and_the_reverse(tmp_path):
    with pytest.raises(ConfigError, match="is not a subclass of fedrepro.papers.histograms.estimator"):
        load_method(f"{Path(__file__).resolve().parents[2] / 'examples' / 'fedprox.py'}:FedProx", HistogramEstimator)
    with pytest.raises(ConfigError, match="is not a subclass of fedrepro.learning.engine.Algorithm"):
        load_method(f"{EXAMPLE}:Shrinkage")


def test_a_method_that_asks_for_more_private_releases_than_the_budget_covers_fails_its_row(tmp_path):
    greedy = tmp_path / "greedy.py"
    greedy.write_text(
        "import numpy as np\n"
        "from fedrepro.papers.histograms.estimator import HistogramEstimator\n\n\n"
        "class Greedy(HistogramEstimator):\n"
        "    name = 'greedy'\n\n"
        "    def estimate(self, users, rng, release):\n"
        "        for _ in range(users.settings['T'] + 1):\n"
        "            mean = release.centers(np.zeros(len(users.S), dtype=np.int64), 1)[0]\n"
        "        return np.tile(np.maximum(mean, 1e-6) / np.maximum(mean, 1e-6).sum(), (len(users.S), 1))\n"
    )
    cfg, exp = _exp()
    comp = compare(exp, load_method(f"{greedy}:Greedy", HistogramEstimator), greedy, [0],
                   lambda seed: RunContext(exp.id, seed, config=cfg))  # fmt: skip
    mine = comp.rows[-1]
    assert mine.cells == [None] and "more than T = 3 times" in mine.failures[0]
    write_comparison(comp, tmp_path / "o", figure=False)
    assert "greedy failed" in (tmp_path / "o" / "table.md").read_text()
