"""Network layout and node configuration of the local cluster (pure: no processes, no I/O).

Every node has three listeners:

* ``CLIENT`` on ``host:client_port`` — clients (canaries, Spark, probers) connect here
  directly, never through a proxy, so they still reach a node that is cut off from its
  peers.
* ``REPLICATION`` (the inter-broker listener) and ``CONTROLLER`` bind ``127.0.0.1`` on
  internal ports but are *advertised* under a host name, ``vigil-node-<id>``.

Each node JVM gets its own hosts file (``-Djdk.net.hosts.file``, Java 18+) in which every
*peer's* name resolves to an address unique to the ordered pair, ``127.10.<src>.<dst>``.
Vigil's link proxy listens on those addresses and forwards to the peer's real port. So every
connection one node opens to another crosses a proxy link that belongs to exactly that
ordered pair and listener kind, and a chaos step can:

* cut a node off from its peers and the controller quorum (block every link to and from it,
  both kinds) while clients still reach it;
* cut a node off from the controllers only (block its ``controller`` links);
* or cut any single directed link.

A node resolves its own name to ``127.0.0.1`` (no proxy for talking to itself).

Without Java 18 there is no per-process hosts file, so the layout falls back to ``direct``
mode: the listeners are advertised on ``127.0.0.1`` and no proxy runs; links can then not
be cut (``status`` says which mode is in force).
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import ClusterConfig

LINK_KINDS = ("replication", "controller")


@dataclass(frozen=True)
class NodeLayout:
    node_id: int
    client_port: int
    replication_port: int
    controller_port: int

    @property
    def hostname(self) -> str:
        return f"vigil-node-{self.node_id}"


@dataclass(frozen=True)
class ProxyLink:
    src: int
    dst: int
    kind: str
    listen_host: str
    listen_port: int
    target_port: int


@dataclass(frozen=True)
class ClusterLayout:
    config: ClusterConfig
    proxied: bool

    @property
    def nodes(self) -> list[NodeLayout]:
        c = self.config
        return [
            NodeLayout(
                node_id=i,
                client_port=c.client_port_base + i - 1,
                replication_port=c.internal_port_base + i - 1,
                controller_port=c.internal_port_base + 100 + i - 1,
            )
            for i in range(1, c.nodes + 1)
        ]

    def node(self, node_id: int) -> NodeLayout:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} (nodes are 1..{self.config.nodes})")

    @property
    def bootstrap_servers(self) -> str:
        return self.config.bootstrap_servers

    def peer_address(self, src: int, dst: int) -> str:
        if not self.proxied or src == dst:
            return "127.0.0.1"
        return f"127.10.{src}.{dst}"

    def _advertised_host(self, node: NodeLayout) -> str:
        return node.hostname if self.proxied else "127.0.0.1"

    def hosts_file(self, src: int) -> str:
        return "".join(f"{self.peer_address(src, n.node_id)} {n.hostname}\n" for n in self.nodes)

    def proxy_links(self) -> list[ProxyLink]:
        if not self.proxied:
            return []
        links = []
        for s in self.nodes:
            for d in self.nodes:
                if s.node_id == d.node_id:
                    continue
                for kind, port in (("replication", d.replication_port), ("controller", d.controller_port)):
                    links.append(ProxyLink(s.node_id, d.node_id, kind,
                                           self.peer_address(s.node_id, d.node_id), port, port))
        return links

    def server_properties(self, node_id: int, data_dir: str) -> dict[str, str]:
        c = self.config
        n = self.node(node_id)
        rf = min(3, c.nodes)
        voters = ",".join(
            f"{m.node_id}@{self._advertised_host(m)}:{m.controller_port}" for m in self.nodes
        )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": (
                f"CLIENT://{c.host}:{n.client_port},"
                f"REPLICATION://127.0.0.1:{n.replication_port},"
                f"CONTROLLER://127.0.0.1:{n.controller_port}"
            ),
            "advertised.listeners": (
                f"CLIENT://{c.host}:{n.client_port},"
                f"REPLICATION://{self._advertised_host(n)}:{n.replication_port}"
            ),
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": data_dir,
            "num.partitions": "1",
            "default.replication.factor": str(rf),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(2, rf)),
            "min.insync.replicas": str(c.min_insync_replicas),
            "unclean.leader.election.enable": str(c.unclean_leader_election).lower(),
            "replica.lag.time.max.ms": str(c.replica_lag_time_max_ms),
            # Vigil creates its topics itself with explicit settings, never implicitly.
            "auto.create.topics.enable": "false",
            # How often the KRaft controller elects an unclean leader for a leaderless partition of a
            # topic that allows it (default 5 minutes): a chaos day cannot wait that long.
            "unclean.leader.election.interval.ms": "1000",
            "group.initial.rebalance.delay.ms": "0",
            # The group and transaction coordinators' topics with 6 partitions, not 50 each: a node
            # loads (and elects, and replicates) every one it leads at each start; the canaries use
            # a handful of groups and transactional IDs, and coordinator faults need only that each
            # node leads some.
            "offsets.topic.num.partitions": "6",
            "transaction.state.log.num.partitions": "6",
            # One rack per node, and followers serve fetches to clients of their rack (KIP-392):
            # the group canary's rack-aware member (groups.rack) reads from a follower.
            "broker.rack": rack_of(node_id),
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        }
        if c.security == "sasl_ssl":
            props["listener.security.protocol.map"] = "CLIENT:SASL_SSL,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT"
            props.update(SECURED_PROPERTIES)
        props.update({k: _prop_value(v) for k, v in c.broker_overrides.items()})
        return props


# The client listener of a secured cluster (cluster.security: sasl_ssl): SCRAM-SHA-512 over TLS,
# KRaft's StandardAuthorizer with no access without an ACL. The internal listeners stay plaintext
# on loopback and authenticate as User:ANONYMOUS, which must be a super user or brokers cannot
# register with the controllers; vigil-admin is the cluster's own super user (its checks, SCRAM
# users and ACLs). The key store's location and password are added by the cluster (per machine).
# Every SASL connection authenticates again within 15 s (KIP-368), as a rotated password needs:
# a client still holding the old one is refused then, not whenever it happens to reconnect.
SECURED_PROPERTIES = {
    "connections.max.reauth.ms": "15000",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.client.scram-sha-512.sasl.jaas.config":
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.client.ssl.keystore.type": "PKCS12",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:vigil-admin",
    "allow.everyone.if.no.acl.found": "false",
}


def _prop_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def render_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


def rack_of(node_id: int) -> str:
    """The rack a local cluster node is in (``broker.rack``): one per node."""
    return f"rack-{node_id}"
