"""One real 3-node Kafka cluster for the integration session (its own ports and directory)."""

from __future__ import annotations

import time

import pytest

from monitor.canary.runner import prepare_topics
from monitor.chaos.heal import heal_cluster
from monitor.cluster.local_cluster import LocalCluster
from tests.integration.helpers import make_config
from tests.integration.watch_helpers import Background


@pytest.fixture(scope="session")
def cluster_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    # Retention is checked every 5 s (the default is 5 minutes) so that a test can watch segments go.
    config, path = make_config(tmp, client_base=21092, internal_base=22092, control_port=22090,
                               cluster={"broker_overrides": {"log.retention.check.interval.ms": 5000}})
    cluster = LocalCluster(config.cluster, print)
    started = time.monotonic()
    try:  # a start that fails half-way must not leave its nodes running either
        cluster.up()
        up_seconds = time.monotonic() - started
        yield {"config": config, "config_path": path, "cluster": cluster, "up_seconds": up_seconds,
               "tmp": tmp, "bootstrap": cluster.bootstrap_servers}
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def topics(cluster_env):
    return prepare_topics(cluster_env["config"])


def healthy(cluster: LocalCluster) -> None:
    """Make sure every node runs, none is paused or file-size limited and no link is cut: the undo
    of `vigil chaos heal`, before and after (a finalizer of) every test that takes the cluster."""
    heal_cluster(cluster)
    cluster.up()


@pytest.fixture
def cluster_ready(cluster_env):
    healthy(cluster_env["cluster"])
    yield cluster_env
    stop_leftover_background()  # before the cluster is healed: a leftover run must not act on it meanwhile
    healthy(cluster_env["cluster"])


@pytest.fixture(autouse=True)
def no_leftover_background():
    """A background `vigil` a test left running (it failed before stopping it, or killed only
    its first process) is ended with everything it started: it would take the CPU of the tests
    after it, and outlive the session's cluster (``cluster_ready`` does it first, before healing)."""
    yield
    stop_leftover_background()


def stop_leftover_background() -> None:
    left = Background.stop_leftovers()
    if left:
        print(f"stopped background commands the test left running: {left}")
