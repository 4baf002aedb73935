"""AdaPeD (Ozkara, Girgis, Data, Diggavi; ICLR 2023): personalized estimation and learning by a statistical model.

gaussian          Gaussian model: local, personalized (Thm 1) and DP personalized (Thm 2.2, eq. 19) estimators
bernoulli         Bernoulli model: posterior-mean estimators under the App. K priors (eq. 6)
linreg            personalized linear regression (App. K): known-prior, alternating and FedAvg regressions
adamix            AdaMix (Algorithm 1): GMM-prior personalized linear regression (Table 3)
adaped            AdaPeD (Algorithm 2) and DP-AdaPeD on the shared training engine
adaped_unsampled  AdaPeD with unsampled client iterations (Algorithm 7, App. H.2)
fl_privacy        the noise of the private learning methods for a printed epsilon (Thm 5 + Lemma 1)
privacy           the paper's privacy statements: Thm 2.2, Thm 5, Lemma 1
plots             Figs. 1a/3a/3b (DP estimation) and the learning figures (Figs. 1b, 2a, 2b, psi)
experiments/      the experiment kinds of config/adaped.yaml
"""

KINDS = {
    "gaussian_dp_estimation": ".experiments.gaussian",
    "gaussian_remark1": ".experiments.gaussian",
    "bernoulli_synthetic": ".experiments.bernoulli",
    "political_bernoulli": ".experiments.political",
    "adaped_linreg": ".experiments.linreg",
    "adamix_linreg": ".experiments.adamix",
    "adaped_fl_training": ".experiments.fl_training",
    "adaped_thm5": ".experiments.privacy",
    "adaped_ldp": ".experiments.privacy",
}
PLOTS = {
    "dp_estimation_mse": ".plots",
    "accuracy_vs_epoch": ".plots",
    "psi_trajectory": ".plots",
    "accuracy_vs_epsilon": ".plots",
}
ALGORITHMS = {
    "adaped": ".adaped",
    "adaped_unsampled": ".adaped_unsampled",
}
