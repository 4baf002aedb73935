"""The official code's step-size map and the clipping operator (docs/notes/ppsgd.md §2.4 [code]).

``main_synthetic.py`` / ``main_real.py::training_priv`` take a base ``step`` and the personalization ratio
alpha_c (the App. A grid labelled "alpha Q"; alpha_c = eta_w / eta_theta) and set

    (eta_w, eta_theta) = (alpha_c * step, step)   if 0 <= alpha_c <= 1
                       = (step, step / alpha_c)   if alpha_c > 1
                       = (step, 0)                if alpha_c = inf (coded as -1 in the official code)

so ``step = max(eta_w, eta_theta)``. alpha_c = 0 is local learning (eta_w = 0: w never moves and no privacy is
spent); alpha_c = inf is global learning (eta_theta = 0: theta_i never moves).
"""

from __future__ import annotations

import math

import numpy as np

ALPHA_INF = math.inf


def parse_alpha(a) -> float:
    """A config value of alpha_c: a number >= 0, or ``inf`` / ``.inf`` / ``-1`` (the code's marker) for inf."""
    if isinstance(a, str):
        if a.strip().lower() in ("inf", ".inf", "infinity"):
            return ALPHA_INF
        a = float(a)
    a = float(a)
    if a == -1:
        return ALPHA_INF
    if not a >= 0:
        raise ValueError(f"alpha_c must be >= 0, inf or -1 (the code's marker for inf), got {a!r}")
    return a


def step_sizes(step: float, alpha_c) -> tuple[float, float]:
    """(eta_w, eta_theta) from (step, alpha_c) exactly as the official code maps them."""
    a = parse_alpha(alpha_c)
    step = float(step)
    if not step > 0:
        raise ValueError(f"step must be > 0, got {step!r}")
    if math.isinf(a):
        return step, 0.0
    if a <= 1:
        return a * step, step
    return step, step / a


def step_size_arrays(steps, alphas) -> tuple[np.ndarray, np.ndarray]:
    """Vectors (eta_w, eta_theta) over paired (step, alpha_c) configurations."""
    pairs = [step_sizes(s, a) for s, a in zip(steps, alphas, strict=True)]
    return np.array([p[0] for p in pairs], dtype=float), np.array([p[1] for p in pairs], dtype=float)


def clip_factors(norms: np.ndarray, clip: float) -> np.ndarray:
    """The factor 1 / max(1, ||g|| / C) of clip_C(g) = g / max(1, ||g|| / C), elementwise over ``norms``."""
    if not clip > 0:
        raise ValueError(f"clip C must be > 0, got {clip!r}")
    return 1.0 / np.maximum(1.0, np.asarray(norms, dtype=float) / clip)
