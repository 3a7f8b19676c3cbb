"""Undo every fault a chaos run can leave behind, whoever left it (a finished run, Ctrl-C, or a
runner killed with -9): paused nodes resumed, file-size limits lifted, links healed, stopped nodes
started. Each fault of :mod:`monitor.chaos.scenario` has its undo here, and nothing else does."""

from __future__ import annotations

import resource

from monitor.cluster.local_cluster import LocalCluster


def limit_file_size(pid: int, max_bytes: int) -> None:
    """Appends beyond ``max_bytes`` fail with EFBIG (the JVM ignores SIGXFSZ): a full disk. Only the
    soft limit is lowered: raising a hard limit again needs a privilege containers often lack."""
    _soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (max_bytes, hard))


def file_size_limited(pid: int) -> bool:
    try:
        soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    except (ProcessLookupError, PermissionError):
        return False
    return soft != hard


def lift_file_size_limit(pid: int) -> None:
    _soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))


def heal_cluster(cluster: LocalCluster) -> list[str]:
    """Bring the local cluster back to health; returns what was done (empty: it was healthy)."""
    done: list[str] = []
    status = cluster.status()
    for node in status.nodes:
        if node.pid is None:
            continue
        if node.state == "paused":
            cluster.resume(node.node_id)
            done.append(f"node {node.node_id} resumed")
        if file_size_limited(node.pid):
            lift_file_size_limit(node.pid)
            done.append(f"node {node.node_id} file-size limit lifted (restart it if its log directory went offline)")
    if status.blocked_links:
        cluster.heal()
        done.append(f"{len(status.blocked_links)} cut link(s) healed")
    stopped = [n.node_id for n in status.nodes if n.state == "stopped"]
    if stopped or (cluster.layout.proxied and status.proxy_pid is None):
        cluster.up()
        done.append(f"node(s) {', '.join(map(str, stopped))} started" if stopped else "link proxy started")
    return done
