"""Processes and ports of the local cluster: who holds a port, whether it answers, stopping
processes politely and then not."""

from __future__ import annotations

import os
import signal
import socket
import time

import psutil


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def port_owner(host: str, port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if (conn.laddr and conn.laddr.port == port and conn.laddr.ip in (host, "0.0.0.0", "::")
                    and conn.pid):
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(proc.cmdline()[:3])[:120]})"
    except (psutil.Error, OSError):
        pass
    return "another process"


def accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def terminate(pids: list[int], timeout: float) -> None:
    """SIGTERM the processes together (resuming paused ones first); SIGKILL whatever is
    still there after ``timeout``."""
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in pids:
        if not wait_gone(pid, max(0.1, deadline - time.monotonic())):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, 10)


def exited(proc: psutil.Process) -> bool:
    """Whether every thread of the process ended (its ports and file locks released). A zombie
    whose thread count is above one is still exiting: its first thread ended, others have not —
    seen on the local cluster as a broker killed -9 whose listener port was still taken, by no
    process one could name, when the node was started again."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE and proc.num_threads() <= 1
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, timeout: float) -> bool:
    """Whether the process ended within ``timeout`` (:func:`exited`). A zombie of one thread has
    ended: a node started by another process (the test session, an earlier `vigil cluster up`)
    stays one until that process reaps it, and waiting for it to vanish would take the whole
    timeout."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            return True
        except psutil.TimeoutExpired:
            pass
        except psutil.NoSuchProcess:
            return True
        if exited(proc):
            return True
        if time.monotonic() >= deadline:
            return False
