"""The sentences Setlur et al. say about Table 1 (Sec. 1 and Sec. 4), each as a check on a run's KL divergences.

One function per sentence, shared by the Table 1 kind (LEAF Reddit: the paper's claims, registry rows of type
printed) and the synthetic extra (the same sentences on the generative model: implementation checks). ``kl`` and
``se`` are ``{regime: {method: value}}`` as :func:`fedrepro.papers.histograms.pipeline.run_pipeline` returns them;
a non-finite KL fails every check (a NaN would otherwise make each comparison False and some checks pass).
"""

from __future__ import annotations

import numpy as np

from fedrepro.experiments import Check
from fedrepro.papers.histograms.pipeline import CLUSTERED, METHODS

# Sec. 1: "our approach yields at least 5% gains over typical baselines: learning a single global histogram, local
# histograms for each user, and their combination (finetuning)"
BASELINES = ("local", "fedavg", "fedavg_ft")
OURS = ("alg2", "alg2_ft", "alg2_dimred", "alg2_dimred_ft")
GAIN_AT_LEAST = 0.05
CLAIMS = (
    "gains_at_least_5pct",
    "alg2_converges_ifca_does_not",
    "dimred_hurts_nonprivate_helps_private",
    "private_not_better",
    "private_keeps_gains",
)  # the checks table1_claims returns


def _non_finite(kl: dict) -> list[str]:
    return [f"{regime}.{m}" for regime in kl for m in METHODS if not np.isfinite(kl[regime][m])]


def _not_finite_text(bad: list[str]) -> str:
    return f"; not finite: {', '.join(bad)}" if bad else ""


def gains_over_baselines(kl: dict) -> Check:
    """Sec. 1: the best of Alg. 2 (with or without DimRed / FT) has a KL at least 5% below the best typical baseline
    (FedAvg, Local, FedAvg + FT), non-privately. The value is the relative gain."""
    k = kl["nonprivate"]
    bad = _non_finite({"nonprivate": k})
    ours, base = min(OURS, key=k.get), min(BASELINES, key=k.get)
    gain = (k[base] - k[ours]) / k[base]
    return Check(
        not bad and gain >= GAIN_AT_LEAST,
        f"non-private: best of Alg. 2 ({ours}) {k[ours]:.4f} vs best baseline ({base}) {k[base]:.4f}: "
        f"{100 * gain:.1f}% lower KL, need >= {100 * GAIN_AT_LEAST:g}% (Sec. 1)" + _not_finite_text(bad),
        100 * gain,
        100 * GAIN_AT_LEAST,
    )


def alg2_converges_ifca_does_not(kl: dict, diagnostics: dict, within: int) -> Check:
    """Sec. 4: "in as little as 50 iterations Algorithm 2 converges, but IFCA fails to recover cluster centers with
    very few iterations": non-privately, Alg. 2's assignments stop changing within ``within`` iterations, and IFCA
    run for as many iterations ends with worse cluster centers (a higher KL without FT) than Alg. 2's."""
    k, d = kl["nonprivate"], diagnostics["nonprivate"]
    bad = _non_finite({"nonprivate": k})
    converged = bool(d["alg2"]["converged"]) and d["alg2"]["iterations"] <= within
    ifca_behind = k["ifca"] > k["alg2"]
    return Check(
        not bad and converged and ifca_behind,
        f"non-private Alg. 2 {'converged' if d['alg2']['converged'] else 'still changing'} after "
        f"{d['alg2']['iterations']} iterations (need <= {within}); IFCA after {d['ifca']['iterations']}: "
        f"KL {k['ifca']:.4f} vs Alg. 2 {k['alg2']:.4f} (need IFCA higher)" + _not_finite_text(bad),
    )


def dimred_hurts_nonprivate_helps_private(kl: dict) -> Check:
    """Sec. 4: "DimRed slightly hurts performance over using the full set of tokens non-privately, the dimensionality
    reduction proves to be important in making the clustering procedure somewhat resilient to the noise added by
    privacy mechanisms": Alg. 2 + DimRed above Alg. 2 non-privately and below it privately, with and without FT."""
    bad = _non_finite(kl)
    pairs = [(regime, ft) for regime in ("nonprivate", "private") for ft in ("", "_ft")]
    wrong = [
        f"{regime} alg2_dimred{ft} {kl[regime]['alg2_dimred' + ft]:.4f} vs alg2{ft} {kl[regime]['alg2' + ft]:.4f}"
        for regime, ft in pairs
        if (kl[regime]["alg2_dimred" + ft] > kl[regime]["alg2" + ft]) != (regime == "nonprivate")
    ]
    return Check(
        not bad and not wrong,
        "DimRed raises Alg. 2's KL non-privately and lowers it privately (with and without FT)"
        + (f"; not so: {'; '.join(wrong)}" if wrong else "")
        + _not_finite_text(bad),
    )


def private_not_better(kl: dict, se: dict, z: float) -> Check:
    """Sec. 4: "each private algorithm performs worse than its non-private counterpart": no private method below
    its non-private KL by more than z standard errors. One-sided, so any implementation that only adds noise
    passes it, however broken (the substantive claim is :func:`private_keeps_gains`); a non-finite KL fails."""
    bad = _non_finite(kl)
    better = [m for m in METHODS if m != "local" and kl["private"][m] < kl["nonprivate"][m] - z * se["private"][m]]
    return Check(
        not bad and not better,
        "every private method is no better than its non-private counterpart (within z SE)"
        + (f"; better: {', '.join(better)}" if better else "")
        + _not_finite_text(bad),
    )


def private_keeps_gains(kl: dict) -> Check:
    """Sec. 1: "ensuring the privacy mechanisms do not eat away gains we observed non-privately" (Table 1: every
    private row below Local; private IFCA / Alg. 2 (+ DimRed), with and without FT, below private FedAvg with the
    same FT). Every gain a method has non-privately over Local, and every gain a clustering method has over FedAvg
    (same FT), must remain privately; with no non-private gain to keep, or a non-finite KL, it fails."""
    k, q = kl["nonprivate"], kl["private"]
    bad = _non_finite(kl)
    pairs = [(m, "local") for m in METHODS if m != "local" and k[m] < k["local"]]
    pairs += [(c + ft, "fedavg" + ft) for c in CLUSTERED for ft in ("", "_ft") if k[c + ft] < k["fedavg" + ft]]
    lost = [f"{m} {q[m]:.4f} >= {b} {q[b]:.4f}" for m, b in pairs if not q[m] < q[b]]
    return Check(
        bool(pairs) and not bad and not lost,
        f"private KL keeps the {len(pairs)} non-private gains (over Local; clustering over FedAvg)"
        + (f"; lost: {'; '.join(lost)}" if lost else "")
        + _not_finite_text(bad)
        + ("" if pairs else "; no non-private gain to keep"),
    )


def table1_claims(kl: dict, se: dict, diagnostics: dict, p: dict) -> dict[str, Check]:
    """Every sentence the regimes of a run can judge, by check name."""
    out: dict[str, Check] = {}
    if "nonprivate" in kl:
        out["gains_at_least_5pct"] = gains_over_baselines(kl)
        out["alg2_converges_ifca_does_not"] = alg2_converges_ifca_does_not(kl, diagnostics, p["T"])
    if "private" in kl and "nonprivate" in kl:
        out["dimred_hurts_nonprivate_helps_private"] = dimred_hurts_nonprivate_helps_private(kl)
        out["private_not_better"] = private_not_better(kl, se, p["z"])
        out["private_keeps_gains"] = private_keeps_gains(kl)
    return out
