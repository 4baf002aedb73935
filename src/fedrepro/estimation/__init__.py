"""Personalized estimators of the AdaPeD paper (Ozkara et al., ICLR 2023, Sec. 2 and App. B-E)."""
