"""PPSGD (Bietti et al., ICML 2022): personalized private SGD for the linear additive model
f_i = l(y, (w + theta_i)^T x), one algorithm per module.

    stepsizes   the official code's map (step, alpha_c) -> (eta_w, eta_theta) and the clip operator
    ppsgd_exp   PPSGD as the experiments run it ("PPSGD-exp", docs/notes/ppsgd.md §2.4): Q users per round, per-user
                average gradient clipped to C (Frobenius over d x K), Gaussian noise sigma C / L on the mean;
                vectorized over the round's users and over a batch of G (step, alpha_c) configurations
    algorithm1  Algorithm 1 of the paper (every user every round, one sample each, per-sample clipping)
    algorithms2_3  Algorithms 2 and 3 (Bernoulli(q) client sampling; minibatch sums over M, or per-user means over N)
    sampler     the official code's batches() sampler for the real-data experiments
    cnn         Fig. 1d's CNN: a shared private representation with an additive personalized head
    clients     the real-data runs' federated dataset; grid: the (step, alpha) grid they sweep
    method      a method from outside the package (python -m fedrepro compare) through the real-data runs' loop
    stackoverflow_tags  Fig. 1b / Fig. 2's Stack Overflow tag-prediction data: users, bag of words, bag of tags
Beside them: privacy (Thms 4.1, 5.1, the experiments' opacus curve), plots, experiments/ (the kinds).
"""

from fedrepro.papers.ppsgd.stepsizes import ALPHA_INF, clip_factors, step_sizes

__all__ = ["ALPHA_INF", "clip_factors", "step_sizes"]

KINDS = {
    "ppsgd_synthetic": ".experiments.synthetic",
    "ppsgd_linear": ".experiments.linear",
    "ppsgd_cnn": ".experiments.cnn",
    "ppsgd_theorems": ".experiments.privacy",
}
PLOTS = {
    "ppsgd_excess_risk": ".plots",
    "ppsgd_accuracy": ".plots",
    "ppsgd_pareto": ".plots",
}
