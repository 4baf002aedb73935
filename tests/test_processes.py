"""A run's independent pieces in spawned processes (fedrepro.processes): the job's threads divided among them,
results in the tasks' order, each task's progress lines labelled, a worker's error raised in the run."""

import pytest

from fedrepro import processes, progress


def test_the_workers_share_the_jobs_threads_and_return_in_order(monkeypatch):
    monkeypatch.setenv("FEDREPRO_THREADS", "4")
    assert processes.workers_for(3) == 3 and processes.workers_for(9) == 4
    assert processes.map_in_processes(processes.job_threads, [(), (), ()], 2) == [2, 2, 2]
    monkeypatch.setenv("FEDREPRO_THREADS", "1")
    assert processes.workers_for(5) == 1


def test_each_tasks_progress_lines_say_which_task_it_is(monkeypatch):
    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    assert processes.map_in_processes(progress.prefix, [(), ()], 2, ["seed 0", "seed 1"]) == ["seed 0: ", "seed 1: "]
    assert processes.map_in_processes(progress.prefix, [()], 2) == [""]
    assert progress.prefix() == ""  # this process's lines are not relabelled


def test_a_workers_error_is_the_runs(monkeypatch):
    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    with pytest.raises(ValueError, match="invalid literal"):
        processes.map_in_processes(int, [("1",), ("x",)], 2)


def test_a_worker_counts_the_files_the_run_had_imported_as_its_own(monkeypatch):
    from fedrepro import provenance

    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    monkeypatch.setitem(provenance._LOADED, "imported_by_the_run_only.py", "0" * 16)
    made = processes.map_in_processes(provenance.loaded_code, [(), ()], 2)
    assert all(m["imported_by_the_run_only.py"] == "0" * 16 and "processes.py" in m for m in made)


def test_the_command_line_lets_idle_threads_sleep_unless_the_environment_names_a_policy(monkeypatch, capsys):
    import os

    from fedrepro import cli

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert cli.main(["list"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert cli.main(["list"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (or is a zombie awaiting its parent) within ``within`` seconds."""
    import os
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


def _pid_from(path, within: float = 60.0) -> int:
    import time

    deadline = time.monotonic() + within
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"no worker wrote {path}"
        time.sleep(0.05)
    return int(path.read_text())


def test_a_workers_error_stops_the_other_workers_at_once(monkeypatch, tmp_path):
    """The error is raised while the other task still runs (it would sleep 120 s), and its worker is gone: the run
    does not wait for it, nor leave it training."""
    import time

    from process_helpers import call, fail_when, pid_then_sleep

    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    pid_file = tmp_path / "sleeper.pid"
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="a task's error"):
        processes.map_in_processes(call, [(pid_then_sleep, str(pid_file), 120), (fail_when, str(pid_file))], 2)
    assert time.monotonic() - t0 < 60
    assert _gone(_pid_from(pid_file), within=10)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_run_killed_by_sigkill_leaves_no_worker_training(tmp_path):
    """The run's process is SIGKILLed (no handler, no cleanup runs in it): its worker, which would sleep 120 s,
    ends within seconds."""
    import os
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "worker.pid"
    code = (
        "import os; os.environ['FEDREPRO_THREADS'] = '2'\n"
        "from fedrepro import processes\n"
        "from process_helpers import pid_then_sleep\n"
        f"processes.map_in_processes(pid_then_sleep, [({str(pid_file)!r}, 120)] * 2, 2)\n"
    )
    helpers = os.path.join(os.path.dirname(__file__), "helpers")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([helpers, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        worker = _pid_from(pid_file)
        run.send_signal(signal.SIGKILL)
        run.wait(30)
        assert _gone(worker, within=10)
    finally:
        run.kill()


def test_a_run_stopped_by_sigterm_stops_its_workers_and_leaves_no_half_written_file(tmp_path):
    """SIGTERM to the run (a scheduler's stop; the command line turns it into an interrupt) while its workers write
    a file each: the run ends within seconds, not when its workers' tasks would have (120 s), the workers are gone,
    and neither the targets nor their temporary files are left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import os, signal, sys; os.environ['FEDREPRO_THREADS'] = '2'\n"
        "from fedrepro import cli, processes\n"
        "from process_helpers import open_file_then_sleep\n"
        "signal.signal(signal.SIGTERM, cli._terminate)\n"
        "try:\n"
        f"    processes.map_in_processes(open_file_then_sleep, [({str(tmp_path / 'a')!r}, 120), "
        f"({str(tmp_path / 'b')!r}, 120)], 2)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(143)\n"
    )
    helpers = os.path.join(os.path.dirname(__file__), "helpers")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([helpers, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        workers = [_pid_from(tmp_path / f"{name}.pid") for name in "ab"]
        t0 = time.monotonic()
        run.send_signal(signal.SIGTERM)
        assert run.wait(60) == 143
        assert time.monotonic() - t0 < 30
        assert all(_gone(w, within=10) for w in workers)
    finally:
        run.kill()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pid", "b.pid"]


def test_a_worker_killed_from_outside_is_one_message_and_stops_the_others(monkeypatch, tmp_path):
    """SIGKILL of one worker (the kernel's answer to an exhausted memory): a ResourceError naming it, its signal and
    the rerun that resumes, within seconds, and the other worker (which would sleep 120 s) is gone."""
    import os
    import signal
    import threading
    import time

    from process_helpers import pid_then_sleep

    from fedrepro.errors import ResourceError

    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    files = [tmp_path / "a.pid", tmp_path / "b.pid"]
    workers = []

    def kill_the_first_once_both_run() -> None:
        workers.extend(_pid_from(f) for f in files)
        os.kill(workers[0], signal.SIGKILL)

    threading.Thread(target=kill_the_first_once_both_run, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(ResourceError, match=r"worker process \d+ of this run ended by signal 9 .* resumes"):
        processes.map_in_processes(pid_then_sleep, [(str(f), 120) for f in files], 2)
    assert time.monotonic() - t0 < 30
    assert _gone(workers[1], within=10)


def test_of_workers_that_ended_the_one_named_is_the_cause_not_one_the_pool_stopped_after_it():
    """The pool SIGTERMs its other workers once one dies: the message names the dead one, by its signal, whichever
    comes first in the pool's table (the rehearsal that found this had the stopped worker first)."""
    import os
    import time
    from multiprocessing import get_context
    from types import SimpleNamespace

    from fedrepro.errors import ResourceError

    ctx = get_context("spawn")
    stopped = ctx.Process(target=os._exit, args=(128 + 15,))
    killed = ctx.Process(target=time.sleep, args=(60,))
    for p in (stopped, killed):
        p.start()
    killed.kill()
    for p in (stopped, killed):
        p.join(30)
    pool = SimpleNamespace(_processes={stopped.pid: stopped, killed.pid: killed})
    with pytest.raises(ResourceError, match=rf"worker process {killed.pid} of this run ended by signal 9 "):
        processes._raise_if_a_worker_ended(pool)
