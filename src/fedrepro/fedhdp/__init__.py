"""FedHDP theory (Aldaghri, Mahdavifar, Beirami): federated point estimation and linear regression with
heterogeneous differential privacy, closed forms (Lemmas 1-2, Theorem 3, eqs. (18), (50)) and Monte Carlo.

point_estimation   the scalar model of Sec. 3.1 / App. B (non-private and private clients), Algorithm 1
linear_regression  the d-dimensional model of App. A with two (or more) privacy levels
"""
