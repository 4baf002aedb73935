"""Noise calibration: monotone bracketing + Brent, round trips, and agreement with dp-accounting's calibrator."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrepro.errors import PrivacyError
from fedrepro.privacy import INTEGER_ORDERS, calibrate_noise_multiplier, compute_epsilon
from fedrepro.privacy.solve import solve_monotone

RTOL = 1e-6


@pytest.mark.parametrize(
    "acc,q,T", [("rdp", 0.05, 200), ("rdp_classic", 0.05, 200), ("opacus_rdp", 1.0, 30), ("pld", 1.0, 10)]
)
def test_round_trip(acc, q, T):
    target = 2.0
    kw = {"pld_discretization": 1e-3} if acc == "pld" else {}
    cal = calibrate_noise_multiplier(target, 1e-5, T, q, acc, rtol=RTOL, **kw)
    assert cal.achieved.epsilon <= target
    assert cal.achieved.epsilon == pytest.approx(target, rel=1e-4)
    # The smallest admissible sigma lies within rtol below the returned one.
    below = compute_epsilon(cal.noise_multiplier * (1 - 3 * RTOL), q, T, 1e-5, acc, **kw).epsilon
    assert below > target * (1 - 1e-4)
    assert cal.achieved.accountant == acc and cal.to_dict()["achieved"]["noise_multiplier"] == cal.noise_multiplier


def test_matches_dp_accounting_calibrator():
    import dp_accounting as dpa
    from dp_accounting.rdp import RdpAccountant

    ours = calibrate_noise_multiplier(3.0, 1e-5, 300, 0.02, "rdp", rtol=1e-8, orders=INTEGER_ORDERS).noise_multiplier
    theirs = dpa.calibrate_dp_mechanism(
        lambda: RdpAccountant(list(INTEGER_ORDERS)),
        lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(s)), 300),
        3.0,
        1e-5,
        dpa.ExplicitBracketInterval(0.3, 10.0),
        tol=1e-8,
    )
    assert ours == pytest.approx(theirs, rel=1e-6)


@settings(max_examples=15, deadline=None)
@given(eps=st.floats(0.2, 20.0), T=st.integers(1, 2000), delta=st.sampled_from([1e-3, 1e-5, 1e-8]))
def test_gaussian_round_trip_property(eps, T, delta):
    cal = calibrate_noise_multiplier(eps, delta, T, 1.0, "rdp", rtol=RTOL)
    assert cal.achieved.epsilon <= eps
    # Minimality: a slightly smaller sigma exceeds the target.
    below = compute_epsilon(cal.noise_multiplier * (1 - 3 * RTOL), 1.0, T, delta, "rdp").epsilon
    assert below > eps * (1 - 1e-4)
    # epsilon(sigma) is continuous except where the library's KL bound (delta^2 >= 1 - exp(-RDP)) makes it jump to
    # 0; a target below the orders grid's floor min_a log1p(-1/a) - log(delta a)/(a-1) is met only by that jump.
    if cal.achieved.epsilon > 0:
        assert cal.achieved.epsilon == pytest.approx(eps, rel=1e-4)


def test_target_below_the_orders_floor_is_met_by_the_kl_jump():
    # Max default order 63: with delta = 1e-8 no finite sigma gives 0 < epsilon < ~0.214 (a property of the grid).
    cal = calibrate_noise_multiplier(0.203125, 1e-8, 1, 1.0, "rdp", rtol=RTOL)
    assert cal.achieved.epsilon == 0.0
    assert compute_epsilon(cal.noise_multiplier * (1 - 3 * RTOL), 1.0, 1, 1e-8, "rdp").epsilon > 0.21


def test_bad_target_raises():
    with pytest.raises(PrivacyError, match="target_epsilon=-1"):
        calibrate_noise_multiplier(-1, 1e-5, 10, 0.1)
    with pytest.raises(PrivacyError, match="delta=2"):
        calibrate_noise_multiplier(1.0, 2, 10, 0.1)


def test_solver_sides_and_failure():
    f = lambda x: x**3
    lo, _, _ = solve_monotone(f, 8.0, increasing=True, side="le", rtol=1e-10)
    hi, _, _ = solve_monotone(f, 8.0, increasing=True, side="ge", rtol=1e-10)
    assert lo**3 <= 8.0 <= hi**3 and hi - lo < 1e-8
    with pytest.raises(PrivacyError, match="no x"):
        solve_monotone(lambda x: 1.0 + 0 * x, 2.0, increasing=True, max_expansions=20)
