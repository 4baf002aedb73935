"""HDP-FedAvg (Aldaghri et al., Sec. 5 baselines; docs/notes/fedhdp.md section 2.5 "Experiment baselines"): private
clients are clipped and noised exactly as in DP-FedAvg, non-private clients are not, and the two groups are
combined with uniform per-client weights, i.e. FedHDP with r = 1 (:class:`fedrepro.papers.fedhdp.fedhdp.FedHDP`).
"+Ditto" adds the Ditto personal models (``lams``)."""

from __future__ import annotations

from fedrepro.papers.fedhdp.fedhdp import FedHDP


class HDPFedAvg(FedHDP):
    name = "hdp_fedavg"

    def __init__(self, **kw):
        if kw.pop("r", 1.0) != 1.0:
            raise ValueError("HDP-FedAvg is FedHDP with r = 1; use FedHDP for another ratio")
        super().__init__(r=1.0, **kw)


__all__ = ["HDPFedAvg"]
