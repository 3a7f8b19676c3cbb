"""The /metrics endpoint binds what `metrics.bind` names: IPv4 or IPv6."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from monitor.config import ConfigError
from monitor.watch import http


def _served(bind: str):
    registry = CollectorRegistry()
    Counter("vigil_probe", "a probe", registry=registry).inc()
    return http.serve(bind, 0, registry, lambda: (True, "ready"))


@pytest.mark.parametrize("bind, url_host", [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]"), ("::", "[::1]"),
                                            ("::", "127.0.0.1")])
def test_every_address_family_serves_metrics_health_and_readiness(bind, url_host):
    server = _served(bind)
    try:
        port = server.server_address[1]
        base = f"http://{url_host}:{port}"
        assert "vigil_probe_total 1.0" in urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert urllib.request.urlopen(f"{base}/healthz", timeout=5).read() == b"ok\n"
        assert urllib.request.urlopen(f"{base}/ready", timeout=5).read() == b"ready\n"
    finally:
        server.shutdown()
        server.server_close()


def test_an_address_that_does_not_resolve_names_the_key():
    with pytest.raises(ConfigError, match=r"^metrics.bind: 'no-such-host.invalid' is not an address"):
        _served("no-such-host.invalid")


def test_a_port_in_use_names_the_key_and_the_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"^metrics.port: cannot serve /metrics on 127.0.0.1:{port} "):
            http.serve("127.0.0.1", port, CollectorRegistry(), lambda: (True, "ready"))
