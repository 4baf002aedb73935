"""The papers' privacy statements: computed values against the printed ones (printed values live only here)."""

import math

import pytest

from fedrepro.errors import PrivacyError
from fedrepro.papers.adaped import privacy as adaped
from fedrepro.papers.fedhdp import privacy as fedhdp
from fedrepro.papers.histograms import privacy as histograms
from fedrepro.papers.ppsgd import privacy as ppsgd
from fedrepro.privacy import compute_epsilon

# --- FedHDP (Aldaghri et al., Table 7 / Sec. 5.1): q, effective noise multiplier, T = 500, delta = 1e-4 ----------
FEDHDP = [(0.05, 1.5, 3.6), (0.03, 4.0, 0.6), (0.03, 1.0, 4.1)]


@pytest.mark.parametrize("q,z,printed", FEDHDP)
def test_fedhdp_epsilons_to_printed_precision(q, z, printed):
    eps = fedhdp.epsilons(q, z, 500, 1e-4, accountants=("rdp", "rdp_classic", "opacus_rdp"))
    assert round(eps["rdp"].epsilon, 1) == printed
    assert round(eps["opacus_rdp"].epsilon, 1) == printed
    # The classic (pre-2020 TF-Privacy) conversion does not reproduce the printed value and is larger.
    assert eps["rdp_classic"].epsilon > eps["rdp"].epsilon
    assert round(eps["rdp_classic"].epsilon, 1) != printed


def test_fedhdp_values_of_the_notes():
    got = [compute_epsilon(z, q, 500, 1e-4, "rdp").epsilon for q, z, _ in FEDHDP]
    classic = [compute_epsilon(z, q, 500, 1e-4, "rdp_classic").epsilon for q, z, _ in FEDHDP]
    assert got == pytest.approx([3.608, 0.576, 4.122], abs=5e-4)
    assert classic == pytest.approx([4.211, 0.764, 4.817], abs=1.5e-3)


def test_fedhdp_effective_noise_multiplier():
    sigma_b = fedhdp.tff_default_sigma_b(100)
    assert sigma_b == pytest.approx(5.0)
    z_delta = [fedhdp.update_noise_multiplier(z, sigma_b) for z in (1.5, 4.0, 1.0)]
    assert z_delta == pytest.approx([1.5172, 4.3644, 1.0050], abs=1e-4)
    for zd, z in zip(z_delta, (1.5, 4.0, 1.0)):
        assert fedhdp.effective_noise_multiplier(zd, sigma_b) == pytest.approx(z, rel=1e-12)
    with pytest.raises(PrivacyError, match="z_eff=10"):
        fedhdp.update_noise_multiplier(10, sigma_b)


# --- AdaPeD (Ozkara et al., Thm 5 + Lemma 1; Table 2: K = m = 50, T/tau = 300, delta = 1e-5) -----------------------
@pytest.mark.parametrize("A,eps", [(0.27285, 3.35), (2.78814, 13.16), (8.64610, 27.30)])
def test_lemma1_notes_values(A, eps):
    got, lam = adaped.lemma1_epsilon(lambda l: A * l, 1e-5)
    assert got == pytest.approx(eps, abs=5e-3) and lam > 1
    # Brute force over a fine real grid never beats the minimiser.
    grid = [1 + 10 ** (k / 200) for k in range(-1200, 800)]
    brute = min(A * l + (math.log(1e5) + (l - 1) * math.log1p(-1 / l) - math.log(l)) / (l - 1) for l in grid)
    assert got <= brute + 1e-12 and got == pytest.approx(brute, abs=1e-3)


@pytest.mark.parametrize("eps,z", [(3.35, 16.2), (13.16, 5.08), (27.30, 2.89)])
def test_thm5_noise_ratio_and_round_trip(eps, z):
    got = adaped.thm5_noise_ratio(eps, 50, 50, 300, 1e-5)
    assert float(f"{got:.3g}") == z  # the notes' three significant digits
    assert adaped.thm5_slope(50, 50, 300, got) == pytest.approx(72 / got**2)
    back, _ = adaped.thm5_epsilon(got, 50, 50, 300, 1e-5)
    assert back == pytest.approx(eps, rel=1e-9)
    # Lemma 1's two directions are inverse to each other.
    delta, _ = adaped.lemma1_delta(lambda l: 72 / got**2 * l, eps)
    assert delta == pytest.approx(1e-5, rel=1e-6)


def test_thm5_mu_term_only_for_dp_fedavg():
    """DP-FedAvg releases the model only: Thm 5 with the C1 term alone gives the same epsilon at z / sqrt(2)."""
    both = adaped.thm5_noise_ratio(13.16, 50, 50, 300, 1e-5)
    one = adaped.thm5_noise_ratio(13.16, 50, 50, 300, 1e-5, terms=1)
    assert one == pytest.approx(both / math.sqrt(2), rel=1e-12)
    assert adaped.thm5_rdp(2.0, 50, 50, 300, 1.0, one, 1.0, 1e9) == pytest.approx(
        adaped.thm5_rdp(2.0, 50, 50, 300, 1.0, both, 1.0, both), rel=1e-6
    )
    lib_one = adaped.library_epsilon(one, 50, 50, 300, 1e-5, terms=1).epsilon
    lib_both = adaped.library_epsilon(both, 50, 50, 300, 1e-5).epsilon
    assert lib_one == pytest.approx(lib_both, rel=1e-9)  # same Gaussian release noise multiplier
    with pytest.raises(PrivacyError, match="terms"):
        adaped.thm5_noise_ratio(13.16, 50, 50, 300, 1e-5, terms=3)


def test_thm5_printed_rdp_and_monotonicity():
    base = adaped.thm5_rdp(2.0, K=10, m=40, T_over_tau=100, C1=1.0, sigma_q1=2.0, C2=0.5, sigma_q2=1.0)
    assert base == pytest.approx((10 / 40) ** 2 * 6 * 100 * 2.0 * (1 / (10 * 4) + 0.25 / 10))
    assert adaped.thm5_epsilon(3.0, 50, 50, 600, 1e-5)[0] > adaped.thm5_epsilon(3.0, 50, 50, 300, 1e-5)[0]
    assert adaped.thm5_epsilon(3.0, 25, 50, 300, 1e-5)[0] < adaped.thm5_epsilon(3.0, 50, 50, 300, 1e-5)[0]
    assert adaped.thm5_epsilon(4.0, 50, 50, 300, 1e-5)[0] < adaped.thm5_epsilon(3.0, 50, 50, 300, 1e-5)[0]
    with pytest.raises(PrivacyError, match="alpha=1"):
        adaped.thm5_rdp(1, 1, 1, 1, 1, 1, 1, 1)


def test_adaped_library_accounting_is_below_printed_and_q1_is_twelve_times_looser():
    z = adaped.thm5_noise_ratio(3.35, 50, 50, 300, 1e-5)
    paper = adaped.library_epsilon(z, 50, 50, 300, 1e-5)
    tri = adaped.library_epsilon(z, 50, 50, 300, 1e-5, tau=10, sensitivity="triangle")
    assert paper.epsilon < tri.epsilon < 3.35 and paper.sampling == "none"
    # Plain Gaussian RDP of the joint release is 1/12 of Thm 5's slope at K = m.
    s = adaped.release_noise_multiplier(z, 50)
    assert 300 / (2 * s**2) == pytest.approx(adaped.thm5_slope(50, 50, 300, z) / 12)


def test_adaped_joint_release_matches_dp_accounting_composed_event():
    import dp_accounting as dpa
    from dp_accounting.rdp import RdpAccountant

    z, K, m = 2.0, 10, 40
    per = z * math.sqrt(K)
    acc = RdpAccountant([2.0, 4.0, 8.0, 16.0])
    acc.compose(dpa.PoissonSampledDpEvent(K / m, dpa.ComposedDpEvent([dpa.GaussianDpEvent(per)] * 2)), 30)
    ours = adaped.library_epsilon(z, K, m, 30, 1e-5, orders=[2.0, 4.0, 8.0, 16.0])
    assert ours.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


# --- Histograms (Setlur et al., Thm 3.1; Table 1: eps' = 15, delta = 1e-10, T = 50) --------------------------------
@pytest.mark.parametrize(
    "reading,eps,sigma,total_delta",
    [("total", 0.084880, 87.949, 1e-10), ("per_step", 0.091262, 74.718, 1.01e-8), ("basic", 0.1, 74.638, 1e-10)],
)
def test_histograms_readings(reading, eps, sigma, total_delta):
    b = histograms.per_step_budget(15, 1e-10, 50, reading)
    assert b.per_step_epsilon == pytest.approx(eps, abs=1e-6)
    assert b.per_iteration_epsilon == pytest.approx(3 * eps, abs=3e-6)
    assert b.sigma == pytest.approx(sigma, abs=1e-3)
    assert b.total_delta == pytest.approx(total_delta, rel=1e-9)
    assert b.total_epsilon == pytest.approx(15, rel=1e-12)


def test_histograms_composition_forms_agree():
    eps, delta, T = 0.08, 1e-12, 50
    e1, d1 = histograms.thm31_total(eps, delta, T)
    e2, d2 = histograms.advanced_composition([3 * eps] * T, [2 * delta] * T, delta)
    assert (e1, d1) == pytest.approx((e2, d2), rel=1e-12)
    assert histograms.alg3_guarantee(0.5, 1e-6) == (1.5, 2e-6)
    assert histograms.gaussian_sigma(0.5, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    # At these parameters basic composition is tighter than the advanced bound (notes section 3).
    assert (
        histograms.per_step_budget(15, 1e-10, 50, "basic").per_step_epsilon
        > histograms.per_step_budget(15, 1e-10, 50, "total").per_step_epsilon
    )
    with pytest.raises(PrivacyError, match="epsilon=1.5"):
        histograms.alg3_guarantee(1.5, 1e-6)
    with pytest.raises(PrivacyError, match="reading='both'"):
        histograms.per_step_budget(15, 1e-10, 50, "both")


# --- PPSGD (Bietti et al.) -----------------------------------------------------------------------------------------
def test_ppsgd_theorems_as_written():
    expected = 2.0 * math.sqrt(100 * math.log(1e4)) / 1000
    assert ppsgd.thm41_noise_std(1.0, 1e-4, 100, 1000, 2.0) == pytest.approx(expected)
    assert ppsgd.thm41_noise_std(1.0, 1e-4, 100, 1000, 2.0, c=3) == pytest.approx(
        3 * ppsgd.thm41_noise_std(1.0, 1e-4, 100, 1000, 2.0)
    )
    assert ppsgd.thm51_noise_std(2.0, 1e-4, 400, 10, 1.0) == pytest.approx(math.sqrt(400 * math.log(1e4)) / 20)
    assert ppsgd.thm51_applies(1.0, 0.1, 200) and not ppsgd.thm51_applies(3.0, 0.1, 200)


def test_ppsgd_experiment_curve_is_opacus_stepped_per_round():
    from opacus.accountants import RDPAccountant

    curve = ppsgd.experiment_epsilon_curve(1.0, 0.02, [1, 10, 50], 1e-4)
    acc = RDPAccountant()
    for t in range(1, 51):
        acc.step(noise_multiplier=1.0, sample_rate=0.02)
        if t in (1, 10, 50):
            assert curve[[1, 10, 50].index(t)].epsilon == pytest.approx(acc.get_epsilon(1e-4), rel=1e-12)
    assert [r.epsilon for r in curve] == sorted(r.epsilon for r in curve)


def test_adaped_library_noise_ratio_round_trips_and_is_below_thm5():
    from fedrepro.papers.adaped import privacy as ad

    for target in (3.35, 13.16):
        z_lib, cal = ad.library_noise_ratio(target, 50, 50, 300, 1e-5)
        back = ad.library_epsilon(z_lib, 50, 50, 300, 1e-5).epsilon
        assert back <= target and back == pytest.approx(target, rel=1e-4)
        assert z_lib < ad.thm5_noise_ratio(target, 50, 50, 300, 1e-5)  # Thm 5 asks for more noise than needed
