"""The results archive: paper-scale runs kept in the repository, verified, replayable, and judged by a fresh clone.

A paper-scale seed of a learning experiment costs an hour or more on two cores; results/ does not outlive the machine
that made it. ``archive/<paper>/<experiment>/paper/seed<k>/`` keeps one run as the run wrote it — ``metrics.json``,
``history.parquet``, ``config.yaml`` and, where the kind keeps them, its small arrays (``arrays.npz``: e.g. FedHDP's
final global models, so that a column can be evaluated again under another reading) — and ``manifest.json``: each
file's sha256 and size, the machine it ran on (CPU, cores, threads, GPUs, load), when it started and its wall time, the
code version it ran from, its parameter digest and the digests of the data it read (fedrepro.archive.store). No
checkpoints, no datasets: a run takes at most ``archive.budget_mb.run`` MB and the archive ``archive.budget_mb.total``
(config/config.yaml).

Commands (``python -m fedrepro archive ...``): ``add RUN_DIR...`` (only a complete, finite, paper-scale run with full
provenance, made from committed code and from the inputs here; anything else refused in one line), ``list`` (per
experiment the seeds archived, current or stale and why, and what the plan still lacks with its CPU-h), ``verify``
(every manifest hash, every run against the current config and data, every experiment's seeds summarizable, the size
budget), ``verify --replay R`` (reruns the first R rounds of one archived seed per learning experiment and compares
each round's training loss with its history: fedrepro.archive.replay), ``compare`` (archived vs rebuilt, per metric)
and ``restore`` (the workflow's rule: an archived run into results/, with ``archived.json`` saying so).
"""
