"""The Kafka boundary: the few client calls Vigil uses, as protocols, and their factories.

Unit tests hand fakes that satisfy these protocols to the canary and ledger code; everything
else gets real confluent-kafka clients from the factories below, configured from
:class:`monitor.config.Config` (security settings included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from monitor.config import Config, KafkaConfig, WriterConfig


class ProducerLike(Protocol):
    def produce(self, topic: str, value: bytes | None = ..., key: bytes | None = ...,
                partition: int = ..., on_delivery: Callable[..., None] | None = ...) -> None: ...

    def poll(self, timeout: float = ...) -> int: ...

    def flush(self, timeout: float = ...) -> int: ...

    def __len__(self) -> int: ...


class TransactionalProducerLike(ProducerLike, Protocol):
    def init_transactions(self, timeout: float = ...) -> None: ...

    def begin_transaction(self) -> None: ...

    def commit_transaction(self, timeout: float = ...) -> None: ...

    def abort_transaction(self, timeout: float = ...) -> None: ...


class ClientError(Exception):
    pass


def canary_bootstrap(config: Config) -> str:
    if config.kafka.bootstrap_servers:
        return config.kafka.bootstrap_servers
    from monitor.cluster.layout import ClusterLayout

    return ClusterLayout(config.cluster, proxied=True).bootstrap_servers


def ledger_bootstrap(config: Config) -> str:
    if config.ledger.kafka is not None and config.ledger.kafka.bootstrap_servers:
        return config.ledger.kafka.bootstrap_servers
    return canary_bootstrap(config)


def admin(kafka: KafkaConfig, bootstrap: str) -> AdminClient:
    return AdminClient(kafka.librdkafka(bootstrap))


def canary_producer_config(config: Config, writer: WriterConfig, instance_id: str,
                           error_cb: Callable[[Any], None] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = config.kafka.librdkafka(canary_bootstrap(config))
    conf.update({
        "client.id": f"vigil-{instance_id}",
        "acks": writer.acks,
        "enable.idempotence": writer.idempotence,
        "linger.ms": writer.linger_ms,
        "message.timeout.ms": writer.message_timeout_ms,
        "request.timeout.ms": writer.request_timeout_ms,
        # Never let the client pick partitions: the writer chooses each one.
        "partitioner": "consistent_random",
    })
    if writer.transactional:
        conf["transactional.id"] = f"vigil-{instance_id}"
        conf["transaction.timeout.ms"] = writer.transaction.timeout_ms
    if error_cb is not None:
        conf["error_cb"] = error_cb
    conf.update(writer.client_overrides)
    return conf


def ledger_producer_config(config: Config, instance_id: str) -> dict[str, Any]:
    conf: dict[str, Any] = config.ledger_kafka().librdkafka(ledger_bootstrap(config))
    conf.update({
        "client.id": f"vigil-ledger-{instance_id}",
        "acks": "all",
        "enable.idempotence": True,
        # Never give up on a ledger entry: a writer whose ledger is unavailable stalls
        # (and shows as producer_stalled) instead of writing records nobody accounts for.
        "message.timeout.ms": 0,
        "linger.ms": 2,
    })
    return conf


def consumer(kafka: KafkaConfig, bootstrap: str, isolation: str, group: str | None = None,
             **extra: Any) -> Consumer:
    conf: dict[str, Any] = kafka.librdkafka(bootstrap)
    conf.update({
        "group.id": group or "vigil-reader",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    conf.update(extra)
    return Consumer(conf)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    leaders: dict[int, int]


def describe_topic(client: AdminClient, name: str, timeout: float = 10.0) -> TopicInfo | None:
    md = client.list_topics(timeout=timeout)
    if name not in md.topics or md.topics[name].error is not None:
        return None
    futures = client.describe_topics(TopicCollection([name]), request_timeout=timeout)
    try:
        desc = futures[name].result()
    except KafkaException as exc:
        # Right after a creation, the broker answering may not have the topic in its
        # metadata yet: "not there yet", not an error.
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART or exc.args[0].retriable():
            return None
        raise
    leaders = {p.id: (p.leader.id if p.leader is not None else -1) for p in desc.partitions}
    return TopicInfo(name, str(desc.topic_id), len(desc.partitions), leaders)


def ensure_topic(client: AdminClient, name: str, partitions: int, replication_factor: int,
                 configs: dict[str, str], timeout: float = 30.0) -> TopicInfo:
    """Create the topic when missing; an existing topic is used as it is (never reassigned)."""
    info = describe_topic(client, name, timeout)
    if info is not None:
        return info
    futures = client.create_topics(
        [NewTopic(name, partitions, replication_factor, config=configs)], operation_timeout=timeout)
    try:
        futures[name].result()
    except KafkaException as exc:
        err = exc.args[0]
        if err.name() != "TOPIC_ALREADY_EXISTS":
            raise ClientError(f"cannot create topic {name!r}: {err.str()}") from None
    import time

    deadline = time.monotonic() + timeout
    while True:
        info = describe_topic(client, name, timeout)
        if info is not None and info.partitions == partitions and all(l >= 0 for l in info.leaders.values()):
            return info
        if time.monotonic() > deadline:
            raise ClientError(f"topic {name!r} was created but has no leaders after {timeout:.0f} s")
        time.sleep(0.2)
