"""Per-round progress of long runs: a live bar on a terminal, plain log lines otherwise.

Snakemake sends a job's output to its log file, so there the progress is a line every ~5 % of the rounds (and at
every evaluation), with the round, the loss, the last test accuracy and an estimate of the time left; run directly in
a terminal (``python -m fedrepro run ...``) the same information is a tqdm bar. ``FEDREPRO_PROGRESS=0`` silences it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def _fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# what this process's progress lines say first (set_prefix): which of a run's pieces in parallel processes it is
_prefix = ""


def set_prefix(text: str) -> None:
    """Label every progress line of this process with ``text`` (e.g. a forensic point's seed, when several
    processes of one run write to one log)."""
    global _prefix
    _prefix = f"{text}: " if text else ""


def prefix() -> str:
    """What this process's progress lines say first."""
    return _prefix


class RoundProgress:
    """A callback for :func:`fedrepro.learning.engine.train` (``callback=progress``) labelled ``label``."""

    def __init__(self, label: str, stream: TextIO | None = None, lines: int = 20):
        self.label = _prefix + label
        self.stream = stream or sys.stderr
        self.lines = max(1, lines)
        self.enabled = os.environ.get("FEDREPRO_PROGRESS", "1") != "0"
        self.bar = None
        self.t0 = time.perf_counter()
        self.first_round: int | None = None
        self.last_acc: float | None = None

    def __call__(self, info: dict) -> None:
        if info.get("diverged"):  # said whether or not progress is shown: it explains the run's numbers
            print(
                f"[fedrepro] {self.label}: diverged in round {info['round']} of {info['rounds']} (its model is no "
                "longer finite): not trained further; each later evaluation counts every test row as misclassified",
                file=self.stream,
                flush=True,
            )
        if not self.enabled:
            return
        r, total = info["round"], info["rounds"]
        if self.first_round is None:  # a resumed run starts past round 1
            self.first_round = r
            self.t0 = time.perf_counter()
        if "eval" in info:
            self.last_acc = info["eval"]["test_acc"]
        if self.stream.isatty():
            self._bar(r, total, info)
            return
        step = max(1, total // self.lines)
        if r == self.first_round or r == total or r % step == 0 or "eval" in info:
            done = r - self.first_round + 1
            left = (time.perf_counter() - self.t0) / done * (total - r)
            acc = f" test_acc {self.last_acc:.4f}" if self.last_acc is not None else ""
            print(
                f"[progress] {self.label} round {r}/{total} ({100 * r / total:.0f}%) train_loss "
                f"{info['train_loss']:.4f}{acc} eta {_fmt_seconds(left)}",
                file=self.stream,
                flush=True,
            )

    def _bar(self, r: int, total: int, info: dict) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=r - 1, desc=self.label, file=self.stream, leave=False)
        self.bar.update(1)
        post = {"loss": f"{info['train_loss']:.3f}"}
        if self.last_acc is not None:
            post["acc"] = f"{self.last_acc:.3f}"
        self.bar.set_postfix(post, refresh=False)
        if r == total:
            self.bar.close()
            self.bar = None
