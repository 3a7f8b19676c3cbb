"""What `vigil cluster status` reports: each node's process, ports and role."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class NodeStatus:
    node_id: int
    pid: int | None
    state: str  # running | paused | stopped
    client_port: int
    replication_port: int
    controller_port: int
    listening: bool
    active_controller: bool


@dataclass
class ClusterStatus:
    state_dir: str
    bootstrap_servers: str
    network: str  # proxied | direct
    proxy_pid: int | None
    blocked_links: list[list]
    active_controller: int | None
    nodes: list[NodeStatus]

    @property
    def running(self) -> int:
        return sum(1 for n in self.nodes if n.state == "running")

    def to_json(self) -> dict:
        return asdict(self)
