"""psi of AdaPeD's runs round by round over the first rounds of an experiment at paper scale, where the run's own
history has it only at its evaluations (every ``eval_every`` rounds). Sec. 4 says of DP-AdaPeD "we first observe a
decrease in sigma_theta^2 and later it increases" (row Q2, check ``psi_decreases_then_increases``); Table 2's runs
evaluate every 30 rounds, so a decrease within the first 30 rounds is not in their histories. Not a verdict: a probe.

    python benchmarks/adaped_psi_early.py [--experiment adaped.table2_mnist] [--method dp_adaped] [--rounds 40]
                                          [--seed 0] [--option NAME=VALUE ...]

The first ``rounds`` rounds of the method's runs (every epsilon of a private method) exactly as the paper-scale run
makes them (fedrepro.archive.replay.first_rounds, as the archive's replay: client sampling, minibatches, noise and lr
schedule depend on the round and the seed, not on the number of rounds; the noise is calibrated for the full run),
evaluated after every round (evaluation draws from its own stream: it does not change training). Prints per epsilon
psi^0, psi after each round, where the minimum falls and psi at the last round. ``--option`` reads the method under
another value of one of its options (e.g. ``c=1``: Alg. 2's psi gradient as printed, where the config takes App. K.1's
c = 5); the noise is the config's (it does not depend on the option).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from fedrepro.archive.replay import first_rounds
from fedrepro.config import load_global, resolve_experiment
from fedrepro.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="adaped.table2_mnist")
    ap.add_argument("--method", default="dp_adaped")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE", help="a method option read otherwise"
    )
    args = ap.parse_args(argv)
    cfg = load_global()
    try:
        exp = resolve_experiment(cfg, args.experiment, "paper")
        spec = exp.params["methods"][args.method]
    except (ConfigError, KeyError) as e:
        print(f"{args.experiment}: no method {args.method!r} at paper scale ({e})", file=sys.stderr)
        return 2
    options = dict(spec.get("options") or {})
    for item in args.option:
        name, sep, value = item.partition("=")
        try:
            if not sep or name not in options:
                raise ValueError
            options[name] = float(value)
        except ValueError:
            print(
                f"--option {item!r}: give NAME=NUMBER for one of {args.method}'s options {sorted(options)}",
                file=sys.stderr,
            )
            return 2
    spec = {**spec, "options": options}
    changes = {"methods": {args.method: spec}, "eval_every": 1, "checks": {}}
    h = first_rounds(cfg, args.experiment, args.seed, args.rounds, changes).history
    psi0 = float(spec["options"].get("psi0", 3.5))
    print(
        f"`python benchmarks/adaped_psi_early.py --experiment {args.experiment} --method {args.method} "
        f"--rounds {args.rounds} --seed {args.seed}"
        + "".join(f" --option {o}" for o in args.option)
        + f"`: psi after each round (psi^0 = {psi0:g})"
    )
    print()
    print(f"| epsilon | psi, rounds 1-10 | min (round) | psi at round {args.rounds} | rounds below psi^0 |")
    print("|---|---|---|---|---|")
    groups = h.groupby("epsilon") if "epsilon" in h else [(None, h)]
    for eps, g in groups:
        psi = np.concatenate([[psi0], g.sort_values("round")["psi"].to_numpy(float)])
        first = " ".join(f"{x:.2f}" for x in psi[1:11])
        k = int(psi.argmin())
        below = int((psi[1:] < psi0).sum())
        print(f"| {eps if eps is not None else '—'} | {first} | {psi[k]:.3f} ({k}) | {psi[-1]:.3f} | {below} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
