"""PPSGD synthetic (Fig. 1a of Bietti et al. 2022): fedrepro's vectorized ``fedrepro.papers.ppsgd.ppsgd_exp`` vs a
faithful re-implementation of the official code's numpy loop. Not a test; results go to benchmarks/results/ppsgd.json.

The official code (github.com/albietz/ppsgd, ``main_synthetic.py::training_priv``; notes ppsgd.md §2.4) runs one
call per grid configuration (step, alpha_c, sigma, C); each call loops over iterations, draws a fresh batch
X (b, N, d) for all N users, computes every user's prediction and gradient with numpy broadcasting over the users
(elementwise products and sums, no per-user Python loop in the synthetic script), updates theta_i unclipped,
clips each user's gradient to C, steps w with noise sigma C / N, then steps opacus' RDPAccountant and reads
epsilon at every iteration. :func:`official_training_priv` re-implements exactly that (our code, same operations;
the excess risk it records is the code's per-coordinate mean, i.e. fedrepro's R / d).
``--user-loop`` additionally times the reading of notes §2.4's pseudo-code (``for i in S``: a Python loop over users
per round), on a few iterations of one configuration.

fedrepro runs the whole (step x alpha_c) grid of one sigma at once: ``ppsgd_synthetic.train_grid`` (one data
stream shared by the grid, each configuration with its own noise), and epsilon of the whole curve once per sigma
(``fedrepro.privacy.epsilon_curve``, opacus RDP, as the code).

Before timing, both are fed the same samples and the same noise (float64) and their excess-risk trajectories must
agree within float tolerance (``equivalence``; the script stops if they do not).

    python benchmarks/ppsgd.py                         # quick grid (3 steps x 4 alphas), sigma 10, 100 iterations
    python benchmarks/ppsgd.py --grid paper --official-configs 9 --out benchmarks/results/ppsgd_paper_grid.json
                                                       # paper grid (99 configs); official timed on 9, extrapolated
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fl_setting as S  # noqa: E402  (machine description, load average)

from fedrepro.papers.ppsgd import ppsgd_exp  # noqa: E402
from fedrepro.papers.ppsgd.experiments.synthetic import draw_problem, excess_risk, train_grid  # noqa: E402
from fedrepro.papers.ppsgd.stepsizes import parse_alpha, step_size_arrays, step_sizes  # noqa: E402
from fedrepro.privacy import epsilon_curve  # noqa: E402

GRIDS = {
    "quick": {"steps": [0.2, 0.7, 1.5], "alphas": [0, 0.3, 1, "inf"]},
    "paper": {
        "steps": [0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0, 1.2, 1.5, 1.8],
        "alphas": [0, 0.1, 0.3, 1, 3, 10, 30, 100, "inf"],
    },
}
# config/ppsgd.yaml fig1a_synthetic (paper params)
PROBLEM = {
    "n_users": 1000,
    "d": 100,
    "n_personal": 5,
    "theta0_std": 10.0,
    "personal_std": 0.01,
    "noise_std": 0.01,
    "m": 10,
    "clip": 10.0,
    "delta": 1e-4,
}


# ------------------------------------------------------------------------------------------- official code


class OfficialData:
    """The official script's data object: fixed theta* (N, d) and variances, fresh batches (b, N, d) per call from
    its own RandomState; ``excess_risk`` is the code's mean over users and coordinates of
    var * (w + theta - theta*)^2."""

    def __init__(self, theta_star: np.ndarray, lam: np.ndarray, noise_std: float, seed: int = 42):
        self.theta0, self.var, self.sigma = theta_star, lam, noise_std
        self.N, self.d = theta_star.shape
        self.rd = np.random.RandomState(seed)

    def get_batch(self, b: int):
        X = self.rd.randn(b, self.N, self.d) * np.sqrt(self.var)[None, None, :]
        return X, np.sum(X * self.theta0[None], axis=2) + self.sigma * self.rd.randn(b, self.N)

    def excess_risk(self, w, thetas):
        return np.mean(self.var[None, :] * ((w[None, :] + thetas) - self.theta0) ** 2)


class FixedBatches(OfficialData):
    """The same object fed pre-drawn batches (for the equivalence check)."""

    def __init__(self, theta_star, lam, X: np.ndarray, Y: np.ndarray):
        super().__init__(theta_star, lam, 0.0)
        self.X, self.Y, self.t = X, Y, 0  # X (T, N, m, d), Y (T, N, m)

    def get_batch(self, b: int):
        X, Y = self.X[self.t], self.Y[self.t]
        self.t += 1
        return np.swapaxes(X, 0, 1), Y.T  # the code's layout (b, N, d), (b, N)


def official_training_priv(
    ds: OfficialData,
    *,
    batch_size: int,
    stepw: float,
    steptheta: float,
    niter: int,
    C: float,
    noise_mult: float,
    delta: float,
    noise=None,
    accountant: bool = True,
    user_loop: bool = False,
):
    """One grid configuration as the official ``training_priv`` runs it: (excess risk per iteration, epsilons).
    ``noise(t)`` (d,) replaces ``np.random.randn(d)`` for the equivalence check. ``user_loop``: the per-user Python
    loop of the notes' pseudo-code instead of broadcasting (same math)."""
    from opacus.accountants.rdp import RDPAccountant

    w = np.zeros(ds.d)
    thetas = np.zeros((ds.N, ds.d))
    priv = RDPAccountant() if accountant else None
    ls, epss = [], []
    for t in range(niter):
        X, y = ds.get_batch(batch_size)  # (b, N, d), (b, N)
        if user_loop:
            grad = np.empty_like(thetas)
            for i in range(ds.N):
                Xi = X[:, i, :]
                grad[i] = Xi.T @ (Xi @ (w + thetas[i]) - y[:, i]) / batch_size
        else:
            pred = np.sum(X * (w[None, :] + thetas), axis=2)
            grad = np.sum(X * (pred - y)[:, :, None], axis=0) / batch_size
        if steptheta > 0:
            thetas -= steptheta * grad
        grad /= np.clip(np.linalg.norm(grad, axis=1) / C, a_min=1.0, a_max=None)[:, None]
        w_grad = np.mean(grad, axis=0)
        if stepw > 0:
            xi = np.random.randn(ds.d) if noise is None else noise(t)
            w -= stepw * (w_grad + noise_mult * C * xi / ds.N)
            if priv is not None:
                priv.step(noise_multiplier=noise_mult, sample_rate=1.0)
        ls.append(ds.excess_risk(w, thetas))
        if priv is not None:
            epss.append(priv.get_privacy_spent(delta=delta)[0] if priv.history else 0.0)
    return np.array(ls), np.array(epss)


def official_grid(ds, grid, *, sigma, niter, noise=None, accountant=True, user_loop=False, configs=None):
    """The official driver: one ``training_priv`` call per (step, alpha_c) configuration, in grid order; with
    ``configs`` = K < len(grid), K configurations evenly spread over the grid (local, joint and global ones alike)."""
    out = []
    pick = (
        range(len(grid)) if configs is None else np.unique(np.linspace(0, len(grid) - 1, configs).round().astype(int))
    )
    for g in pick:
        step, alpha = grid[g]
        eta_w, eta_theta = step_sizes(step, alpha)  # the code's map (fedrepro.papers.ppsgd.stepsizes, tested)
        ls, _ = official_training_priv(
            ds,
            batch_size=PROBLEM["m"],
            stepw=eta_w,
            steptheta=eta_theta,
            niter=niter,
            C=PROBLEM["clip"],
            noise_mult=sigma,
            delta=PROBLEM["delta"],
            noise=None if noise is None else (lambda t, g=g: noise[t][:, 0, g]),
            accountant=accountant,
            user_loop=user_loop,
        )
        out.append(ls)
    return np.stack(out, axis=1)  # (niter, G)


# ------------------------------------------------------------------------------------------- fedrepro


class _NoiseFeed:
    """An rng stand-in for ``ppsgd_exp.round_step``: its t-th ``standard_normal`` call returns ``noise[t]``."""

    def __init__(self, noise):
        self.noise, self.t = noise, 0

    def standard_normal(self, shape):
        z = self.noise[self.t]
        assert z.shape == tuple(shape), (z.shape, shape)
        self.t += 1
        return z


def fedrepro_fixed(theta_star, lam, X, Y, eta_w, eta_theta, sigma, noise) -> np.ndarray:
    """fedrepro's round_step on the given batches and noise: (niter, G) excess risk (iterations 1..niter)."""
    N, d = theta_star.shape
    state = ppsgd_exp.State.zeros(N, d, 1, len(eta_w))
    feed = _NoiseFeed(noise)
    out = []
    for t in range(len(X)):
        ppsgd_exp.round_step(state, np.arange(N), X[t], Y[t][..., None], eta_w, eta_theta, sigma, PROBLEM["clip"], feed)
        out.append(excess_risk(state.w, state.theta, theta_star, lam))
    return np.array(out)


def fedrepro_run(p: dict, sigma: float, theta_star, lam, eta_w, eta_theta, seed: int) -> np.ndarray:
    """What ``ppsgd.fig1a_synthetic`` runs per sigma: the grid's training and epsilon of the whole curve."""
    risk = train_grid(p, sigma, theta_star, lam, eta_w, eta_theta, np.random.default_rng(seed))
    if sigma > 0:
        epsilon_curve(sigma, 1.0, list(range(1, p["niter"] + 1)), p["delta"], "opacus_rdp")
    return risk


# ------------------------------------------------------------------------------------------- main


def equivalence(grid, sigma: float, niter: int, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    p = {**PROBLEM, "n_users": 200, "d": 100}
    _, theta_star, lam = draw_problem(p, rng)
    N, d, m = theta_star.shape[0], p["d"], p["m"]
    X = rng.standard_normal((niter, N, m, d)) * np.sqrt(lam)
    Y = (X @ theta_star[:, :, None])[..., 0] + p["noise_std"] * rng.standard_normal((niter, N, m))
    noise = rng.standard_normal((niter, d, 1, len(grid)))
    eta_w, eta_theta = step_size_arrays([s for s, _ in grid], [a for _, a in grid])
    ours = fedrepro_fixed(theta_star, lam, X, Y, eta_w, eta_theta, sigma, noise)
    ds = FixedBatches(theta_star, lam, X, Y)
    ref = []
    for g, (step, alpha) in enumerate(grid):
        ds.t = 0
        ew, et = step_sizes(step, alpha)
        ls, _ = official_training_priv(
            ds,
            batch_size=m,
            stepw=ew,
            steptheta=et,
            niter=niter,
            C=p["clip"],
            noise_mult=sigma,
            delta=p["delta"],
            noise=lambda t, g=g: noise[t][:, 0, g],
            accountant=False,
        )
        ref.append(ls * d)  # the code's per-coordinate mean -> R
    ref = np.stack(ref, axis=1)
    rel = np.abs(ours - ref) / np.maximum(np.abs(ref), 1e-300)
    return {
        "users": N,
        "d": d,
        "iterations": niter,
        "configs": len(grid),
        "sigma": sigma,
        "dtype": "float64",
        "max_rel_diff": float(rel.max()),
        "tolerance": 1e-9,
        "ok": bool(rel.max() <= 1e-9),
        "final_risk_range": [float(ref[-1].min()), float(ref[-1].max())],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", choices=list(GRIDS), default="quick")
    ap.add_argument("--sigma", type=float, default=10.0)
    ap.add_argument("--niter", type=int, default=100, help="iterations (the paper's 300 at --niter 300)")
    ap.add_argument(
        "--official-configs",
        type=int,
        default=None,
        help="time the official loop on K configurations spread over the grid and extrapolate per config",
    )
    ap.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float64",
        help="fedrepro's training dtype (config/ppsgd.yaml uses float32; the official code float64)",
    )
    ap.add_argument("--user-loop", action="store_true", help="also time a per-user Python loop variant")
    ap.add_argument("--out", type=Path, default=S.HERE / "results" / "ppsgd.json")
    args = ap.parse_args()
    wall0 = time.perf_counter()
    g = GRIDS[args.grid]
    alphas = [parse_alpha(a) for a in g["alphas"]]
    grid = [(s, a) for a in alphas for s in g["steps"]]  # fedrepro's order: alpha-major
    G = len(grid)

    with threadpool_limits(limits=1, user_api="blas"):
        eq = equivalence(grid, args.sigma, 30)
        print(
            f"equivalence (same samples and noise, {eq['configs']} configs, {eq['iterations']} iterations): "
            f"max rel diff {eq['max_rel_diff']:.2e} -> {'ok' if eq['ok'] else 'FAIL'}",
            flush=True,
        )
        if not eq["ok"]:
            raise SystemExit("fedrepro and the official loop disagree: not timing")

        p = {**PROBLEM, "niter": args.niter, "dtype": args.dtype}
        _, theta_star, lam = draw_problem(p, np.random.default_rng(0))
        eta_w, eta_theta = step_size_arrays([s for s, _ in grid], [a for _, a in grid])
        with S.Load() as load_f:
            t0 = time.perf_counter()
            fedrepro_run(p, args.sigma, theta_star, lam, eta_w, eta_theta, 0)
            t_fed = time.perf_counter() - t0
        print(
            f"fedrepro: {G} configs x {args.niter} iterations in {t_fed:.2f} s "
            f"(load {load_f.before[0]:.2f}->{load_f.after[0]:.2f})",
            flush=True,
        )

        K = min(G, args.official_configs or G)
        ds = OfficialData(theta_star, lam, p["noise_std"])
        np.random.seed(0)
        with S.Load() as load_o:
            t0 = time.perf_counter()
            official_grid(ds, grid, sigma=args.sigma, niter=args.niter, configs=K)
            t_off_k = time.perf_counter() - t0
        t_off = t_off_k * G / K
        print(
            f"official loop: {K} configs x {args.niter} iterations in {t_off_k:.2f} s"
            + (f" -> {G} configs extrapolated {t_off:.1f} s" if K < G else "")
            + f" (load {load_o.before[0]:.2f}->{load_o.after[0]:.2f})",
            flush=True,
        )
        user_loop = None
        if args.user_loop:
            it = min(5, args.niter)
            ds = OfficialData(theta_star, lam, p["noise_std"])
            t0 = time.perf_counter()
            official_grid(ds, grid, sigma=args.sigma, niter=it, configs=1, user_loop=True)
            dt = time.perf_counter() - t0
            user_loop = {
                "iterations_timed": it,
                "configs_timed": 1,
                "s_per_config_iteration": dt / it,
                "extrapolated_grid_s": dt / it * args.niter * G,
            }
            print(
                f"per-user Python loop variant: {dt / it * 1e3:.0f} ms per config-iteration -> grid "
                f"{user_loop['extrapolated_grid_s']:.0f} s (extrapolated)",
                flush=True,
            )

    out = {
        "benchmark": "PPSGD synthetic (Fig. 1a): fedrepro.papers.ppsgd.ppsgd_exp (vectorized over users and grid) "
        "vs the official code's numpy loop (one training_priv call per configuration)",
        "setting": {
            **{k: v for k, v in PROBLEM.items()},
            "niter": args.niter,
            "sigma": args.sigma,
            "grid": args.grid,
            "steps": g["steps"],
            "alphas": g["alphas"],
            "configs": G,
            "fedrepro_dtype": args.dtype,
            "official_dtype": "float64",
            "blas_threads": 1,
            "included": "training, data generation and epsilon per iteration (opacus RDP) "
            "in both; fedrepro shares one data stream over the grid, the official code draws per call",
        },
        "machine": S.machine(),
        "equivalence": eq,
        "fedrepro": {
            "wall_s": t_fed,
            "iterations_per_s": args.niter / t_fed,
            "config_iterations_per_s": G * args.niter / t_fed,
            **load_f.record(),
        },
        "official": {
            "configs_timed": K,
            "wall_s_timed": t_off_k,
            "wall_s_grid": t_off,
            "extrapolated": K < G,
            "iterations_per_s": args.niter * K / t_off_k,
            "config_iterations_per_s": K * args.niter / t_off_k,
            **load_o.record(),
        },
        "official_user_loop_variant": user_loop,
        "speedup_fedrepro_over_official": t_off / t_fed,
        "wall_s": time.perf_counter() - wall0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"speedup fedrepro / official: {out['speedup_fedrepro_over_official']:.1f}x; wrote {args.out} "
        f"({out['wall_s']:.0f} s)"
    )


if __name__ == "__main__":
    main()
