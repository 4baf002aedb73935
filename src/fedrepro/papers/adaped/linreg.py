"""Personalized linear regression (Ozkara et al. 2023, App. E; experiment of App. K "Linear regression").

Model (eq. 46): Y_i = X_i theta_i + w_i, w_i ~ N(0, s_x^2 I_n), theta_i ~ N(mu, s_theta^2 I_d), i = 1..m.

* :func:`known_prior` - Thm 7, eq. (47): theta_i = M_i^-1 (X_i'Y_i/s_x^2 + mu/s_theta^2), M_i = I/s_theta^2 +
  X_i'X_i/s_x^2 (literal batched ``np.linalg.solve``); :meth:`Spectrum.posterior` is the same estimator through a
  thin SVD, O(m n d) per evaluation. :func:`trace_inv_M` is its exact conditional MSE Tr(M_i^-1), eq. (48).
* :func:`local_estimate` - eq. (52) with the pseudo-inverse when X_i'X_i is singular (n < d); its exact
  conditional MSE :func:`local_pinv_mse` reduces to eq. (53), s_x^2 Tr((X'X)^-1), under full column rank.
* :func:`fedavg_estimate` - the paper's undefined "FedAvg regression" (default: one least-squares model on the
  pooled data of all clients; option: mean of the local estimates).
* :func:`objective` - the negative log-likelihood (54); :func:`client_gradients` - the per-client gradients that
  Algorithm 4 lines 6-9 step along (minus signs restored, docs/notes/adaped.md Sec. 2.8); :func:`alg4` - Algorithm 4.
* :func:`stationary_points` - every interior stationary point of (54) (docs/notes/adaped.md Sec. 8.12), found directly.

All arrays are batched over clients: X (m, n, d), Y (m, n), theta (m, d). No Python loop runs over clients.

Finding (checked by :func:`stationary_points`): (54) is a joint MAP objective and is unbounded below - s_theta^2 -> 0
with every theta_i = mu, and for n < d also s_x^2 -> 0 with interpolating theta_i. At the App. K setting (n = 10 <
d) its only interior stationary point is a saddle, so Algorithm 4 run to convergence ends on one of these
degenerate boundaries; which one depends on the (unstated) initialization.

GAP defaults of Algorithm 4 (T, eta, initialization are not in the paper): see :func:`alg4` and config/adaped.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq


@dataclass(frozen=True)
class Data:
    X: np.ndarray  # (m, n, d)
    Y: np.ndarray  # (m, n)
    theta: np.ndarray  # (m, d) true personalized models
    mu: np.ndarray  # (d,) true population mean


def simulate(
    m: int, n: int, d: int, sigma_theta2: float, sigma_x2: float, mu_std: float, x_var: float, rng: np.random.Generator
) -> Data:
    """App. K: mu_k ~ N(0, mu_std^2), theta_i ~ N(mu, s_theta^2 I), X entries ~ N(0, x_var), Y = X theta + w."""
    mu = mu_std * rng.standard_normal(d)
    theta = mu + math.sqrt(sigma_theta2) * rng.standard_normal((m, d))
    X = math.sqrt(x_var) * rng.standard_normal((m, n, d))
    Y = _matvec(X, theta) + math.sqrt(sigma_x2) * rng.standard_normal((m, n))
    return Data(X=X, Y=Y, theta=theta, mu=mu)


def _matvec(X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """X_i theta_i for every client: (m, n, d) x (m, d) -> (m, n)."""
    return (X @ theta[:, :, None])[:, :, 0]


def _rmatvec(X: np.ndarray, r: np.ndarray) -> np.ndarray:
    """X_i' r_i for every client: (m, n, d) x (m, n) -> (m, d)."""
    return (r[:, None, :] @ X)[:, 0, :]


# ----------------------------------------------------------------------------------------------------------------
# Known prior (Thm 7) and local estimator (eq. 52)
# ----------------------------------------------------------------------------------------------------------------


def known_prior(X: np.ndarray, Y: np.ndarray, mu: np.ndarray, sigma_theta2: float, sigma_x2: float) -> np.ndarray:
    """Eq. (47), literally: one batched (m, d, d) solve. O(m d^3); prefer :meth:`Spectrum.posterior` at scale."""
    d = X.shape[2]
    M = np.eye(d) / sigma_theta2 + np.swapaxes(X, 1, 2) @ X / sigma_x2
    b = _rmatvec(X, Y) / sigma_x2 + np.broadcast_to(mu, (X.shape[0], d)) / sigma_theta2
    return np.linalg.solve(M, b[:, :, None])[:, :, 0]


@dataclass(frozen=True)
class Spectrum:
    """Thin SVD X_i = U_i diag(s_i) V_i of every client (r = min(n, d)), computed once; all estimators reuse it."""

    s: np.ndarray  # (m, r) singular values, descending
    Vh: np.ndarray  # (m, r, d)
    UtY: np.ndarray  # (m, r) U_i' Y_i
    n: int
    d: int

    @classmethod
    def of(cls, X: np.ndarray, Y: np.ndarray) -> Spectrum:
        U, s, Vh = np.linalg.svd(X, full_matrices=False)
        UtY = (Y[:, None, :] @ U)[:, 0, :]
        return cls(s=s, Vh=Vh, UtY=UtY, n=X.shape[1], d=X.shape[2])

    def _V(self, v: np.ndarray) -> np.ndarray:  # V_i v_i: (m, d) -> (m, r)
        return (self.Vh @ v[:, :, None])[:, :, 0]

    def _Vt(self, c: np.ndarray) -> np.ndarray:  # V_i' c_i: (m, r) -> (m, d)
        return (c[:, None, :] @ self.Vh)[:, 0, :]

    def posterior(self, mu: np.ndarray, lam: float) -> np.ndarray:
        """Eq. (47) with lam = s_x^2/s_theta^2: (X'X + lam I)^-1 (X'Y + lam mu) = mu + V'[s (U'Y - s V mu)/(s^2+lam)].

        lam -> inf gives mu (the prior); lam -> 0 gives mu + pinv(X)(Y - X mu), the min-distance interpolant.
        """
        mu_b = np.broadcast_to(mu, (self.s.shape[0], self.d))
        c = self.s * (self.UtY - self.s * self._V(mu_b)) / (self.s**2 + lam)
        return mu_b + self._Vt(c)

    def trace_inv_M(self, sigma_theta2: float, sigma_x2: float) -> np.ndarray:
        """Eq. (48): Tr(M_i^-1) = s_theta^2 (d - r) + sum_k 1/(1/s_theta^2 + s_k^2/s_x^2), per client."""
        r = self.s.shape[1]
        return sigma_theta2 * (self.d - r) + (1.0 / (1.0 / sigma_theta2 + self.s**2 / sigma_x2)).sum(axis=1)

    def _keep(self) -> np.ndarray:
        """Numerically non-zero singular values (the rule of ``np.linalg.pinv``)."""
        tol = self.s[:, :1] * max(self.n, self.d) * np.finfo(float).eps
        return self.s > tol

    def local_pinv(self) -> np.ndarray:
        """Eq. (52): (X'X)^-1 X'Y, or pinv(X) Y when X'X is singular (n < d)."""
        keep = self._keep()
        return self._Vt(np.where(keep, self.UtY / np.where(keep, self.s, 1.0), 0.0))

    def local_pinv_mse(self, theta: np.ndarray, sigma_x2: float) -> np.ndarray:
        """Exact E_w ||pinv(X)Y - theta||^2 given X, theta: ||(I - P_row) theta||^2 + s_x^2 sum 1/s_k^2 (eq. 53)."""
        keep = self._keep()
        Vth = np.where(keep, self._V(theta), 0.0)
        bias = (theta**2).sum(axis=1) - (Vth**2).sum(axis=1)
        return np.maximum(bias, 0.0) + sigma_x2 * np.where(keep, 1.0 / np.where(keep, self.s, 1.0) ** 2, 0.0).sum(1)


def trace_inv_M(X: np.ndarray, sigma_theta2: float, sigma_x2: float) -> np.ndarray:
    """Eq. (48) from the eigenvalues of the smaller Gram matrix (X X' or X'X), per client."""
    m, n, d = X.shape
    G = X @ np.swapaxes(X, 1, 2) if n < d else np.swapaxes(X, 1, 2) @ X
    ev = np.clip(np.linalg.eigvalsh(G), 0.0, None)
    return sigma_theta2 * (d - G.shape[1]) + (1.0 / (1.0 / sigma_theta2 + ev / sigma_x2)).sum(axis=1)


LOCAL_KINDS = ("pinv", "ridge", "ridge_marginal_prior")


def local_estimate(
    spec: Spectrum, kind: str = "pinv", ridge: float = 0.0, marginal_lam: float | None = None
) -> np.ndarray:
    """Local (single-client) estimators.

    pinv: eq. (52) (the paper's). ridge: (X'X + ridge I)^-1 X'Y, shrinking to 0. ridge_marginal_prior: the Bayes
    estimator of one client that knows only the marginal prior theta ~ N(0, (mu_std^2 + s_theta^2) I), i.e. ridge
    with lam = s_x^2/(mu_std^2 + s_theta^2) passed as ``marginal_lam`` (not in the paper; a deviation probe).
    """
    if kind == "pinv":
        return spec.local_pinv()
    zero = np.zeros(spec.d)
    if kind == "ridge":
        return spec.posterior(zero, ridge)
    if kind == "ridge_marginal_prior":
        return spec.posterior(zero, float(marginal_lam))
    raise ValueError(f"unknown local estimator {kind!r} (known: {', '.join(LOCAL_KINDS)})")


def null_space_floor(mu: np.ndarray, sigma_theta2: float, n: int) -> float:
    """The smallest expected MSE of any estimator of theta_i from client i's data alone (given mu's law is centred
    at 0), for isotropic X_i with n < d: nothing about theta_i is learnt in the (d - n)-dim null space of X_i, a
    uniformly random subspace, so E||P_null theta_i||^2 = (d - n)/d (||mu||^2 + d s_theta^2) is lost (0 when n >= d).
    Averaged over mu ~ N(0, mu_std^2 I) it is (d - n)(mu_std^2 + s_theta^2) (App. K: 0.80 at d = 50, 1.80 at d =
    100)."""
    d = mu.shape[0]
    return max(d - n, 0) / d * (float(mu @ mu) + d * sigma_theta2)


def mmse_gain_bound_pct(mse_known: float, mse_reference: float) -> float:
    """The largest MSE gain (%) over a reference estimator that any personalized estimator can have: eq. (47) with the
    true mu and variances is the MMSE estimator of theta_i (the other clients' data are independent of theta_i given
    mu), so no estimator's expected MSE is below E Tr(M_i^-1) (eq. 48)."""
    return 100.0 * (1.0 - mse_known / mse_reference)


FEDAVG_KINDS = ("pooled_ls", "mean_local")


def fedavg_estimate(
    X: np.ndarray, Y: np.ndarray, kind: str = "pooled_ls", local: np.ndarray | None = None
) -> np.ndarray:
    """The paper's undefined "FedAvg regression": one global model (d,) used by every client.

    pooled_ls (default): least squares on the pooled data, (sum_i X_i'X_i)^-1 sum_i X_i'Y_i, which FedAvg with
    full-batch local GD converges to. mean_local: one-shot average of the local estimates ``local``.
    """
    if kind == "pooled_ls":
        m, n, d = X.shape
        Xf, Yf = X.reshape(m * n, d), Y.reshape(m * n)
        return np.linalg.lstsq(Xf.T @ Xf, Xf.T @ Yf, rcond=None)[0]
    if kind == "mean_local":
        return local.mean(axis=0)
    raise ValueError(f"unknown FedAvg estimator {kind!r} (known: {', '.join(FEDAVG_KINDS)})")


# ----------------------------------------------------------------------------------------------------------------
# Objective (54), Algorithm 4, stationary points
# ----------------------------------------------------------------------------------------------------------------


def objective(X, Y, theta, mu, sigma_x2: float, sigma_theta2: float) -> float:
    """Eq. (54): (nm/2)log(2 pi s_x^2) + sum (Y-X theta)^2/(2 s_x^2) + (md/2)log(2 pi s_th^2) + sum||th-mu||^2/(2
    s_th^2)."""
    rss = ((Y - _matvec(X, theta)) ** 2).sum(axis=1)
    return _objective_from(rss, theta, mu, sigma_x2, sigma_theta2, X.shape[1], X.shape[2])


@dataclass(frozen=True)
class Gradients:
    """Per-client gradients of Alg. 4 lines 6-9 at the broadcast (mu, s_x^2, s_theta^2).

    theta[i] = d(54)/d theta_i; summing mu, sigma_x2, sigma_theta2 over clients gives d(54)/d mu, d s_x^2, d s_th^2.
    """

    theta: np.ndarray  # (m, d)
    mu: np.ndarray  # (m, d)
    sigma_x2: np.ndarray  # (m,)
    sigma_theta2: np.ndarray  # (m,)
    rss: np.ndarray  # (m,) ||Y_i - X_i theta_i||^2 (reused for the objective)


def client_gradients(X, Y, theta, mu, sigma_x2: float, sigma_theta2: float) -> Gradients:
    n, d = X.shape[1], X.shape[2]
    r = Y - _matvec(X, theta)
    diff = mu - theta
    rss, dss = (r**2).sum(axis=1), (diff**2).sum(axis=1)
    return Gradients(
        theta=-_rmatvec(X, r) / sigma_x2 - diff / sigma_theta2,
        mu=diff / sigma_theta2,
        sigma_x2=n / (2 * sigma_x2) - rss / (2 * sigma_x2**2),
        sigma_theta2=d / (2 * sigma_theta2) - dss / (2 * sigma_theta2**2),
        rss=rss,
    )


@dataclass
class Alg4Result:
    theta: np.ndarray
    mu: np.ndarray
    sigma_x2: float
    sigma_theta2: float
    iterations: int
    diverged: bool
    history: list[dict] = field(default_factory=list)


INIT_THETA = ("zeros", "local", "fedavg")


def alg4(
    X,
    Y,
    T: int,
    eta: float,
    *,
    step: str = "scaled",
    init_theta: str = "local",
    init_sigma_x2: float = 1.0,
    init_sigma_theta2: float = 1.0,
    record_every: int = 1,
    theta_true: np.ndarray | None = None,
    spec: Spectrum | None = None,
) -> Alg4Result:
    """Algorithm 4 ("Linear Regression GD"), Jacobi style: every update of iteration t reads iterate t-1.

    Clients step theta_i, mu_i, s_x,i^2, s_theta,i^2 along minus :func:`client_gradients`; the server averages
    mu_i, s_theta,i^2, s_x,i^2 and broadcasts them (line 13's "s_x" label for the s_theta average is a typo).

    step = "plain": the paper's single learning rate eta on every block (GD on (54); the s^2 blocks have curvature
    ~ d/(2 s_theta^4), so eta must be tiny and convergence takes very many iterations; a step that makes a
    variance non-positive stops the run with ``diverged``). step = "scaled" (GAP default): eta is relative to the
    data scale of each block - theta_i: eta / (s_max(X_i)^2/s_x^2 + 1/s_theta^2) (its Lipschitz constant); mu:
    eta s_theta^2; s_x^2: eta 2 s_x^4/n; s_theta^2: eta 2 s_theta^4/d (inverse curvatures at the current iterate),
    i.e. s_x^2 <- (1-eta) s_x^2 + eta RSS_i/n, which keeps variances positive for 0 < eta <= 1. Both modes have
    the same fixed points (the stationary points of (54)).

    init_theta: "local" (eq. 52 pinv), "zeros" or "fedavg" (pooled LS); mu^0 = mean_i theta_i^0.
    """
    m, n, d = X.shape
    if init_theta == "local":
        theta = (spec or Spectrum.of(X, Y)).local_pinv()
    elif init_theta == "zeros":
        theta = np.zeros((m, d))
    elif init_theta == "fedavg":
        theta = np.tile(fedavg_estimate(X, Y), (m, 1))
    else:
        raise ValueError(f"unknown init_theta {init_theta!r} (known: {', '.join(INIT_THETA)})")
    mu, sx2, st2 = theta.mean(axis=0), float(init_sigma_x2), float(init_sigma_theta2)
    if step == "scaled":
        smax2 = (spec.s[:, 0] if spec is not None else np.linalg.norm(X, ord=2, axis=(1, 2))) ** 2
    elif step != "plain":
        raise ValueError(f"unknown step {step!r} (known: plain, scaled)")
    hist: list[dict] = []

    def record(t: int, g: Gradients) -> None:
        row = {
            "t": t,
            "objective": _objective_from(g.rss, theta, mu, sx2, st2, n, d),
            "sigma_x2": sx2,
            "sigma_theta2": st2,
        }
        if theta_true is not None:
            row["mse"] = float(((theta - theta_true) ** 2).sum(axis=1).mean())
        hist.append(row)

    diverged, t = False, 0
    g = client_gradients(X, Y, theta, mu, sx2, st2)
    record(0, g)
    for t in range(1, T + 1):
        if step == "scaled":
            e_th = (eta / (smax2 / sx2 + 1.0 / st2))[:, None]
            e_mu, e_x, e_t = eta * st2, eta * 2 * sx2**2 / n, eta * 2 * st2**2 / d
        else:
            e_th = e_mu = e_x = e_t = eta
        new_theta = theta - e_th * g.theta
        new_mu = mu - e_mu * g.mu.mean(axis=0)  # = mean_i of the clients' mu_i^t (line 13)
        new_sx2 = sx2 - e_x * float(g.sigma_x2.mean())
        new_st2 = st2 - e_t * float(g.sigma_theta2.mean())
        if not (new_sx2 > 0 and new_st2 > 0 and np.isfinite(new_theta).all()):
            diverged, t = True, t - 1
            if hist[-1]["t"] != t:
                record(t, g)
            break
        theta, mu, sx2, st2 = new_theta, new_mu, new_sx2, new_st2
        g = client_gradients(X, Y, theta, mu, sx2, st2)
        if t % record_every == 0 or t == T:
            record(t, g)
    return Alg4Result(theta=theta, mu=mu, sigma_x2=sx2, sigma_theta2=st2, iterations=t, diverged=diverged, history=hist)


def _objective_from(rss, theta, mu, sx2, st2, n, d) -> float:
    """Eq. (54) from the per-client residual sums of squares ``rss``."""
    m = theta.shape[0]
    S = float(((theta - mu) ** 2).sum())
    return (
        n * m / 2 * math.log(2 * math.pi * sx2)
        + float(rss.sum()) / (2 * sx2)
        + m * d / 2 * math.log(2 * math.pi * st2)
        + S / (2 * st2)
    )


@dataclass(frozen=True)
class Stationary:
    """A stationary point of (54) and the slope of the alternating map there (|slope| < 1: attracting)."""

    theta: np.ndarray
    mu: np.ndarray
    sigma_x2: float
    sigma_theta2: float
    lam: float
    slope: float


def profile(spec: Spectrum, Y: np.ndarray, X: np.ndarray, lam: float):
    """Exact minimizer (theta, mu) of (54) for a fixed ratio lam = s_x^2/s_theta^2, then the optimal variances.

    theta_i = eq. (47) at mu and mu = mean theta_i give the generalized least-squares equation
    A mu = b, A = sum_i V_i' diag(s^2/(s^2+lam)) V_i, b = sum_i V_i' (s U'Y/(s^2+lam)), solved by conjugate
    gradients (A v costs O(m r d); forming A would cost O(m r d^2)); then (docs/notes/adaped.md Sec. 8.12)
    s_theta^2 = sum ||theta_i - mu||^2/(md) and s_x^2 = sum ||Y_i - X_i theta_i||^2/(mn).
    """
    m, r = spec.s.shape
    V = spec.Vh.reshape(m * r, spec.d)
    w = (spec.s**2 / (spec.s**2 + lam)).reshape(m * r)
    b = (spec.s * spec.UtY / (spec.s**2 + lam)).reshape(m * r) @ V
    mu = _cg(lambda v: (w * (V @ v)) @ V, b)
    theta = spec.posterior(mu, lam)
    n = X.shape[1]
    sx2 = float(((Y - _matvec(X, theta)) ** 2).sum()) / (m * n)
    st2 = float(((theta - mu) ** 2).sum()) / (m * spec.d)
    return theta, mu, sx2, st2


def _cg(A, b: np.ndarray, rtol: float = 1e-13, max_iter: int | None = None) -> np.ndarray:
    """Conjugate gradients for a symmetric positive (semi)definite operator A."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr, stop = float(r @ r), (rtol * float(np.linalg.norm(b))) ** 2
    for _ in range(max_iter or 4 * b.size):
        if rr <= stop:
            break
        Ap = A(p)
        alpha = rr / float(p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rr_new = float(r @ r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def stationary_points(X, Y, spec: Spectrum | None = None, span: float = 1e4, grid: int = 17) -> list[Stationary]:
    """All interior stationary points of (54): roots of h(log lam) = log(s_x^2(lam)/s_theta^2(lam)) - log lam.

    Stationarity (docs/notes/adaped.md Sec. 8.12) is theta = (47), mu = mean theta, s_theta^2 = S/(md), s_x^2 = R/(mn);
    for a fixed
    lam the first two have the unique solution :func:`profile`, so the stationary points are exactly the fixed points
    lam = s_x^2(lam)/s_theta^2(lam). They are bracketed on a log grid of lam over [c/span, c span] (c = mean
    squared singular value of X_i) and refined with Brent's method. ``slope`` = d log(s_x^2/s_theta^2)/d log lam at
    the root: > 1 means the exact alternating map (and GD) moves away from it (a saddle of (54)). (54) is unbounded
    below (s_theta^2 -> 0 with theta_i = mu; for n < d also s_x^2 -> 0 with interpolating theta_i), so these are
    never global minima.
    """
    spec = spec or Spectrum.of(X, Y)
    c = float((spec.s**2).mean())

    def h(z: float) -> float:
        _, _, sx2, st2 = profile(spec, Y, X, math.exp(z))
        return math.log(sx2) - math.log(st2) - z

    zs = np.linspace(math.log(c / span), math.log(c * span), grid)
    hs = [h(z) for z in zs]
    out = []
    for z0, z1, h0, h1 in zip(zs[:-1], zs[1:], hs[:-1], hs[1:]):
        if np.sign(h0) == np.sign(h1):
            continue
        z = brentq(h, z0, z1, xtol=1e-10, rtol=1e-12)
        dz = 1e-4
        slope = 1.0 + (h(z + dz) - h(z - dz)) / (2 * dz)
        theta, mu, sx2, st2 = profile(spec, Y, X, math.exp(z))
        out.append(Stationary(theta=theta, mu=mu, sigma_x2=sx2, sigma_theta2=st2, lam=math.exp(z), slope=slope))
    return out
