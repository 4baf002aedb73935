"""Noise for the private methods of a federated training experiment, configured by a printed epsilon.

AdaPeD's Table 2 and Fig. 1b print epsilons, never the noise (docs/notes/adaped.md section 7.11). A private method
(``private: true``) is trained once per epsilon of ``privacy.epsilons``; its noise ratio z = sigma_q / C comes from
the privacy module, never from a formula here:

- ``noise_from: thm5`` (default, the paper's own accountant): Thm 5 + Lemma 1 solved for z
  (:func:`fedrepro.papers.adaped.privacy.thm5_noise_ratio`); DP-AdaPeD releases mu and psi (both terms), DP-FedAvg
  the model only (the C1 term, docs/notes/adaped.md section 2.12).
- ``noise_from: rdp | pld``: dp-accounting's accountant calibrated for the same per-round Gaussian release
  (:func:`fedrepro.papers.adaped.privacy.library_noise_ratio`).
- DP-FedAvg with server-side noise (``dp_fedavg_server``, McMahan et al. 2018) is a plain subsampled Gaussian
  mechanism per round (sum of clipped updates, noise multiplier z, rate K/m): z always comes from dp-accounting
  (:func:`fedrepro.privacy.calibrate_noise_multiplier`, ``noise_from`` when it names a library accountant, else
  ``rdp``); Thm 5 is AdaPeD's own statement and does not describe it.

Beside the z used, every run records the library epsilon (dp-accounting RDP) of the mechanism it actually ran, so
the report shows how the paper's epsilon compares with a maintained accountant's.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrepro.papers.adaped import privacy as adaped_privacy

NOISE_FROM = ("thm5", "rdp", "pld")
# The algorithms whose privacy these accountants describe, and how many released quantities (Thm 5 terms) each has.
TERMS = {"fedavg": 1, "adaped": 2, "adaped_unsampled": 2, "dp_fedavg_server": 1}
SERVER = "dp_fedavg_server"


@dataclass(frozen=True)
class NoisePlan:
    epsilon: float
    z: float
    clip: float
    delta: float
    noise_from: str
    epsilon_library: float
    library: str

    def mechanism(self, algorithm: str) -> dict:
        """Constructor options that privatize ``algorithm`` with this noise (user-level clip + Gaussian noise)."""
        spec = {"clip": self.clip, "noise_multiplier": self.z}
        if algorithm == SERVER:
            return {"server_dp": spec}
        return {"dp": spec} if algorithm == "fedavg" else {"dp_mu": spec, "dp_psi": spec}

    def record(self) -> dict:
        return {
            "epsilon": self.epsilon,
            "z": self.z,
            "sigma": self.z * self.clip,
            "clip": self.clip,
            "delta": self.delta,
            "noise_from": self.noise_from,
            "epsilon_library_rdp": self.epsilon_library,
        }


def plan_noise(
    algorithm: str, epsilon: float, *, K: int, m: int, rounds: int, delta: float, clip: float, noise_from: str = "thm5"
) -> NoisePlan:
    """The noise a private ``algorithm`` needs for ``epsilon`` after ``rounds`` synchronizations of K of m clients."""
    if algorithm not in TERMS:
        raise ValueError(f"no privacy accounting for algorithm {algorithm!r}; private methods: {sorted(TERMS)}")
    terms = TERMS[algorithm]
    if noise_from not in NOISE_FROM:
        raise ValueError(f"noise_from must be one of {NOISE_FROM}, got {noise_from!r}")
    if algorithm == SERVER:
        from fedrepro.privacy import calibrate_noise_multiplier, compute_epsilon

        accountant = "rdp" if noise_from == "thm5" else noise_from
        cal = calibrate_noise_multiplier(epsilon, delta, rounds, K / m, accountant)
        lib = compute_epsilon(cal.noise_multiplier, K / m, rounds, delta, "rdp")
        return NoisePlan(
            epsilon, cal.noise_multiplier, clip, delta, accountant, lib.epsilon, f"{lib.library} {lib.library_version}"
        )
    if noise_from == "thm5":
        z = adaped_privacy.thm5_noise_ratio(epsilon, K, m, rounds, delta, terms=terms)
    else:
        z, _ = adaped_privacy.library_noise_ratio(epsilon, K, m, rounds, delta, accountant=noise_from, terms=terms)
    lib = adaped_privacy.library_epsilon(z, K, m, rounds, delta, accountant="rdp", terms=terms)
    return NoisePlan(epsilon, z, clip, delta, noise_from, lib.epsilon, f"{lib.library} {lib.library_version}")


__all__ = ["NOISE_FROM", "NoisePlan", "TERMS", "plan_noise"]
