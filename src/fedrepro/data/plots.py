"""Look-at-the-data plot of a partitioned federated dataset: how heterogeneous the clients are.

One PNG per partitioned dataset, two panels:
  left   samples per client, clients sorted by training size (bars for <= 200 clients, a filled step curve
         beyond), training and test;
  right  clients x classes heatmap of training counts (log colour scale, white = 0), clients ordered by their
         dominant class and then size, so k-classes-per-client, single-digit or Dirichlet structure is visible.
Saved with matplotlib's Agg backend and fixed metadata (no Software/date entry), atomically, so reruns give the
same file. This module is imported by the dataset catalog: matplotlib is imported inside the functions.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

MAX_BARS = 200


def client_order(class_counts: np.ndarray) -> np.ndarray:
    """Clients sorted by dominant class, then by decreasing size (then id)."""
    dom = class_counts.argmax(axis=1)
    size = class_counts.sum(axis=1)
    return np.lexsort((np.arange(len(size)), -size, dom))


def partition_figure(
    train_counts: np.ndarray,
    class_counts: np.ndarray,
    test_counts: np.ndarray | None = None,
    title: str = "",
    class_axis: str = "class",
):
    """The two-panel figure (a matplotlib Figure) from per-client counts and the (clients x classes) matrix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, Normalize

    train_counts = np.asarray(train_counts)
    n = len(train_counts)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.2]})
    order = np.argsort(-train_counts, kind="stable")
    x = np.arange(n)
    if n <= MAX_BARS:
        ax0.bar(x, train_counts[order], width=1.0, color="C0", label="train")
        if test_counts is not None:
            ax0.bar(x, np.asarray(test_counts)[order], width=0.6, color="C1", label="test")
    else:
        ax0.fill_between(x, train_counts[order], step="mid", color="C0", alpha=0.8, label="train")
        if test_counts is not None:
            ax0.fill_between(x, np.asarray(test_counts)[order], step="mid", color="C1", alpha=0.8, label="test")
    ax0.set_xlabel(f"client (sorted by train size), {n} clients")
    ax0.set_ylabel("samples")
    tot = int(train_counts.sum())
    ax0.set_title(
        f"samples per client: train {tot:,}, min {int(train_counts.min()) if n else 0}, "
        f"median {int(np.median(train_counts)) if n else 0}, max {int(train_counts.max(initial=0))}",
        fontsize=9,
    )
    ax0.legend(fontsize=8)
    ax0.set_xlim(-0.5, n - 0.5)

    cc = np.asarray(class_counts)
    co = client_order(cc)
    data = np.ma.masked_equal(cc[co].astype(float), 0)
    nz = cc[cc > 0]
    log = nz.size > 0 and nz.max() / nz.min() > 20
    if log:
        norm = LogNorm(vmin=1, vmax=float(nz.max()))
    else:
        norm = Normalize(vmin=0, vmax=float(nz.max()) if nz.size else 1.0)
    im = ax1.imshow(data, aspect="auto", interpolation="nearest", cmap="viridis", norm=norm)
    ax1.set_facecolor("white")
    ax1.set_xlabel(f"{class_axis} ({cc.shape[1]})")
    ax1.set_ylabel("client (by dominant class, then size)")
    per_client = (cc > 0).sum(axis=1)
    lo, hi = (int(per_client.min()), int(per_client.max())) if len(per_client) else (0, 0)
    ax1.set_title(f"train counts per client and {class_axis}: {class_axis}es per client min {lo}, max {hi}", fontsize=9)
    fig.colorbar(im, ax=ax1, label="samples (log scale)" if log else "samples")
    if title:
        fig.suptitle(textwrap.fill(title, 150), fontsize=9)
    fig.tight_layout()
    return fig


def _save_png(fig, out_png: Path, dpi: int) -> None:
    from fedrepro.files import atomic_write

    atomic_write(out_png, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None}))


def _title(scheme: str, params: dict[str, Any], dataset: str | None) -> str:
    shown = {k: v for k, v in params.items() if k not in ("clients_per_digit",) and v is not None}
    text = ", ".join(f"{k}={v}" for k, v in shown.items())
    return f"{dataset + ' · ' if dataset else ''}{scheme}: {text}"


def plot_dataset(dataset, out_png: str | Path, *, coarse: bool = False, dpi: int = 120) -> Path:
    """PNG of a partitioned dataset on disk: ``dataset`` is a path or a loaded
    :class:`fedrepro.data.fedformat.FederatedDataset`. ``coarse``: heatmap over superclasses."""
    import matplotlib.pyplot as plt

    from fedrepro.data import fedformat

    ds = dataset if isinstance(dataset, fedformat.FederatedDataset) else fedformat.load(dataset)
    m = ds.manifest
    fig = partition_figure(
        ds.counts("train"),
        ds.class_counts("train", coarse=coarse),
        ds.counts("test") if "test" in ds.splits else None,
        title=_title(m["partition"]["scheme"], m["partition"]["params"], (m.get("source") or {}).get("dataset")),
        class_axis="superclass" if coarse else "class",
    )
    out = Path(out_png)
    try:
        _save_png(fig, out, dpi)
    finally:
        plt.close(fig)
    return out


def plot_partition(
    partition,
    train_labels: np.ndarray,
    out_png: str | Path,
    *,
    test_labels: np.ndarray | None = None,
    n_classes: int | None = None,
    dataset: str | None = None,
    dpi: int = 120,
) -> Path:
    """PNG of an in-memory :class:`fedrepro.data.partition.Partition` given the labels it was built from."""
    import matplotlib.pyplot as plt

    fig = partition_figure(
        partition.counts("train"),
        partition.class_counts(train_labels, "train", n_classes),
        partition.counts("test") if test_labels is not None else None,
        title=_title(partition.scheme, partition.params, dataset),
    )
    out = Path(out_png)
    try:
        _save_png(fig, out, dpi)
    finally:
        plt.close(fig)
    return out


__all__ = ["client_order", "partition_figure", "plot_dataset", "plot_partition"]
