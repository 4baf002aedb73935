"""PPSGD (Bietti et al., ICML 2022): personalized private SGD for the linear additive model
f_i = l(y, (w + theta_i)^T x), one algorithm per module.

    stepsizes   the official code's map (step, alpha_c) -> (eta_w, eta_theta) and the clip operator
    exp         PPSGD as the experiments run it ("PPSGD-exp", notes ppsgd.md §2.4): Q users per round, per-user
                average gradient clipped to C (Frobenius over d x K), Gaussian noise sigma C / L on the mean;
                vectorized over the round's users and over a batch of G (step, alpha_c) configurations
    alg1        Algorithm 1 of the paper (every user every round, one sample each, per-sample clipping)
    alg23       Algorithms 2 and 3 (Bernoulli(q) client sampling; minibatch sums over M, or per-user means over N)
    sampler     the official code's batches() sampler for the real-data experiments
"""

from fedrepro.ppsgd.stepsizes import ALPHA_INF, clip_factors, step_sizes

__all__ = ["ALPHA_INF", "clip_factors", "step_sizes"]
