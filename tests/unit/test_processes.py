"""Process helpers of the local cluster."""

import os
import signal
import subprocess
import sys
import time

from monitor.cluster.local_cluster import LocalCluster
from monitor.cluster.processes import port_in_use, port_owner, wait_gone
from monitor.config import parse


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


# a process whose first thread ends while another runs on for ``seconds``, holding a listener
EXITING = ("import ctypes, socket, sys, threading, time\n"
           "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True)\n"
           "threading.Thread(target=lambda: time.sleep(float(sys.argv[1]))).start()\n"
           "ctypes.CDLL(None).pthread_exit(None)\n")


def test_a_process_whose_first_thread_ended_while_another_runs_is_not_gone_and_keeps_its_port():
    """A zombie first thread with another thread still running (a JVM killed -9 whose threads are
    still ending): its port is taken by no process one can name; it is gone only once every thread
    ended."""
    proc = subprocess.Popen([sys.executable, "-c", EXITING, "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        time.sleep(0.3)
        assert port_in_use("127.0.0.1", port) and port_owner("127.0.0.1", port) == "another process"
        assert not wait_gone(proc.pid, 0.3)
        assert wait_gone(proc.pid, 10)
        assert not port_in_use("127.0.0.1", port)
    finally:
        proc.kill()
        proc.wait()


def test_a_node_is_started_only_once_its_last_process_finished_exiting_and_an_exit_names_its_errors(tmp_path):
    cluster = LocalCluster(parse({"cluster": {"state_dir": str(tmp_path / "cluster")}}, "t.yaml").cluster)
    d = cluster.node_dir(3)
    d.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", EXITING, "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        (d / "pid").write_text(str(proc.pid))
        time.sleep(0.3)
        assert cluster.node_pid(3) is None  # not a running node: it is exiting
        cluster._await_exit(3)
        assert not port_in_use("127.0.0.1", port)
    finally:
        proc.kill()
        proc.wait()
    (d / "server.log").write_text("[t] INFO starting\n[t] ERROR Failed to acquire lock on file .lock in /x\n"
                                  "[t] INFO shut down completed\n")
    assert "ERROR Failed to acquire lock" in cluster.exit_report(3)
    (d / "server.log").write_text("[t] INFO a\n[t] INFO b\n")
    assert "no error logged" in cluster.exit_report(3) and "INFO b" in cluster.exit_report(3)
