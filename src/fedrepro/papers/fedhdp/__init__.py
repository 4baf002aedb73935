"""FedHDP (Aldaghri, Mahdavifar, Beirami): federated learning with heterogeneous differential privacy.

Theory (closed forms: Lemmas 1-2, Theorem 3, eqs. (18), (50); and Monte Carlo):
    point_estimation   the scalar model of Sec. 3.1 / App. B (non-private and private clients), Algorithm 1
    linear_regression  the d-dimensional model of App. A with two (or more) privacy levels
Learning (on the shared engine, with Ditto personal models and quantile-adaptive clipping from fedrepro.learning):
    fedhdp             FedHDP: one DP average per privacy group, combined with ratio r
    hdp_fedavg         HDP-FedAvg: FedHDP with r = 1
    partition          the synthetic non-IID / skewed non-IID MNIST partitions of Sec. 5
Beside them: privacy (Sec. 5.1's epsilons, Table 7's effective noise multiplier), plots (Figs. 1-4), cnn (Table 6's
FEMNIST CNN) and experiments/ (the kinds). config/targets/fedhdp.csv is generated from docs/notes/fedhdp.md's verbatim
table by
scripts/fedhdp_registry.py.
"""

KINDS = {
    "fedhdp_server_variance": ".experiments.server_variance",
    "fedhdp_opt_out": ".experiments.opt_out",
    "fedhdp_server_variance_vs_rho": ".experiments.server_variance_vs_rho",
    "fedhdp_table2": ".experiments.table2",
    "fedhdp_training": ".experiments.training",
    "fedhdp_variance_floor": ".experiments.variance_floor",
    "fedhdp_collapse_share": ".experiments.collapse_share",
}
PLOTS = {
    "fedhdp_server_variance_vs_r": ".plots",
    "fedhdp_opt_out": ".plots",
    "fedhdp_server_variance_vs_rho": ".plots",
}
ALGORITHMS = {
    "fedhdp": ".fedhdp",
    "hdp_fedavg": ".hdp_fedavg",
}
PARTITIONS = {
    "fedhdp_noniid": ".partition",
}
MODELS = {
    "fedhdp_cnn": ".cnn",
}
