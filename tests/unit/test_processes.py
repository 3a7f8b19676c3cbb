"""Process helpers of the local cluster."""

import os
import signal
import subprocess
import sys
import time

from monitor.cluster.processes import wait_gone


def test_a_killed_process_another_process_started_is_gone_at_once_though_still_a_zombie():
    # a parent that starts `sleep` and never reaps it, as the test session does with nodes that
    # `vigil chaos run` kills: the killed node stays a zombie of that parent
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, time; q = subprocess.Popen(['sleep', '60']); "
                               "print(q.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert not wait_gone(pid, 0.2)  # alive: the timeout is honoured
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        assert wait_gone(pid, 10)
        assert time.monotonic() - started < 2
    finally:
        parent.kill()
        parent.wait()
