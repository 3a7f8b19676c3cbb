"""A child `vigil run` that does not stop: its threads are written down before it is killed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from monitor import child_run

HUNG = textwrap.dedent("""
    import faulthandler, signal, threading, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, lambda *_: None)  # deaf to the clean stop, like a hung monitor
    def stuck_in_a_lock():
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # never returns
    threading.Thread(target=stuck_in_a_lock, daemon=True).start()
    print("up", flush=True)
    time.sleep(300)
""")


def test_a_child_that_ignores_sigterm_has_its_stacks_dumped_then_is_killed(tmp_path: Path) -> None:
    err = tmp_path / "run.err"
    with err.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-c", HUNG], stdout=subprocess.PIPE, stderr=f, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        began = time.monotonic()
        code = child_run.stop(proc, 1.0, dump_to=tmp_path / "threads.txt")
    assert code == -9 and time.monotonic() - began < 20
    assert "did not stop" in (tmp_path / "threads.txt").read_text()
    stacks = err.read_text()
    assert "stuck_in_a_lock" in stacks and "Current thread" in stacks


def test_a_child_that_stops_cleanly_is_not_dumped(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    assert child_run.stop(proc, 10.0, dump_to=tmp_path / "threads.txt") == -15
    assert not (tmp_path / "threads.txt").exists()


def test_a_command_with_stderr_closed_still_runs():
    """The stack-dump hook needs a stderr to print to; without one (2>&-) the command runs anyway."""
    proc = subprocess.run(f"{sys.executable} -m monitor config --help 2>&-", shell=True, capture_output=False,
                          stdout=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0 and "config" in proc.stdout
