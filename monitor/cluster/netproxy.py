"""The link proxy: one TCP forwarder per directed node-to-node link, each of which can be cut.

Run as ``python -m monitor.cluster.netproxy SPEC.json``; the spec lists the links
(see :class:`monitor.cluster.layout.ProxyLink`) and the control port. A cut link behaves
like a network partition, not like a refused connection: bytes stop flowing in both
directions (they wait in the socket buffers, as unacknowledged TCP segments would) and new
connections are accepted but not forwarded, so the peers see timeouts. Healing the link lets
the held bytes flow again, as TCP retransmission would.

Control protocol on ``127.0.0.1:<control_port>``: one JSON object per line, one reply line.

* ``{"op": "block", "src": 1, "dst": 2, "kind": "replication"}`` (kind optional = both)
* ``{"op": "unblock", ...}`` with the same fields, ``{"op": "heal"}`` for every link
* ``{"op": "status"}`` → ``{"blocked": [[src, dst, kind], ...], "connections": N}``
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from dataclasses import dataclass, field

from monitor.cluster.layout import ProxyLink

CHUNK = 256 * 1024


@dataclass
class Link:
    """One directed link of the layout (:class:`ProxyLink`) and whether bytes may flow on it."""

    spec: ProxyLink
    open: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.open.set()


class Proxy:
    def __init__(self, links: list[Link], control_port: int) -> None:
        self.links = links
        self.control_port = control_port
        self.connections = 0

    def _select(self, msg: dict) -> list[Link]:
        return [
            link for link in self.links
            if ("src" not in msg or link.spec.src == msg["src"])
            and ("dst" not in msg or link.spec.dst == msg["dst"])
            and ("kind" not in msg or link.spec.kind == msg["kind"])
        ]

    def handle_command(self, msg: dict) -> dict:
        op = msg.get("op")
        if op == "block":
            for link in self._select(msg):
                link.open.clear()
        elif op == "unblock":
            for link in self._select(msg):
                link.open.set()
        elif op == "heal":
            for link in self.links:
                link.open.set()
        elif op != "status":
            return {"error": f"unknown op {op!r}"}
        return {
            "blocked": [[l.spec.src, l.spec.dst, l.spec.kind] for l in self.links if not l.open.is_set()],
            "connections": self.connections,
        }

    async def _pump(self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await link.open.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                await link.open.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - closing a broken socket
                pass

    async def _serve_link(self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await link.open.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", link.spec.target_port)
            except OSError:
                writer.close()
                return
            _set_nodelay(writer)
            _set_nodelay(up_writer)
            await asyncio.gather(self._pump(link, reader, up_writer), self._pump(link, up_reader, writer))
        finally:
            self.connections -= 1

    async def _serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    reply = self.handle_command(json.loads(line))
                except (ValueError, TypeError) as exc:
                    reply = {"error": str(exc)}
                writer.write((json.dumps(reply) + "\n").encode())
                await writer.drain()
        finally:
            writer.close()

    async def run(self) -> None:
        servers = []
        for link in self.links:
            servers.append(await asyncio.start_server(
                lambda r, w, link=link: self._serve_link(link, r, w), link.spec.listen_host, link.spec.listen_port,
                reuse_address=True))
        servers.append(await asyncio.start_server(self._serve_control, "127.0.0.1", self.control_port,
                                                  reuse_address=True))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"netproxy: {len(self.links)} links, control on 127.0.0.1:{self.control_port}", flush=True)
        await stop.wait()
        for server in servers:
            server.close()


def _set_nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def send_command(control_port: int, msg: dict, timeout: float = 5.0) -> dict:
    """Send one control command to a running proxy and return its reply."""
    with socket.create_connection(("127.0.0.1", control_port), timeout=timeout) as sock:
        sock.sendall((json.dumps(msg) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def main(argv: list[str]) -> None:
    with open(argv[1]) as f:
        spec = json.load(f)
    links = [Link(ProxyLink(**l)) for l in spec["links"]]
    asyncio.run(Proxy(links, spec["control_port"]).run())


if __name__ == "__main__":
    main(sys.argv)
