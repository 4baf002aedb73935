"""The nine methods of Table 1 in the two privacy regimes, on one data set, evaluated in KL (docs/notes/histograms.md
§2.11).

| method          | centers                                   | per-user estimate                 |
| local           | none                                      | (x_u + beta)/(m + d beta)         |
| fedavg          | mean (Alg. 3 with K = 1 privately)        | Q_fa                              |
| ifca            | IFCA gradient steps                       | P_{c_u}                           |
| alg2_dimred     | Alg. 1 + Alg. 2, assignment on kept tokens| P_{c_u}                           |
| alg2            | Alg. 1 + Alg. 2 (Alg. 3 privately)        | P_{c_u}                           |
| *_ft            | as above                                  | lam P_{c_u} + (1 - lam) Q^_u      |

Centers are evaluated smoothed (``center_floor``, :func:`fedrepro.papers.histograms.kl.smooth`). The metric is the mean
over users of KL(Q_u^eval || estimate_u), Q^eval the true histogram (synthetic) or the test-token histogram (Reddit).

Privacy (private regime): Alg. 3's per-step (eps, delta) comes from Theorem 3.1 through
:func:`fedrepro.papers.histograms.privacy.per_step_budget` (the thm31_budget experiment's function). Alg. 1's
initialization and DimRed's statistics use the public validation proxy ``Sval`` in both regimes
(docs/notes/histograms.md G7: the
paper never accounts for them); private FedAvg is one Alg. 3 call with K = 1 at the per-step budget; private IFCA
is described in :mod:`fedrepro.papers.histograms.ifca`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrepro.errors import ConfigError
from fedrepro.experiments.params import DELTA, INT1, NONNEG, POSITIVE, POSITIVE_LIST, UNIT
from fedrepro.papers.histograms import dimred as dr
from fedrepro.papers.histograms.fedavg import fedavg, private_fedavg
from fedrepro.papers.histograms.ifca import ifca
from fedrepro.papers.histograms.kl import CHUNK, cross_log, neg_entropy, smooth
from fedrepro.papers.histograms.kmeanspp_init import kl_init
from fedrepro.papers.histograms.lloyd import LloydResult, lloyd, mean_recenter
from fedrepro.papers.histograms.local import local_estimate
from fedrepro.papers.histograms.privacy import per_step_budget
from fedrepro.papers.histograms.private_centering import private_centering

METHODS = ("local", "fedavg", "ifca", "alg2_dimred", "alg2", "fedavg_ft", "ifca_ft", "alg2_dimred_ft", "alg2_ft")
REGIMES = ("nonprivate", "private")
CLUSTERED = ("ifca", "alg2_dimred", "alg2")

# the pipeline's parameters: a schema fragment of every kind that runs it (the synthetic extra, Table 1)
ALGO_PROPERTIES = {
    "K": INT1,
    "T": INT1,
    "tau": NONNEG,
    "lam": UNIT,
    "local_beta": POSITIVE,
    "center_floor": NONNEG,
    "init_nonprivate": {"enum": ["train", "validation"], "default": "train"},
    "dimred": {
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,
        "properties": {"keep_tokens": INT1, "threshold": POSITIVE},
    },
    "ifca_lr": POSITIVE,
    "ifca_init_mix": {**UNIT, "default": 0.0},
    "private": {
        "type": "object",
        "additionalProperties": False,
        "required": ["total_epsilon", "delta", "clip", "s", "ifca_clip"],
        "properties": {
            "total_epsilon": POSITIVE,
            "delta": DELTA,
            "reading": {"enum": ["total", "per_step", "basic"], "default": "total"},
            # a list is tuned on the validation users (run_pipeline)
            "clip": {"oneOf": [POSITIVE, POSITIVE_LIST]},
            "s": POSITIVE,
            "ifca_clip": {"oneOf": [POSITIVE, POSITIVE_LIST]},
        },
    },
    "regimes": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": list(REGIMES)}},
    "trace_users": {**INT1, "default": 5000},
    "dtype": {"enum": ["float32", "float64"], "default": "float32"},
}
ALGO_REQUIRED = ["K", "T", "tau", "lam", "local_beta", "center_floor", "dimred", "ifca_lr", "private", "regimes"]


@dataclass
class HistData:
    S: np.ndarray  # (n, d) train histograms x_u / m (float32)
    counts: np.ndarray  # (n, d) train token counts
    Qeval: np.ndarray  # (n, d) what estimates are scored against
    Sval: np.ndarray  # (n_val, d) public validation proxy (Alg. 1 seeds in the private regime, DimRed)
    truth: np.ndarray | None = None  # (n,) true clusters (synthetic only)
    tune_index: np.ndarray | None = None  # (n_tune,) rows of S of the validation users that score tuning
    tune_eval: np.ndarray | None = None  # (n_tune, d) those users' held-out validation-token histograms


class Evaluator:
    """Mean KL(Qeval_u || estimate_u) for the estimate shapes of the nine methods, chunked over users."""

    def __init__(self, data: HistData, floor: float, lam: float, beta: float):
        self.d, self.floor, self.lam, self.beta = data, floor, lam, beta
        self.h = neg_entropy(data.Qeval)

    def cluster(self, centers: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """(n,) per-user KL of the (smoothed) cluster model alone."""
        ll = cross_log(self.d.Qeval, np.log(smooth(centers, self.floor)))
        return self.h - ll[np.arange(len(labels)), labels]

    def finetuned(self, centers: np.ndarray, labels: np.ndarray) -> np.ndarray:
        P = smooth(centers, self.floor)
        out = np.empty(len(labels))
        for lo in range(0, len(labels), CHUNK):
            q = np.asarray(self.d.Qeval[lo : lo + CHUNK], dtype=np.float64)
            est = self.lam * P[labels[lo : lo + CHUNK]] + (1 - self.lam) * np.asarray(
                self.d.S[lo : lo + CHUNK], dtype=np.float64
            )
            out[lo : lo + CHUNK] = _cross(q, est)
        return self.h - out

    def estimates(self, est: np.ndarray) -> np.ndarray:
        """(n,) per-user KL of arbitrary per-user estimates (n, d) (a method from outside the package)."""
        out = np.empty(len(est))
        for lo in range(0, len(est), CHUNK):
            q = np.asarray(self.d.Qeval[lo : lo + CHUNK], dtype=np.float64)
            out[lo : lo + CHUNK] = _cross(q, np.asarray(est[lo : lo + CHUNK], dtype=np.float64))
        return self.h - out

    def local(self) -> np.ndarray:
        out = np.empty(self.d.S.shape[0])
        for lo in range(0, self.d.S.shape[0], CHUNK):
            q = np.asarray(self.d.Qeval[lo : lo + CHUNK], dtype=np.float64)
            out[lo : lo + CHUNK] = _cross(q, local_estimate(self.d.counts[lo : lo + CHUNK], self.beta))
        return self.h - out


def _cross(q: np.ndarray, est: np.ndarray) -> np.ndarray:
    """(rows,) sum_i q_ui log est_ui over q > 0 (-inf if est = 0 there)."""
    pos = q > 0
    with np.errstate(divide="ignore"):
        return np.where(pos, q * np.log(np.where(pos, est, 1.0)), 0.0).sum(axis=1)


def misclustering(truth: np.ndarray, labels: np.ndarray, K: int) -> float:
    """Fraction of users outside the best one-to-one matching of found to true clusters (Hungarian)."""
    from scipy.optimize import linear_sum_assignment

    C = np.zeros((K, max(K, int(truth.max()) + 1)))
    np.add.at(C, (labels, truth), 1)
    r, c = linear_sum_assignment(-C)
    return float(1 - C[r, c].sum() / len(truth))


def candidates(value) -> list:
    """A tuned parameter's candidate values: a list as given, a scalar as the one candidate."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def tuning_requested(p: dict) -> bool:
    """Whether the private regime tunes Alg. 3's clip c or IFCA's clip on validation users (a list of candidates)."""
    pr = p["private"]
    return "private" in p["regimes"] and (len(candidates(pr["clip"])) > 1 or len(candidates(pr["ifca_clip"])) > 1)


@dataclass
class Fit:
    """One method's centers and assignments for one candidate value of its tuned parameter."""

    value: float | None
    centers: np.ndarray
    labels: np.ndarray
    res: LloydResult | None = None


def run_pipeline(data: HistData, p: dict, rng: np.random.Generator, regimes=REGIMES):
    """-> (metrics {regime: {method: mean kl}}, standard errors {regime: {method: se}}, diagnostics, history rows).

    Non-privately Alg. 1 seeds from the users' own rows (``init_nonprivate: train``, the paper's Alg. 2) or from
    the validation proxy (``validation``).

    Tuning (Sec. 4: the clipping threshold c is "tuned on validation"): ``private.clip`` (Alg. 3, private FedAvg,
    private Alg. 2 with and without DimRed) and ``private.ifca_clip`` may be lists of candidates. Each candidate is
    run (same data, same Alg. 1 initialization); each Table 1 row then reports the candidate whose estimates have
    the lowest mean KL against the held-out validation tokens of the validation users (``data.tune_index``,
    ``data.tune_eval``; ties go to the first candidate). Every candidate's validation and evaluation KL is kept in
    ``diagnostics.private.tuning``. A scalar is one candidate (no tuning, no validation users needed)."""
    K, T, floor = p["K"], p["T"], p["center_floor"]
    ev = Evaluator(data, floor, p["lam"], p["local_beta"])
    S = data.S
    n_tr = min(p["trace_users"], S.shape[0])
    tr_idx = np.sort(rng.choice(S.shape[0], size=n_tr, replace=False))
    Q_tr, h_tr = np.asarray(data.Qeval[tr_idx]), ev.h[tr_idx]

    def trace(t, P, labels):
        ll = cross_log(Q_tr, np.log(smooth(P, floor)))
        return float(np.mean(h_tr - ll[np.arange(n_tr), labels[tr_idx]]))

    dcfg = p["dimred"]
    keep = dr.select_tokens(
        dr.token_scores(data.Sval, K, floor), threshold=dcfg.get("threshold"), keep_tokens=dcfg.get("keep_tokens")
    )
    metrics, ses, diag, rows = {}, {}, {"dimred_kept_tokens": int(keep.size)}, []
    local_kl = ev.local()
    zero = np.zeros(S.shape[0], dtype=np.int64)
    for regime in regimes:
        private = regime == "private"
        fits: dict[str, list[Fit]] = {}
        if private:
            pr = p["private"]
            b = per_step_budget(pr["total_epsilon"], pr["delta"], T, pr["reading"])
            eps, dlt = b.per_step_epsilon, b.per_step_delta
            diag["private_budget"] = {
                "per_step_epsilon": eps,
                "per_step_delta": dlt,
                "sigma": b.sigma,
                "total_epsilon": b.total_epsilon,
                "total_delta": b.total_delta,
            }
            init_src = data.Sval
            clips, ifca_clips = candidates(pr["clip"]), candidates(pr["ifca_clip"])
            fits["fedavg"] = [Fit(c, private_fedavg(S, eps, dlt, c, pr["s"], floor, rng)[None, :], zero) for c in clips]

            def recenter_with(c):
                return lambda S_, labels, K_: private_centering(S_, labels, K_, eps, dlt, c, pr["s"], floor, rng)
        else:
            init_src = data.S if p["init_nonprivate"] == "train" else data.Sval
            clips, ifca_clips = [None], [None]
            fits["fedavg"] = [Fit(None, fedavg(S)[None, :], zero)]

            def recenter_with(c):
                return mean_recenter

        P0 = kl_init(init_src, K, p["tau"], floor, rng)
        lloyd_runs = {
            "alg2": lambda c: lloyd(
                S, P0, T, floor, recenter=recenter_with(c), stop_when_stable=not private, on_iteration=trace
            ),
            "alg2_dimred": lambda c: lloyd(
                S, P0, T, floor, recenter=recenter_with(c), stop_when_stable=not private, keep=keep, on_iteration=trace
            ),
            "ifca": lambda c: ifca(
                S,
                P0,
                T,
                p["ifca_lr"],
                floor,
                init_mix=p["ifca_init_mix"],
                private=private,
                rng=rng,
                epsilon=eps if private else None,
                delta=dlt if private else None,
                clip=c,
                on_iteration=trace,
            ),
        }
        for name, run in lloyd_runs.items():
            fits[name] = [
                Fit(c, res.centers, res.labels, res)
                for c, res in ((c, run(c)) for c in (ifca_clips if name == "ifca" else clips))
            ]
        out, chosen, tuning = _select(
            fits, ev, _tuning_evaluator(data, p) if len(clips) + len(ifca_clips) > 2 else None
        )
        out["local"] = local_kl
        if tuning:
            diag.setdefault(regime, {})["tuning"] = tuning
        for name in CLUSTERED:
            fit = chosen[name]
            d = {
                "iterations": fit.res.iterations,
                "final_objective": fit.res.objective[-1],
                "converged": bool(fit.res.changed) and fit.res.changed[-1] == 0,
            }  # no assignment changed last
            if data.truth is not None:
                d["misclustering"] = misclustering(data.truth, fit.labels, K)
            diag.setdefault(regime, {})[name] = d
            for t, (obj, ch, kl) in enumerate(zip(fit.res.objective, fit.res.changed, fit.res.trace)):
                rows.append(
                    {
                        "regime": regime,
                        "method": name,
                        "iteration": t,
                        "objective": obj,
                        "changed": ch,
                        "kl_cluster_model": kl,
                    }
                )
        metrics[regime] = {m: float(np.mean(out[m])) for m in METHODS}
        ses[regime] = {m: float(np.std(out[m], ddof=1) / np.sqrt(len(out[m]))) for m in METHODS}
    return metrics, ses, diag, rows


def _tuning_evaluator(data: HistData, p: dict) -> tuple[np.ndarray, Evaluator]:
    """(rows of the validation users, an Evaluator scoring their estimates against their validation tokens)."""
    if data.tune_index is None or data.tune_eval is None:
        raise ConfigError(
            "private.clip / private.ifca_clip: a list of candidates is tuned on validation users, "
            "but this data set has none; give one value, or validation users and tokens"
        )
    idx = data.tune_index
    sub = HistData(S=data.S[idx], counts=data.counts[idx], Qeval=data.tune_eval, Sval=data.Sval)
    return idx, Evaluator(sub, p["center_floor"], p["lam"], p["local_beta"])


def _estimate_kl(ev: Evaluator, fit: Fit, ft: bool, rows: np.ndarray | None = None) -> np.ndarray:
    labels = fit.labels if rows is None else fit.labels[rows]
    return ev.finetuned(fit.centers, labels) if ft else ev.cluster(fit.centers, labels)


def _select(fits: dict[str, list[Fit]], ev: Evaluator, tune: tuple[np.ndarray, Evaluator] | None):
    """-> ({row: per-user KL of the chosen candidate}, {method: the Fit chosen for its row without FT},
    {row: every candidate's value, validation KL and evaluation KL} (empty without tuning))."""
    out, chosen, tuning = {}, {}, {}
    for name, cands in fits.items():
        for row, ft in ((name, False), (f"{name}_ft", True)):
            kls = [_estimate_kl(ev, f, ft) for f in cands]
            best = 0
            if tune is not None:
                idx, tev = tune
                val = [float(np.mean(_estimate_kl(tev, f, ft, idx))) for f in cands]
                best = int(np.argmin(val))
                tuning[row] = {
                    "candidates": [f.value for f in cands],
                    "validation_kl": val,
                    "kl": [float(np.mean(k)) for k in kls],
                    "chosen": cands[best].value,
                }
                if name in CLUSTERED and ev.d.truth is not None and not ft:
                    tuning[row]["misclustering"] = [
                        misclustering(ev.d.truth, f.labels, f.centers.shape[0]) for f in cands
                    ]
            out[row] = kls[best]
            if not ft:
                chosen[name] = cands[best]
    return out, chosen, tuning
