"""Each paper's own privacy statements, as printed, beside what the libraries give for the same mechanism.

One module per paper: adaped (Ozkara et al. 2023, Thm 5 + Lemma 1), fedhdp (Aldaghri et al., Sec. 5.1 and the
TFF effective noise multiplier), histograms (Setlur et al., Thm 3.1 and eq. 4), ppsgd (Bietti et al. 2022,
Thms 4.1 and 5.1 and the experiments' opacus curve). No printed result is stored here: the papers' settings and
printed values come from config/ and tests.
"""
