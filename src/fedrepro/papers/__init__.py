"""One home per paper: everything specific to one paper lives in ``fedrepro.papers.<paper>``.

    adaped      Ozkara et al. 2023, A Statistical Framework for Personalized FL and Estimation (AdaPeD)
    fedhdp      Aldaghri et al., FedHDP: Federated Learning with Heterogeneous Differential Privacy
    histograms  Setlur et al., Private and Personalized Histogram Estimation
    ppsgd       Bietti et al. 2022, Personalization Improves Privacy-Accuracy Tradeoffs in FL (PPSGD)

Each paper package holds its estimators and algorithms (one per module), ``privacy`` (the paper's own privacy
statements), ``plots`` (its figure styles), ``experiments/`` (its experiment kinds) and whatever else only it uses.
From a registry target id, e.g. ``adaped.K.bern.normal``: the row names experiment ``adaped.bernoulli`` in
config/adaped.yaml, whose ``kind`` (``bernoulli_synthetic``) is declared in ``fedrepro/papers/adaped/__init__.py``.

The shared layers (engine and generic algorithms, accountants, data, report, plotting house style, config) know
no paper. A paper plugs into them by declaring, in its ``__init__``, name -> module (relative to the paper package):

    KINDS       experiment kinds        (fedrepro.experiments.get_kind)
    PLOTS       figure styles           (fedrepro.plots.get_plot)
    ALGORITHMS  federated algorithms    (fedrepro.learning.algorithms, keyed by Algorithm.name)
    PARTITIONS  partition schemes       (fedrepro.data.partition.get_partitioner)
    MODELS      network architectures   (fedrepro.learning.models.build_model)

A registry imports a module only when one of its names is asked for, so one experiment's heavy dependencies never
slow down another's start-up; tests/test_architecture.py checks every declaration against what the modules
really register.
"""

from __future__ import annotations

import importlib

PAPERS = ("adaped", "fedhdp", "histograms", "ppsgd")
DECLARATIONS = ("KINDS", "PLOTS", "ALGORITHMS", "PARTITIONS", "MODELS")


def declared(what: str) -> dict[str, str]:
    """name -> absolute module of everything the papers declare under ``what`` (one of DECLARATIONS)."""
    if what not in DECLARATIONS:
        raise ValueError(f"unknown declaration {what!r} (one of {', '.join(DECLARATIONS)})")
    out: dict[str, str] = {}
    for paper in PAPERS:
        package = f"{__name__}.{paper}"
        for name, module in getattr(importlib.import_module(package), what, {}).items():
            if name in out:
                raise RuntimeError(f"{what}: {name!r} declared by two papers ({out[name]}, {package}{module})")
            out[name] = f"{package}{module}"
    return out
