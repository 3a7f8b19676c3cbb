"""Carrying out one scenario step on the local cluster; each fault that lasts returns its undo."""

from __future__ import annotations

import time
from typing import Callable

from monitor.chaos.heal import lift_file_size_limit, limit_file_size
from monitor.chaos.scenario import ScenarioError, Step
from monitor.chaos.targets import Resolver
from monitor.cluster.local_cluster import LocalCluster

ISOLATE_KINDS = {"isolate": ("replication", "controller"), "isolate_controller": ("controller",),
                 "isolate_replication": ("replication",)}
Undo = Callable[[], None]


# A started node is waited for until it is back in the cluster (a node recovering its logs after
# kill -9 on a loaded machine took 70 s in CI): a fault timed for after it must not find it still
# starting, which is another scenario (two nodes down at once).
START_READY_S = 120.0


def _each(nodes: tuple[int, ...], act: Callable[[int], object]) -> None:
    for n in nodes:
        act(n)


def apply(step: Step, cluster: LocalCluster, resolver: Resolver, bound: dict[str, tuple[int, ...]],
          say: Callable[[str], None] = lambda _m: None) -> tuple[tuple[int, ...], Undo | None]:
    """Carry out ``step``; returns the nodes it acted on and, for a fault with ``duration_s``, its undo."""
    nodes = resolver.resolve(step.target, bound) if step.target else ()
    if step.bind:
        bound[step.bind] = nodes
    f, undo = step.fault, None
    say(f"{f} {','.join(map(str, nodes))}".strip())
    if f == "kill":
        _each(nodes, lambda n: cluster.kill(n) if cluster.node_pid(n) is not None else None)
    elif f == "stop":
        _each(nodes, cluster.stop_node)
    elif f == "start":
        _each(nodes, cluster.start_node)
        ready_s = float(step.args.get("ready_s", START_READY_S))
        late = [n for n in nodes if not cluster.wait_node_ready(n, ready_s)]
        if late:  # the timeline goes on; the report shows how long the step took
            say(f"node(s) {','.join(map(str, late))} not back in the cluster after {ready_s:.0f} s")
    elif f == "restart":
        _each(nodes, cluster.restart)
    elif f == "pause":
        _each(nodes, cluster.pause)
        undo = lambda: _each(nodes, lambda n: cluster.resume(n) if _paused(cluster, n) else None)  # noqa: E731
    elif f == "resume":
        _each(nodes, cluster.resume)
    elif f in ISOLATE_KINDS:
        kinds = ISOLATE_KINDS[f]
        _each(nodes, lambda n: cluster.isolate(n, kinds))
        undo = lambda: _each(nodes, lambda n: cluster.reconnect(n, kinds))  # noqa: E731
    elif f == "cut_link":
        src, dst, kind = int(step.args["src"]), int(step.args["dst"]), str(step.args.get("kind", "replication"))
        cluster.block_link(src, dst, kind)
        undo = lambda: cluster.unblock_link(src, dst, kind)  # noqa: E731
    elif f == "heal":
        cluster.heal()
    elif f == "rolling_restart":
        for n in resolver.nodes:
            cluster.restart(n)
            cluster.wait_ready(90)
            time.sleep(float(step.args.get("pause_s", 5)))
    elif f == "full_disk":
        pids = [p for p in (cluster.node_pid(n) for n in nodes) if p is not None]
        for pid in pids:
            limit_file_size(pid, int(step.args.get("max_bytes", 1)))
        undo = lambda: [_lift(pid) for pid in pids]  # noqa: E731
    elif f == "wait_isr_shrunk":
        parts = resolver.led_by(nodes) if nodes else [0]
        if not parts:
            raise ScenarioError(f"wait_isr_shrunk: node(s) {','.join(map(str, nodes))} lead no canary partition now")
        _wait_isr_shrunk(resolver, parts, float(step.args.get("timeout_s", 90)))
    elif f == "wait":
        time.sleep(float(step.args["seconds"]))
    return nodes, (undo if step.duration_s is not None else None)


def _paused(cluster: LocalCluster, node: int) -> bool:
    return next(n.state for n in cluster.status().nodes if n.node_id == node) == "paused"


def _lift(pid: int) -> None:
    try:
        lift_file_size_limit(pid)
    except ProcessLookupError:  # the broker shut down when its log directory failed
        pass


def _wait_isr_shrunk(resolver: Resolver, partitions: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    described = resolver.describe(resolver.canary)
    leaders = {p: described[p].leader for p in partitions}
    while True:
        described = resolver.describe(resolver.canary)
        views = {p: described[p] for p in partitions}
        moved = {p: v.leader for p, v in views.items() if v.leader != leaders[p]}
        if moved:  # e.g. a preferred-leader election: the ISR would never shrink to the one meant
            raise ScenarioError(f"while waiting for the ISR of {resolver.canary} to shrink, leadership moved "
                                f"(partition: new leader) {moved} from {leaders}")
        wide = {p: list(v.isr) for p, v in views.items() if v.isr != (v.leader,)}
        if not wide:
            return
        if time.monotonic() > deadline:
            raise ScenarioError(f"the ISR of {resolver.canary} is still {wide} (partition: ISR) after "
                                f"{timeout_s:.0f} s (replica.lag.time.max.ms decides when followers drop out)")
        time.sleep(1)
