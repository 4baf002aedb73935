"""Independent pieces of one run (a forensic sweep's points, a training's methods, an AdaPeD table's trainings) in
parallel processes.

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
import sys
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
    the tasks' order. The first error raised in a worker is raised here as soon as it happens; that, an interrupt of
    this process (Ctrl-C, SIGTERM) or any other exit stops every worker at once, its task unfinished (what a task
    checkpoints is kept: a rerun resumes from it), and a worker whose parent dies, even by SIGKILL, stops too
    (:func:`_start_worker`): a killed run leaves no worker training on. ``labels``: what each task's progress lines
    say first (fedrepro.progress.set_prefix), where the lines of the workers, which share the run's log, would not
    tell the tasks apart."""
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    from fedrepro.errors import ResourceError
    from fedrepro.provenance import loaded_code

    per_worker = max(1, job_threads() // workers)
    pool = ProcessPoolExecutor(
        workers,
        mp_context=get_context("spawn"),
        initializer=_start_worker,
        initargs=(per_worker, loaded_code(), os.getpid()),
    )
    finished = False
    try:
        futures = [pool.submit(_labelled, labels[i] if labels else "", fn, *t) for i, t in enumerate(tasks)]
        while True:
            running = wait(futures, timeout=1.0, return_when=FIRST_EXCEPTION)[1]
            failed = next((f for f in futures if f.done() and f.exception() is not None), None)
            if failed is not None or not running:
                break
            _raise_if_a_worker_ended(pool)  # the pool itself can miss it until another task ends (Python 3.11)
        try:
            results = [(failed or f).result() for f in futures]  # a failed task's error first, whichever it is
        except BrokenProcessPool:
            _raise_if_a_worker_ended(pool)
            raise ResourceError(_ENDED.format(who="a worker process of this run", how="")) from None
        finished = True
        return results
    finally:
        if not finished:
            _stop_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


_ENDED = (
    "{who} ended{how} before its task finished (killed for lack of memory, or by another process?): the other "
    "workers were stopped; what finished and the round checkpoints are kept, so running the command again resumes"
)


def _raise_if_a_worker_ended(pool) -> None:
    """A ResourceError naming a worker of ``pool`` that has ended while tasks remain (its sentinel is ready whether
    or not the pool has reaped it), with its signal or exit status where known. Once one worker dies the pool
    SIGTERMs the others (Python 3.9+), so by the time this looks several may have ended: the one named is one that
    was not stopped that way, the cause rather than its consequence."""
    from multiprocessing.connection import wait as ready

    from fedrepro.errors import ResourceError

    procs = list((getattr(pool, "_processes", None) or {}).values())
    ended = ready([p.sentinel for p in procs], timeout=0) if procs else []
    codes = [(p, _exit_code(p)) for p in procs if p.sentinel in ended]
    if not codes:
        return
    p, code = next(((p, c) for p, c in codes if c not in _STOPPED_BY_SIGTERM), codes[0])
    how = "" if code is None else f" by signal {-code}" if code < 0 else f" with exit status {code}"
    raise ResourceError(_ENDED.format(who=f"worker process {p.pid} of this run", how=how))


# how a worker that was sent SIGTERM ends: unwound by _stop_worker (128 + 15), or killed by it before its handler was
# installed (-15)
_STOPPED_BY_SIGTERM = (128 + 15, -15)


def _exit_code(process, patience: float = 1.0) -> int | None:
    """``process.exitcode`` of an ended process. The pool's own thread may have reaped it a moment before (our
    waitpid then finds no child and reads None until that thread has stored the status), so wait for it briefly."""
    import time

    deadline = time.monotonic() + patience
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return process.exitcode


def _stop_workers(pool) -> None:
    """SIGTERM to every worker of ``pool`` (a ProcessPoolExecutor), their tasks unfinished. Python 3.14 has
    ``terminate_workers``; before it, the executor's process table (the same attribute since Python 3.2) is the only
    way to reach them: shutdown alone waits for the running tasks to end."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()


def _start_worker(threads: int, parent_code: dict[str, str], parent: int) -> None:
    """A worker's threads; the source files the run had imported when it handed out the tasks (a worker's checkpoints
    record them beside its own, fedrepro.provenance.inherit_loaded_code); and, on Linux, a SIGTERM from the kernel
    when its parent dies, so that a run killed by SIGKILL (a scheduler's last word) leaves no orphan training on
    beside its resumed self. SIGTERM (from there or from :func:`map_in_processes`) ends a worker as an exception,
    so that a file it was writing is removed, never left half-written (fedrepro.files.atomic_write)."""
    import signal

    from fedrepro.provenance import inherit_loaded_code

    os.environ["FEDREPRO_THREADS"] = str(threads)
    inherit_loaded_code(parent_code)
    signal.signal(signal.SIGTERM, _stop_worker)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request above took effect
        os.kill(os.getpid(), signal.SIGTERM)


class _Stopped(SystemExit):
    """SIGTERM in a worker: unwinds its task (closing what it had open), then ends the process (:func:`_labelled`);
    between tasks, the exit is a quiet one."""


def _stop_worker(signum, frame) -> None:
    import signal

    # a second SIGTERM (the executor sends one, map_in_processes another) must not cut the unwinding short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Stopped(128 + signum)


def _labelled(label: str, fn: Callable[..., Any], *args: Any) -> Any:
    from fedrepro.progress import set_prefix

    set_prefix(label)
    try:
        return fn(*args)
    except _Stopped as stop:  # the executor would report it as the task's error and take the next task
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stop.code)
