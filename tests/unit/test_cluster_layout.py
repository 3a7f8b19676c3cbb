import asyncio
import socket
import threading

from monitor.cluster.layout import ClusterLayout, ProxyLink
from monitor.cluster.netproxy import Link, Proxy
from monitor.config import ClusterConfig


def test_each_ordered_pair_has_its_own_address_and_link():
    layout = ClusterLayout(ClusterConfig(), proxied=True)
    assert layout.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    hosts = layout.hosts_file(2)
    assert "127.10.2.1 vigil-node-1\n" in hosts and "127.0.0.1 vigil-node-2\n" in hosts
    links = layout.proxy_links()
    assert len(links) == 3 * 2 * 2
    assert len({(l.listen_host, l.listen_port) for l in links}) == len(links)
    props = layout.server_properties(1, "/d")
    assert props["controller.quorum.voters"] == "1@vigil-node-1:19192,2@vigil-node-2:19193,3@vigil-node-3:19194"
    assert props["advertised.listeners"] == "CLIENT://127.0.0.1:9092,REPLICATION://vigil-node-1:19092"
    assert props["auto.create.topics.enable"] == "false"


def test_chaos_settings_reach_server_properties():
    cfg = ClusterConfig(min_insync_replicas=1, unclean_leader_election=True, replica_lag_time_max_ms=5000,
                        broker_overrides={"log.retention.ms": 60000})
    props = ClusterLayout(cfg, proxied=False).server_properties(3, "/d")
    assert props["min.insync.replicas"] == "1" and props["unclean.leader.election.enable"] == "true"
    assert props["replica.lag.time.max.ms"] == "5000" and props["log.retention.ms"] == "60000"
    assert "vigil-node" not in props["controller.quorum.voters"]  # direct mode
    assert ClusterLayout(cfg, proxied=False).proxy_links() == []


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_proxy_forwards_and_a_cut_link_holds_bytes_until_healed():
    echo_port, listen_port, control_port = _free_port(), _free_port(), _free_port()
    echo = socket.socket()
    echo.bind(("127.0.0.1", echo_port))
    echo.listen()

    def serve():
        conn, _ = echo.accept()
        while data := conn.recv(1024):
            conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    loop = asyncio.new_event_loop()
    link = Link(ProxyLink(1, 2, "replication", "127.0.0.1", listen_port, echo_port))
    proxy = Proxy([link], control_port)

    async def start():
        return await asyncio.start_server(lambda r, w: proxy._serve_link(link, r, w), "127.0.0.1", listen_port)

    loop.run_until_complete(start())
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def call(msg):
        return asyncio.run_coroutine_threadsafe(asyncio.sleep(0, proxy.handle_command(msg)), loop).result(2)

    client = socket.create_connection(("127.0.0.1", listen_port), timeout=2)
    client.sendall(b"ping")
    assert client.recv(4) == b"ping"
    assert call({"op": "block", "src": 1, "kind": "replication"})["blocked"] == [[1, 2, "replication"]]
    client.sendall(b"held")
    client.settimeout(0.5)
    try:
        got = client.recv(4)
    except socket.timeout:
        got = b""
    assert got == b""
    assert call({"op": "heal"})["blocked"] == []
    client.settimeout(2)
    assert client.recv(4) == b"held"
    assert call({"op": "nonsense"}) == {"error": "unknown op 'nonsense'"}
    client.close()
    loop.call_soon_threadsafe(loop.stop)


def test_cluster_ids_never_start_with_a_dash():
    """An id like "-Ab..." reads as an option to kafka-storage format (a fresh-clone CI run failed so)."""
    from monitor.cluster.local_cluster import _new_cluster_id

    ids = [_new_cluster_id() for _ in range(3000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids) and len(set(ids)) == 3000
