"""The local cluster's links (a mixin of :class:`monitor.cluster.local_cluster.LocalCluster`):
cutting and healing node-to-node links through the link proxy (:mod:`monitor.cluster.netproxy`)."""

from __future__ import annotations

from typing import Iterable

from monitor.cluster.errors import ClusterError
from monitor.cluster.layout import LINK_KINDS
from monitor.cluster.netproxy import send_command


class LinkControl:
    def _proxy(self, msg: dict) -> dict:
        if not self.layout.proxied:
            raise ClusterError("links cannot be cut in direct network mode (needs Java 18+)")
        if self.proxy_pid() is None:
            raise ClusterError("the link proxy is not running")
        return send_command(self.config.proxy_control_port, msg)

    def isolate(self, node_id: int, kinds: Iterable[str] = LINK_KINDS) -> dict:
        """Cut every link of ``kinds`` to and from ``node_id``; clients still reach it."""
        self.layout.node(node_id)
        reply: dict = {}
        for kind in kinds:
            if kind not in LINK_KINDS:
                raise ClusterError(f"unknown link kind {kind!r} (have {', '.join(LINK_KINDS)})")
            self._proxy({"op": "block", "src": node_id, "kind": kind})
            reply = self._proxy({"op": "block", "dst": node_id, "kind": kind})
        return reply

    def reconnect(self, node_id: int, kinds: Iterable[str] = LINK_KINDS) -> dict:
        """Undo :meth:`isolate` for ``kinds`` (other cuts stay)."""
        reply: dict = {}
        for kind in kinds:
            self._proxy({"op": "unblock", "src": node_id, "kind": kind})
            reply = self._proxy({"op": "unblock", "dst": node_id, "kind": kind})
        return reply

    def block_link(self, src: int, dst: int, kind: str) -> dict:
        return self._proxy({"op": "block", "src": src, "dst": dst, "kind": kind})

    def unblock_link(self, src: int, dst: int, kind: str) -> dict:
        return self._proxy({"op": "unblock", "src": src, "dst": dst, "kind": kind})

    def heal(self) -> dict:
        return self._proxy({"op": "heal"})
