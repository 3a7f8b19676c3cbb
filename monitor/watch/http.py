"""The watch's HTTP endpoint: ``/metrics``, plus ``/healthz`` (liveness) and ``/ready`` (readiness).

``/healthz`` answers 200 whenever the process serves requests — it never depends on the
cluster or on freshness, so a broker outage does not get the monitor restarted. ``/ready``
answers 200 only while the query runs and the last trigger is recent; it may go 503 during
an outage, which only takes the pod out of a Service's endpoints.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from monitor.config import ConfigError


def serve(bind: str, port: int, registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0]
            if path == "/healthz":
                self._reply(200, b"ok\n", "text/plain")
            elif path == "/ready":
                ok, why = ready()
                self._reply(200 if ok else 503, (why + "\n").encode(), "text/plain")
            elif path in ("/metrics", "/"):
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            else:
                self._reply(404, b"not found: /metrics, /healthz, /ready\n", "text/plain")

        def _reply(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    try:
        family = socket.getaddrinfo(bind or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except socket.gaierror as exc:
        raise ConfigError(f"metrics.bind: {bind!r} is not an address of this machine ({exc.strerror})") from exc

    class Server(ThreadingHTTPServer):
        # an IPv6 address ("::" in a dual-stack pod, "::1") or a name that resolves to one binds an
        # IPv6 socket; "::" then takes IPv4 connections as well (Linux's default bindv6only=0)
        address_family = family

    try:
        server = Server((bind, port), Handler)
    except OSError as exc:
        raise ConfigError(f"metrics.port: cannot serve /metrics on {bind}:{port} ({exc.strerror}); "
                          "stop what holds it or choose another port") from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="vigil-http", daemon=True).start()
    return server
