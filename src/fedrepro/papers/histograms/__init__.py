"""Private and personalized histogram estimation by KL clustering (Setlur, Feldman, Talwar; docs/notes/histograms.md).

One algorithm per module, all vectorized over users (rows of the data matrix S, one empirical histogram per user):

    kl                 KL divergences, cross-entropies against centers, the smoothing floor, assignments
    generator          the mixture-of-Dirichlets model of Sec. 2.1 (centers, users, token counts)
    local              Local: each user's own (additively smoothed) histogram
    fedavg             FedAvg: the global histogram (Lemma 2.1) and its private version (Alg. 3 with K = 1)
    finetune           FT: lambda * center + (1 - lambda) * own histogram; the Bayes-optimal lambda (Lemma 2.2)
    kmeanspp_init      Algorithm 1: k-means++-style initialization in KL (index and direction fixed,
    docs/notes/histograms.md G2)
    lloyd              Algorithm 2: KL Lloyd iterations, with a pluggable re-centering (mean or Algorithm 3)
    private_centering  Algorithm 3: private re-centering (Laplace count, Gaussian sum, clipped whitened residuals)
    dimred             App. C: token selection from the top-k eigenvectors of the whitened second moment
    ifca               IFCA (Ghosh et al. 2020): gradient re-centering on softmax logits, non-private and private
    closed_forms       exact expected KL of fine-tuned estimators under the model (docs/notes/histograms.md §8 C4, C5)
    pipeline           the nine Table 1 methods in the two privacy regimes, evaluated in KL
    reddit             per-user token histograms of LEAF Reddit (Sec. 4's data)
Beside them: privacy (Thm 3.1 and its composition), plots, experiments/ (the kinds).
"""

KINDS = {
    "histograms_synthetic": ".experiments.synthetic",
    "histograms_table1": ".experiments.table1",
    "histograms_thm31": ".experiments.privacy",
}
PLOTS = {
    "histograms_kl_vs_iteration": ".plots",
}
