"""Which node(s) a scenario step means, resolved when the step runs (see
:mod:`monitor.chaos.scenario` for the names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from monitor.chaos.scenario import ScenarioError
from monitor.clients import PartitionView

TXN_STATE_TOPIC = "__transaction_state"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (for text in the Basic Multilingual Plane)."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition whose leader coordinates a transactional id: Kafka's
    ``abs(hashCode) % partitions``, its abs mapping Integer.MIN_VALUE to 0."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class Resolver:
    """``describe(topic)`` gives every partition of a topic as the cluster has it now (one call
    per resolution: each answer describes the whole topic); ``controller()`` names the active
    controller; ``nodes`` are every node id; ``transactional_id`` is the first transactional
    writer's; ``ledger_leaders()`` names the leaders of the ledger partitions that hold the run's
    entries."""

    describe: Callable[[str], dict[int, PartitionView]]
    controller: Callable[[], int | None]
    nodes: tuple[int, ...]
    canary: str
    transactional_id: str = ""
    ledger_leaders: Callable[[], frozenset[int]] = frozenset

    def resolve(self, target: str, bound: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
        if target in bound:
            return bound[target]
        if target == "all":
            return self.nodes
        if target.startswith("node:"):
            node = int(target.split(":", 1)[1])
            if node not in self.nodes:
                raise ScenarioError(f"target {target}: the cluster has nodes {', '.join(map(str, self.nodes))}")
            return (node,)
        if target == "leader" or target.startswith("leader:"):
            p = int(target.split(":", 1)[1]) if ":" in target else 0
            return (self._leader(self.canary, p, target),)
        if target == "leader_off_ledger":
            avoid = self.ledger_leaders()
            views = [v for _p, v in sorted(self.describe(self.canary).items())]
            # a preferred leader first: a preferred-leader election will not move it away mid-scenario
            for v in sorted(views, key=lambda v: v.replicas[:1] != (v.leader,)):
                if v.leader >= 0 and v.leader not in avoid:
                    return (v.leader,)
            raise ScenarioError(f"target {target}: every canary partition's leader also leads a ledger partition "
                                f"of this run (nodes {sorted(avoid)})")
        if target == "followers":
            view = self.partition(self.canary, 0)
            return tuple(r for r in view.replicas if r != view.leader)
        if target == "coordinator":
            if not self.transactional_id:
                raise ScenarioError("target coordinator: no transactional writer")
            desc = self.describe(TXN_STATE_TOPIC)
            p = coordinator_partition(self.transactional_id, len(desc))
            return (self._leader(TXN_STATE_TOPIC, p, target, desc),)
        if target == "controller":
            node = self.controller()
            if node is None:
                raise ScenarioError("target controller: no active controller now")
            return (node,)
        raise ScenarioError(f"unknown target {target!r}")

    def partition(self, topic: str, p: int) -> PartitionView:
        return self.describe(topic)[p]

    def led_by(self, nodes: tuple[int, ...]) -> list[int]:
        """The canary partitions whose leader is one of ``nodes`` now."""
        return sorted(p for p, v in self.describe(self.canary).items() if v.leader in nodes)

    def _leader(self, topic: str, p: int, target: str, desc: dict[int, PartitionView] | None = None) -> int:
        leader = (desc if desc is not None else self.describe(topic))[p].leader
        if leader < 0:
            raise ScenarioError(f"target {target}: {topic} partition {p} has no leader now")
        return leader
