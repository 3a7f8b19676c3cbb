"""The local cluster on its own ports: start, idempotent start, node control, clean stop."""

from __future__ import annotations

import json
import socket
import time

import psutil
import pytest

from monitor.cluster.java import JavaError
from monitor.cluster.local_cluster import LocalCluster
from tests.integration.helpers import make_config, vigil


def _our_processes(state_dir: str) -> list[psutil.Process]:
    procs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(state_dir in part for part in (p.info["cmdline"] or [])):
                procs.append(p)
        except psutil.Error:
            continue
    return procs


def test_up_status_node_control_and_down(tmp_path):
    config, path = make_config(tmp_path, client_base=21192, internal_base=23092, control_port=23090)
    cluster = LocalCluster(config.cluster)
    try:
        started = time.monotonic()
        out = vigil(path, "cluster", "up", timeout=120)
        elapsed = time.monotonic() - started
        assert elapsed <= 60, f"cluster up took {elapsed:.1f} s"
        assert "ready in" in out.stdout

        status = json.loads(vigil(path, "cluster", "status", "--json").stdout)
        assert [n["state"] for n in status["nodes"]] == ["running"] * 3
        assert all(n["listening"] for n in status["nodes"])
        assert status["active_controller"] in (1, 2, 3)
        assert sum(n["active_controller"] for n in status["nodes"]) == 1
        assert status["network"] == "proxied"
        assert status["bootstrap_servers"] == "127.0.0.1:21192,127.0.0.1:21193,127.0.0.1:21194"
        pids = [n["pid"] for n in status["nodes"]]

        # idempotent: a second `up` starts nothing new
        vigil(path, "cluster", "up", timeout=120)
        again = json.loads(vigil(path, "cluster", "status", "--json").stdout)
        assert [n["pid"] for n in again["nodes"]] == pids

        # per-node control from Python
        cluster.pause(2)
        assert cluster.status().nodes[1].state == "paused"
        cluster.resume(2)
        assert cluster.status().nodes[1].state == "running"
        cluster.kill(3)
        assert cluster.status().nodes[2].state == "stopped"
        assert psutil.pid_exists(pids[2]) is False or psutil.Process(pids[2]).status() == psutil.STATUS_ZOMBIE
        new_pid = cluster.start_node(3)
        assert new_pid != pids[2]
        # recognisable the moment start_node returns (wait_ready calls a node it cannot
        # recognise stopped; the kernel shows a new command line a moment after exec begins)
        assert cluster.node_pid(3) == new_pid and cluster.status().nodes[2].state == "running"
        cluster.wait_ready(60)
        cluster.restart(1)
        cluster.wait_ready(60)
        assert cluster.status().running == 3

        # cutting links goes through the proxy and shows in status
        cluster.isolate(1, ("controller",))
        blocked = cluster.status().blocked_links
        assert [1, 2, "controller"] in blocked and [2, 1, "controller"] in blocked
        assert not any(kind == "replication" for _s, _d, kind in blocked)
        cluster.heal()
        assert cluster.status().blocked_links == []
    finally:
        vigil(path, "cluster", "down", check=False)
    assert _our_processes(str(tmp_path)) == []
    for port in (21192, 21193, 21194, 23092, 23192, 23090):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    assert cluster.status().running == 0


def test_busy_port_is_a_clear_error(tmp_path):
    config, path = make_config(tmp_path, client_base=21292, internal_base=24092, control_port=24090)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 21293))
    blocker.listen()
    try:
        proc = vigil(path, "cluster", "up", check=False, timeout=120)
        assert proc.returncode == 2
        assert "port 127.0.0.1:21293 is already in use" in proc.stderr
        assert "Traceback" not in proc.stderr
    finally:
        blocker.close()
        vigil(path, "cluster", "down", check=False)
    assert _our_processes(str(tmp_path)) == []


def test_missing_java_is_a_clear_error(tmp_path):
    config, path = make_config(tmp_path, client_base=21392, internal_base=25092, control_port=25090)
    config.cluster.java_home = str(tmp_path / "no-jdk")
    with pytest.raises(JavaError, match="no Java 17\\+ found"):
        LocalCluster(config.cluster).up()
