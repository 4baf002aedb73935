"""Independent pieces of one run (a forensic sweep's points, a training's methods) in parallel processes.

A job's threads (FEDREPRO_THREADS, which the workflow sets from a rule's ``threads:``) can go to torch inside one
process or to several processes of fewer threads each. The small models of these papers (FedHDP's 784-50-10 MLP:
narrow GEMMs, a round's work in many short steps) leave torch's threads waiting on each other at every step, and
more so beside other work, while independent processes never wait: so a run whose pieces are independent gives each
piece its own process, up to one per thread, the threads shared among them. On a machine, the two are measured by
``benchmarks/fedhdp_mnist.py --jobs 2`` against ``--jobs 1 --threads 2``. Workers are started with ``spawn`` (a fresh
interpreter, no state inherited from the parent's torch), so every task and its arguments must pickle and its
function must be importable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any


def sleeping_idle_threads(environ: MutableMapping[str, str] = os.environ) -> None:
    """Idle OpenMP threads sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``) unless the environment names a
    policy. Beside one busy process, one process of two torch threads did 0.20x the FedHDP method-rounds a second of
    one thread under OpenMP's default wait policy and 1.09x under PASSIVE; on a quiet machine 1.50x and 1.16x, where
    two one-thread processes did 1.68x (``benchmarks/fedhdp_mnist.py --beside-busy``, benchmarks/RESULTS.md). A
    little speed when the machine is quiet, for never falling below one thread when it is not. OpenMP reads the
    variable when torch loads it, so this runs before torch is imported; worker processes inherit it."""
    environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def job_threads() -> int:
    """The threads the job was given (FEDREPRO_THREADS; 1 when unset)."""
    return max(1, int(os.environ.get("FEDREPRO_THREADS", "1")))


def workers_for(n_tasks: int) -> int:
    """How many processes share the job's threads for ``n_tasks`` independent tasks (1: run them in this process)."""
    return max(1, min(job_threads(), n_tasks))


def map_in_processes(
    fn: Callable[..., Any], tasks: Sequence[tuple], workers: int, labels: Sequence[str] | None = None
) -> list[Any]:
    """``[fn(*t) for t in tasks]`` in ``workers`` spawned processes, the job's threads divided among them, results in
    the tasks' order; the first error raised in a worker is raised here, the tasks not yet started are cancelled.
    ``labels``: what each task's progress lines say first (fedrepro.progress.set_prefix), where the lines of the
    workers, which share the run's log, would not tell the tasks apart."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from fedrepro.provenance import loaded_code

    per_worker = max(1, job_threads() // workers)
    pool = ProcessPoolExecutor(
        workers, mp_context=get_context("spawn"), initializer=_start_worker, initargs=(per_worker, loaded_code())
    )
    try:
        futures = [pool.submit(_labelled, labels[i] if labels else "", fn, *t) for i, t in enumerate(tasks)]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(threads: int, parent_code: dict[str, str]) -> None:
    """A worker's threads, and the source files the run had imported when it handed out the tasks: a worker's
    checkpoints record them beside its own (fedrepro.provenance.inherit_loaded_code)."""
    from fedrepro.provenance import inherit_loaded_code

    os.environ["FEDREPRO_THREADS"] = str(threads)
    inherit_loaded_code(parent_code)


def _labelled(label: str, fn: Callable[..., Any], *args: Any) -> Any:
    from fedrepro.progress import set_prefix

    set_prefix(label)
    return fn(*args)
