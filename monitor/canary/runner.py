"""Wiring for canary writers: topics, identity, ledger and Kafka producers from the config."""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from monitor import client_config, clients
from monitor.canary.topic_watch import TopicObserver
from monitor.canary.transactional import TransactionalWriter
from monitor.canary.writer import CanaryWriter
from monitor.clients import TopicInfo
from monitor.config import Config, WriterConfig
from monitor.identity import WriterIdentity, claim
from monitor.ledger import LedgerWriter
from monitor.metrics import ProducerMetrics


@dataclass(frozen=True)
class Topics:
    canary: TopicInfo
    ledger: TopicInfo


def prepare_topics(config: Config) -> Topics:
    """Create the canary and ledger topics when missing (existing ones are used as they are), and
    the EOS pipeline's output topic when ``eos.enabled``, the group canary's observation topic when
    ``groups.enabled``."""
    canary = clients.ensure_topic(clients.admin(config), config.canary.name, config.canary.partitions,
                                  config.canary.replication_factor, config.canary.topic_configs())
    ledger_admin = clients.admin(config, ledger=True)
    ledger = clients.ensure_topic(ledger_admin, config.ledger.topic, config.ledger.partitions,
                                  config.ledger.replication_factor, config.ledger.topic_configs())
    # a ledger created by Vigil 0.1 stamps the writers' clock: switch it to the brokers' (best effort)
    clients.alter_topic_config(ledger_admin, config.ledger.topic, "message.timestamp.type", "LogAppendTime")
    if config.eos.enabled:  # the EOS pipeline's output, before the watch subscribes to it
        from monitor.eos.audit import ensure_output_topic

        ensure_output_topic(config, canary.partitions)
    if config.groups.enabled:  # the group canary's observation log, before the watch subscribes to it
        from monitor.group.audit import ensure_observation_topic

        ensure_observation_topic(config)
    return Topics(canary, ledger)


def prepare_topics_patiently(config: Config, stop: threading.Event, say: Callable[[str], None],
                             longest_wait_s: float = 30.0) -> Topics | None:
    """:func:`prepare_topics`, tried again with a growing wait while the cluster cannot be reached
    or refuses the client (wrong credentials, a missing ACL: the clients' own line names the
    setting, :mod:`monitor.client_errors`); None when ``stop`` was set first. A refusal Vigil
    cannot wait out (a bad topic setting) is raised."""
    wait = 1.0
    while True:
        try:
            return prepare_topics(config)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            why = err.str() if err is not None else type(exc).__name__
            say(f"vigil: the canary and ledger topics could not be prepared ({why}); trying again in {wait:.0f} s")
        if stop.wait(wait):
            return None
        wait = min(wait * 2, longest_wait_s)


def writer_instance_id(config: Config, writer: WriterConfig) -> str:
    return f"{config.resolved_instance_id()}-{writer.name}"


def open_ledger(config: Config, identity: WriterIdentity) -> LedgerWriter:
    producer = clients.producer(client_config.ledger_producer(config, identity.instance_id), "ledger", config,
                                ledger=True)
    ledger = LedgerWriter(producer, config.ledger.topic, identity.instance_id, identity.writer_id,
                          identity.incarnation)
    ledger.placement = config.ledger_placement()
    return ledger


def open_writer(config: Config, writer: WriterConfig, topics: Topics,
                metrics: ProducerMetrics | None = None, instance_id: str | None = None) -> CanaryWriter:
    identity = claim(config.state_dir, instance_id or writer_instance_id(config, writer))
    ledger = open_ledger(config, identity)

    def factory(error_cb: Callable[[Any], None]) -> Producer:
        return clients.producer(client_config.canary_producer(config, writer, identity.instance_id),
                                f"writer-{writer.name}", config, also=error_cb)

    admin = clients.admin(config)
    observer = TopicObserver(admin, topics.canary.name, config.ledger.checkpoint_interval_s)
    observer.refresh()  # the start entry carries the topic's settings
    observer.start()

    def recreate() -> clients.TopicInfo:
        # As configured, but with as many partitions as it had: readers that were assigned the
        # partitions an operator added would otherwise wait for them forever (Spark's Kafka
        # source fails its batch after 60 s without a position).
        c = config.canary
        partitions = max(c.partitions, observer.most_partitions)
        return clients.ensure_topic(admin, c.name, partitions, c.replication_factor, c.topic_configs())

    cls = TransactionalWriter if writer.transactional else CanaryWriter
    opened = cls(writer, topics.canary, identity, ledger, factory, metrics, observer=observer,
                 checkpoint_s=config.ledger.checkpoint_interval_s, recreate=recreate)
    opened.on_refused = clients.refusals(f"writer-{writer.name}", config)
    return opened


class WriterThread(threading.Thread):
    """Runs one writer until ``stop``; keeps the exception if it dies."""

    def __init__(self, writer: CanaryWriter, stop: threading.Event, duration: float | None = None,
                 max_records: int | None = None, allowed: Callable[[], int] | None = None) -> None:
        super().__init__(name=f"writer-{writer.cfg.name}", daemon=True)
        self.writer = writer
        self.stop_event = stop
        self.duration = duration
        self.max_records = max_records
        self.allowed = allowed
        self.error: BaseException | None = None
        self.trace = ""

    def run(self) -> None:
        try:
            self.writer.run(self.stop_event, self.duration, self.max_records, self.allowed)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc
            self.trace = traceback.format_exc()
        finally:
            self.discard()

    def discard(self) -> None:
        """Give back what the writer holds (its identity, its topic observer): after it ran, or
        instead of running (stopped before it was started)."""
        self.writer.identity.release()
        if self.writer.observer is not None:
            self.writer.observer.stop()
