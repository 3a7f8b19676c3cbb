"""One real 3-node Kafka cluster for the integration session (its own ports and directory)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException

from monitor.canary.runner import prepare_topics
from monitor.chaos.heal import heal_cluster
from monitor.clients import admin
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report kept on the test (``rep_call``: whether the test itself failed)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def cluster_ready(cluster_env, request):
    healthy(cluster_env["cluster"])
    before = topic_names(cluster_env)
    yield cluster_env
    stop_leftover_background()  # before the cluster is healed: a leftover run must not act on it meanwhile
    healthy(cluster_env["cluster"])
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        # kept for a look after the session: `vigil cluster up` on the session's cluster config and
        # `vigil audit` on the test's (both under pytest's base temp), with the canary still there
        print(f"the failed test's topics are kept: {sorted(topic_names(cluster_env) - before)}; "
              f"the cluster's config: {cluster_env['config_path']}")
        return
    drop_topics_created_since(cluster_env, before)


def topic_names(cluster_env) -> set[str]:
    return set(admin(cluster_env["config"]).list_topics(timeout=30).topics)


def drop_topics_created_since(cluster_env, before: set[str]) -> None:
    """Delete the topics a test created (not Kafka's own, not the session's shared ones). Every
    partition a cluster holds costs its brokers CPU on each replica fetch, idle or not: measured
    with one idempotent writer at 200 writes/s, the three brokers took 56-64 % of a core with 18
    partitions, 95 % with 136 and 150 % with 886 — so a session cluster keeping every test's topics
    got slower the longer the suite ran (an idle node restarted as fast with 886 as with 136)."""
    config = cluster_env["config"]
    shared = {config.canary.name, config.ledger.topic, config.groups.observation_topic, config.eos.output_topic}
    client = admin(config)
    now = set(client.list_topics(timeout=30).topics)
    created = sorted(t for t in now - before if not t.startswith("__") and t not in shared)
    if not created:
        return
    for topic, future in client.delete_topics(created, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as exc:  # (a leftover on a slow cluster costs time, not correctness)
            print(f"could not delete the test's topic {topic}: {exc}")


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
