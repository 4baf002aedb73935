"""FedHDP's table columns from per-client accuracies (Tables 3, 4, 8-11): one definition for the training kind and
for the re-evaluation of kept final models (fedrepro.papers.fedhdp.test_readings)."""

from __future__ import annotations

import numpy as np


def lam_key(lam: float) -> str:
    """Metric block of a lambda as the paper prints it: 0.005 -> lam0.005, 0.25 -> lam0.25, 1 -> lam1."""
    return "lam" + f"{lam:g}"


def method_groups(spec: dict, private: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Which clients a method's group columns are over, and which groups it has: its own notion of private
    (NON-PRIVATE: nobody, one np group; DP-FedAvg: everybody, one p group; the others: the opt-out flags)."""
    m = len(private)
    if spec["algorithm"] == "nonprivate":
        return np.zeros(m, bool), ("np",)
    if spec["algorithm"] == "dp_fedavg":
        return np.ones(m, bool), ("p",)
    return private, ("p", "np")


def client_metrics(
    acc_g: np.ndarray, acc_l: list[np.ndarray], counts: np.ndarray, private: np.ndarray, groups: tuple[str, ...]
) -> list[dict[str, float]]:
    """Table 3/4 metrics per lambda from per-client accuracies in [0, 1] (nan for clients without test data).
    ``groups``: which client groups the method has ("p", "np")."""
    has = counts > 0
    pooled = float((acc_g[has] * counts[has]).sum() / counts[has].sum())
    out = []
    for acc in acc_l:
        m: dict[str, float] = {"acc_g": 100 * pooled}
        for g in groups:
            sel = has & (private if g == "p" else ~private)
            for name, a in (("acc_g", acc_g), ("acc_l", acc)):
                vals = a[sel]
                m[f"{name}_{g}"] = float(100 * vals.mean()) if vals.size else float("nan")
                m[f"{name}_{g}_var"] = float(100 * vals.var()) if vals.size else float("nan")
        if set(groups) == {"p", "np"}:
            m["d_g"] = m["acc_g_np"] - m["acc_g_p"]
            m["d_l"] = m["acc_l_np"] - m["acc_l_p"]
        out.append(m)
    return out
