"""Epsilon of the (subsampled) Gaussian mechanism composed over T steps, through maintained libraries.

Accountants (``accountant=``):

- ``rdp``: dp_accounting.rdp.RdpAccountant. RDP of the Poisson-subsampled Gaussian (Mironov, Talwar, Zhang 2019),
  composed by addition, converted with the library's improved conversion (Balle et al. 2020 Thm 21 /
  Canonne, Kamath, Steinke 2020): eps = min_a RDP(a) + log1p(-1/a) - log(delta*a)/(a-1).
- ``rdp_classic``: the same library RDP curve, converted with the classic eps = min_a RDP(a) + log(1/delta)/(a-1)
  (see conversion.py). Never smaller than ``rdp``.
- ``pld``: dp_accounting.pld.PLDAccountant (privacy loss distributions, Koskela et al. / Meiser-Mohammadi;
  pessimistic discretisation of the privacy loss on a grid of width ``pld_discretization``, default 1e-4, the
  library default), queried with get_epsilon(delta). Tight up to the discretisation; no orders.
- ``opacus_rdp``: opacus.accountants.RDPAccountant used the way PPSGD's official code used it: one
  ``step(noise_multiplier=sigma, sample_rate=q)`` per round, then ``get_privacy_spent(delta=delta, alphas=orders)``
  (same RDP formulas, Balle et al. conversion).

Orders: DEFAULT_ORDERS = {1.1, ..., 10.9} U {12, ..., 63} unless ``orders`` is given; recorded in every result.

Sampling: ``poisson`` (every client/example independently with probability q; add/remove-one neighbours; q = 1
is the plain Gaussian mechanism) or ``without_replacement`` (a fixed-size batch of q*population; replace-one
neighbours, only where dp-accounting supports it: the ``rdp`` and ``rdp_classic`` accountants).

Known library difference (measured, see tests/privacy/test_accountant.py): at integer orders dp-accounting and
opacus return the same RDP to ~1e-12. At fractional orders dp-accounting 0.6.0 sums |binom(a, i)| (its _log_comb
uses gammaln, which drops the sign of the binomial coefficients with i > a), so its RDP there is *larger* than
opacus' (which keeps the signs and matches numerical integration): dp-accounting's epsilon is never smaller than
opacus'. Measured relative epsilon gap (q <= 0.1, sigma >= 0.8, T <= 1000): < 1e-4 in the FedHDP settings,
<= 8.6e-4 when the optimal order is >= 3, <= 8.3e-3 for epsilon <= 25, up to 8% near epsilon = 40 where the
optimum is a fractional order below 2.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Sequence

from fedrepro.errors import PrivacyError
from fedrepro.privacy.conversion import classic_epsilon
from fedrepro.privacy.orders import DEFAULT_ORDERS, at_edge
from fedrepro.privacy.result import EpsilonResult, library_version
from fedrepro.privacy.validation import (
    check_delta,
    check_noise_multiplier,
    check_orders,
    check_positive,
    check_sampling_rate,
    check_steps,
)

ACCOUNTANTS = ("rdp", "rdp_classic", "pld", "opacus_rdp")
SAMPLINGS = ("poisson", "without_replacement")
DEFAULT_PLD_DISCRETIZATION = 1e-4

_CONVERSION = {
    "rdp": "RDP -> DP: Balle et al. 2020 Thm 21 (dp-accounting compute_epsilon)",
    "rdp_classic": "RDP -> DP: classic, eps = min_a RDP(a) + log(1/delta)/(a-1) (Mironov 2017 Prop. 3)",
    "pld": "PLD get_epsilon_for_delta (pessimistic discretisation)",
    "opacus_rdp": "RDP -> DP: Balle et al. 2020 Thm 21 (opacus get_privacy_spent)",
}


@contextlib.contextmanager
def _quiet():
    """Silence the libraries' per-order convergence warnings (absl logging) and opacus' grid-edge warning; the
    grid-edge fact is recorded in the result instead."""
    absl = logging.getLogger("absl")
    old = absl.level
    absl.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        absl.setLevel(old)


def _check_common(noise_multiplier, sampling_rate, delta, accountant, sampling, population, orders, pld_discretization):
    sigma = check_noise_multiplier(noise_multiplier)
    q = check_sampling_rate(sampling_rate)
    d = check_delta(delta)
    if accountant not in ACCOUNTANTS:
        raise PrivacyError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got accountant={accountant!r}")
    if sampling not in SAMPLINGS:
        raise PrivacyError(f"sampling must be one of {', '.join(SAMPLINGS)}, got sampling={sampling!r}")
    orders = DEFAULT_ORDERS if orders is None else check_orders(orders)
    check_positive(pld_discretization, "pld_discretization")
    sample_size = None
    if sampling == "without_replacement":
        if accountant not in ("rdp", "rdp_classic"):
            raise PrivacyError(
                f"sampling='without_replacement' is supported by dp-accounting's RDP accountant only "
                f"(rdp, rdp_classic), got accountant={accountant!r}"
            )
        if population is None or isinstance(population, bool) or int(population) != population or population < 1:
            raise PrivacyError(
                f"population must be a positive integer for sampling='without_replacement', "
                f"got population={population!r}"
            )
        sample_size = round(q * population)
        if sample_size < 1 or abs(sample_size - q * population) > 1e-9 * population:
            raise PrivacyError(
                f"sampling_rate * population must be an integer batch size, got "
                f"sampling_rate={q!r}, population={population!r}"
            )
    return sigma, q, d, orders, sample_size


def _event(sigma: float, q: float, sampling: str, population, sample_size):
    import dp_accounting as dpa

    if sampling == "without_replacement":
        return dpa.SampledWithoutReplacementDpEvent(int(population), int(sample_size), dpa.GaussianDpEvent(sigma))
    if q == 1.0:
        return dpa.GaussianDpEvent(sigma)
    return dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma))


def _relation(sampling: str) -> str:
    return "REPLACE_ONE" if sampling == "without_replacement" else "ADD_OR_REMOVE_ONE"


def _sampling_name(q: float, sampling: str) -> str:
    return "none" if (q == 1.0 and sampling == "poisson") else sampling


def _rdp_curve_library(sigma, q, steps, orders, sampling, population, sample_size):
    """dp-accounting's RDP curve of `steps` compositions (one fresh RdpAccountant, event composed `steps` times)."""
    import dp_accounting as dpa
    from dp_accounting.rdp import RdpAccountant

    rel = getattr(dpa.NeighboringRelation, _relation(sampling))
    acc = RdpAccountant(orders=list(orders), neighboring_relation=rel)
    with _quiet():
        acc.compose(_event(sigma, q, sampling, population, sample_size), steps)
    return acc


def _result(accountant, eps, d, sigma, q, steps, sampling, orders=None, order=None, disc=None) -> EpsilonResult:
    lib = "opacus" if accountant == "opacus_rdp" else "dp-accounting"
    return EpsilonResult(
        epsilon=float(eps),
        delta=d,
        accountant=accountant,
        library=lib,
        library_version=library_version(lib),
        conversion=_CONVERSION[accountant],
        noise_multiplier=sigma,
        sampling_rate=q,
        steps=int(steps),
        sampling=_sampling_name(q, sampling),
        neighboring_relation=_relation(sampling),
        orders=tuple(float(a) for a in orders) if orders is not None else None,
        optimal_order=float(order) if order is not None else None,
        order_at_grid_edge=bool(at_edge(orders, order)) if orders is not None and order is not None else None,
        pld_discretization=disc,
    )


def _one(accountant, sigma, q, steps, d, orders, sampling, population, sample_size, disc) -> EpsilonResult:
    if accountant in ("rdp", "rdp_classic"):
        acc = _rdp_curve_library(sigma, q, steps, orders, sampling, population, sample_size)
        if accountant == "rdp":
            with _quiet():
                eps, order = acc.get_epsilon_and_optimal_order(d)
        else:
            eps, order = classic_epsilon(acc.orders, acc.rdp, d)
        return _result(accountant, eps, d, sigma, q, steps, sampling, orders, order)
    if accountant == "pld":
        from dp_accounting.pld import PLDAccountant

        acc = PLDAccountant(value_discretization_interval=disc)
        with _quiet():
            acc.compose(_event(sigma, q, sampling, population, sample_size), steps)
            eps = acc.get_epsilon(d)
        return _result(accountant, eps, d, sigma, q, steps, sampling, disc=disc)
    return _opacus_curve(sigma, q, [steps], d, orders)[0]


def _opacus_curve(sigma, q, steps_list, d, orders) -> list[EpsilonResult]:
    """One opacus RDPAccountant, stepped once per round; epsilon read after the rounds in steps_list."""
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    out, done = [], 0
    for t in steps_list:
        for _ in range(t - done):
            acc.step(noise_multiplier=sigma, sample_rate=q)
        done = t
        with _quiet():
            eps, order = acc.get_privacy_spent(delta=d, alphas=list(orders))
        out.append(
            _result(
                "opacus_rdp",
                eps,
                d,
                sigma,
                q,
                t,
                "poisson",
                orders,
                None if order is None or (isinstance(order, float) and math.isnan(order)) else order,
            )
        )
    return out


def compute_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
    *,
    orders: Sequence[float] | None = None,
    sampling: str = "poisson",
    population: int | None = None,
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
) -> EpsilonResult:
    """Epsilon at `delta` of `steps` compositions of the (subsampled) Gaussian mechanism with noise multiplier
    sigma (noise std / L2 sensitivity) and sampling rate q, under one accountant (see module docstring)."""
    sigma, q, d, orders, size = _check_common(
        noise_multiplier, sampling_rate, delta, accountant, sampling, population, orders, pld_discretization
    )
    steps = check_steps(steps)
    return _one(accountant, sigma, q, steps, d, orders, sampling, population, size, pld_discretization)


def epsilon_curve(
    noise_multiplier: float,
    sampling_rate: float,
    steps: Sequence[int],
    delta: float,
    accountant: str = "rdp",
    *,
    orders: Sequence[float] | None = None,
    sampling: str = "poisson",
    population: int | None = None,
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
) -> list[EpsilonResult]:
    """compute_epsilon at each step count in `steps` (sorted ascending, deduplicated); for opacus_rdp a single
    accountant is stepped round by round and read at each count, as PPSGD's code did."""
    sigma, q, d, orders, size = _check_common(
        noise_multiplier, sampling_rate, delta, accountant, sampling, population, orders, pld_discretization
    )
    counts = sorted({check_steps(t) for t in steps})
    if not counts:
        raise PrivacyError(f"steps must list at least one step count, got steps={list(steps)!r}")
    if accountant == "opacus_rdp":
        return _opacus_curve(sigma, q, counts, d, orders)
    if accountant == "pld" and q < 1.0:
        return _pld_curve(sigma, q, counts, d, pld_discretization)
    return [_one(accountant, sigma, q, t, d, orders, sampling, population, size, pld_discretization) for t in counts]


def _pld_curve(sigma, q, counts, d, disc) -> list[EpsilonResult]:
    """PLD of the Poisson-subsampled Gaussian built once, self-composed for each count: the same library calls
    PLDAccountant makes (from_gaussian_mechanism(...).self_compose(count)), without rebuilding the base PLD."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    with _quiet():
        base = pld_lib.from_gaussian_mechanism(
            standard_deviation=sigma, sampling_prob=q, value_discretization_interval=disc
        )
        return [
            _result("pld", base.self_compose(t).get_epsilon_for_delta(d), d, sigma, q, t, "poisson", disc=disc)
            for t in counts
        ]


def gaussian_epsilon(
    noise_multiplier: float, delta: float, steps: int = 1, accountant: str = "rdp", **kwargs
) -> EpsilonResult:
    """The plain Gaussian mechanism (q = 1) composed `steps` times."""
    return compute_epsilon(noise_multiplier, 1.0, steps, delta, accountant, **kwargs)


def rdp_curve(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    *,
    orders: Sequence[float] | None = None,
    sampling: str = "poisson",
    population: int | None = None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(orders, RDP values) of `steps` compositions as dp-accounting computes them."""
    sigma, q, _, orders, size = _check_common(
        noise_multiplier, sampling_rate, 0.5, "rdp", sampling, population, orders, DEFAULT_PLD_DISCRETIZATION
    )
    acc = _rdp_curve_library(sigma, q, check_steps(steps), orders, sampling, population, size)
    return tuple(float(a) for a in acc.orders), tuple(float(r) for r in acc.rdp)
