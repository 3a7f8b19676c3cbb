"""The Kafka boundary: the few client calls Vigil uses, as protocols, their factories, and the
topic helpers.

Unit tests hand fakes that satisfy these protocols to the canary and ledger code; everything
else gets real confluent-kafka clients, configured by :mod:`monitor.client_config` from
:class:`monitor.config.Config` (security settings included).
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from invariants.errors import VigilError
from invariants.ledger_format import TopicSettings
from monitor import client_config
from monitor.client_errors import ERRORS, REFUSED, classify
from monitor.config import Config


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


class ClientError(VigilError):
    pass


def reporting(conf: dict, client: str, config: Config, ledger: bool = False,
              also: Callable[[Any], None] | None = None) -> dict:
    """``conf`` with an error callback that reports to :data:`monitor.client_errors.ERRORS` as
    ``client`` (``also``: the client's own callback, called first)."""
    return {**conf, "error_cb": refusals(client, config, ledger, also)}


def refusals(client: str, config: Config, ledger: bool = False,
             also: Callable[[Any], None] | None = None) -> Callable[[KafkaError], None]:
    """Reports ``client``'s errors to :data:`monitor.client_errors.ERRORS`, naming the settings of
    the cluster it talks to: its ``error_cb``, and for errors it gets elsewhere — a delivery
    report or a fetched message refused by an ACL (``also``: called first)."""
    security = (config.ledger_kafka() if ledger else config.kafka).security
    settings = "ledger.kafka.security" if ledger and config.ledger.kafka is not None else "kafka.security"
    return ERRORS.callback(client, settings, security.sasl_username, also)


# Every client this process opened, by cluster (ledger or not): a rotated SASL password is given
# to them all (monitor.credentials). Weak: a client nobody holds any more is not kept alive here.
OPEN: dict[bool, weakref.WeakSet] = {False: weakref.WeakSet(), True: weakref.WeakSet()}
# Held while a consumer closes and while a password is given to an open client: confluent-kafka's
# close() frees the client with the interpreter lock released before it marks the client closed, so
# a call from another thread in that window would use freed memory
CLOSING = threading.Lock()

C = TypeVar("C")


def _opened(client: C, ledger: bool) -> C:
    OPEN[ledger].add(client)
    return client


class ReportingProducer(Producer):
    """A producer Vigil can keep a weak reference to (the C type allows none)."""


def producer(conf: dict, client: str, config: Config, ledger: bool = False,
             also: Callable[[Any], None] | None = None) -> Producer:
    return _opened(ReportingProducer(reporting(conf, client, config, ledger, also)), ledger)


def admin(config: Config, ledger: bool = False) -> AdminClient:
    """An admin client for the canary cluster (or the ledger's)."""
    return _opened(AdminClient(reporting(client_config.admin(config, ledger), "admin", config, ledger)), ledger)


def consumer(config: Config, isolation: str, group: str, ledger: bool = False,
             profile: client_config.Profile = "default") -> Consumer:
    """An ``assign()`` reader of the canary cluster (or the ledger's); see :mod:`monitor.client_config`.
    Its errors are reported under its group's name (``vigil-prober-read_committed``: ``prober``)."""
    client = group.removeprefix("vigil-")
    for suffix in ("-read_committed", "-read_uncommitted", "-ledger"):
        client = client.removesuffix(suffix)
    return _opened(ReportingConsumer(reporting(client_config.consumer(config, isolation, group, ledger, profile),
                                               client, config, ledger), refusals(client, config, ledger)), ledger)


class ReportingConsumer(Consumer):
    """A consumer whose fetches refused by the brokers (an ACL, the credentials) are reported like
    its ``error_cb``'s errors: librdkafka returns those as error messages from ``consume``."""

    def __init__(self, conf: dict, refused: Callable[[KafkaError], None]) -> None:
        super().__init__(conf)
        self._refused = refused

    def close(self) -> None:
        with CLOSING:
            for open_clients in OPEN.values():
                open_clients.discard(self)
            super().close()

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list:
        msgs = super().consume(num_messages, timeout)
        for m in msgs:
            err = m.error()
            if err is not None and classify(err) in REFUSED:
                self._refused(err)
        return msgs


# a leader moving or just elected (OFFSET_NOT_AVAILABLE: its high watermark not established yet)
MOVING_LEADERSHIP = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                     KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
                     KafkaError.FENCED_LEADER_EPOCH, KafkaError.REPLICA_NOT_AVAILABLE,
                     KafkaError._TIMED_OUT, KafkaError._TRANSPORT}


T = TypeVar("T")


def _asked_again(call: Callable[[], T], worth_retrying: Callable[[KafkaError], bool], within_s: float,
                 pause_s: float) -> T:
    """``call()``, asked again every ``pause_s`` for up to ``within_s`` while it raises an error
    ``worth_retrying``; any other error, or the last one, is raised."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not worth_retrying(exc.args[0]) or time.monotonic() > deadline:
                raise
            time.sleep(pause_s)


def watermarks(client: Consumer, topic: str, partition: int, within_s: float = 60.0,
               timeout_s: float = 10.0) -> tuple[int, int]:
    """A partition's (low, high) watermarks, asked again for up to within_s while its leadership
    moves (a broker restarting, a preferred-leader election): the answer is only late, not wrong."""
    return _asked_again(lambda: client.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s),
                        lambda err: err.code() in MOVING_LEADERSHIP, within_s, 0.5)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    leaders: dict[int, int]
    replication_factor: int = 0  # the fewest replicas of any partition


def describe_topic(client: AdminClient, name: str, timeout: float = 10.0) -> TopicInfo | None:
    try:
        md = client.list_topics(timeout=timeout)
    except KafkaException:
        client.poll(0)  # serve the client's error callback: why no broker answered (credentials refused?)
        raise
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
    rf = min((len(p.replicas) for p in desc.partitions), default=0)
    return TopicInfo(name, str(desc.topic_id), len(desc.partitions), leaders, rf)


@dataclass(frozen=True)
class PartitionView:
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def describe_partitions(client: AdminClient, name: str, timeout: float = 10.0,
                        within_s: float = 0.0) -> dict[int, PartitionView]:
    """partition -> leader, replicas and ISR as the cluster describes them now; asked again for up
    to within_s while the answer is a timeout or a retriable error (librdkafka sends DescribeTopics
    to the node metadata names as controller, which may be the broker just killed)."""
    def ask() -> Any:
        futures = client.describe_topics(TopicCollection([name]), request_timeout=timeout)
        return futures[name].result(timeout=timeout + 5)

    desc = _asked_again(ask, lambda err: err.retriable() or err.code() in MOVING_LEADERSHIP, within_s, 1.0)
    return {p.id: PartitionView(p.leader.id if p.leader is not None else -1, tuple(r.id for r in p.replicas),
                                tuple(r.id for r in p.isr)) for p in desc.partitions}


def topic_exists(client: AdminClient, name: str, timeout: float = 10.0) -> bool:
    """Whether the cluster lists the topic (raises when no broker answers)."""
    return name in client.list_topics(timeout=timeout).topics


def _list_offsets(client: AdminClient, topic: str, partitions: int, spec: OffsetSpec,
                  timeout: float) -> dict[int, int]:
    """partition -> the offset ``spec`` names (raises when a partition does not answer)."""
    futures = client.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)}, request_timeout=timeout)
    return {tp.partition: f.result(timeout=timeout).offset for tp, f in futures.items()}


def log_starts(client: AdminClient, info: TopicInfo, timeout: float = 10.0) -> tuple[int, ...]:
    """Every partition's log start offset; empty when any partition did not answer."""
    try:
        found = _list_offsets(client, info.name, info.partitions, OffsetSpec.earliest(), timeout)
    except Exception:  # noqa: BLE001 - a leader away: not known now
        return ()
    if any(found.get(p, -1) < 0 for p in range(info.partitions)):
        return ()
    return tuple(found[p] for p in range(info.partitions))


def log_ends(client: AdminClient, topic: str, partitions: int, timeout: float = 10.0) -> dict[int, int]:
    """Every partition's high watermark (raises when a partition does not answer)."""
    return _list_offsets(client, topic, partitions, OffsetSpec.latest(), timeout)


def topic_settings(client: AdminClient, info: TopicInfo, timeout: float = 10.0) -> TopicSettings | None:
    """The topic's durability settings as they are in force (DescribeConfigs gives the effective
    values, broker defaults included); None when they cannot be read."""
    resource = ConfigResource(ResourceType.TOPIC, info.name)
    try:
        entries = client.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout)
        min_isr = int(entries["min.insync.replicas"].value)
        unclean = str(entries["unclean.leader.election.enable"].value).lower() == "true"
    except (KafkaException, KeyError, ValueError, TypeError, TimeoutError):
        return None
    return TopicSettings(info.replication_factor, min_isr, unclean)


def alter_topic_config(client: AdminClient, name: str, key: str, value: str, timeout: float = 10.0) -> bool:
    """Set one config of a topic when it differs (incremental); False when it could not be set."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = ConfigResource(ResourceType.TOPIC, name)
    try:
        entries = client.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout)
        if key in entries and str(entries[key].value) == value:
            return True
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        client.incremental_alter_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout)
        return True
    except (KafkaException, KeyError, TypeError, TimeoutError, ValueError):
        return False


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
    deadline = time.monotonic() + timeout
    while True:
        info = describe_topic(client, name, timeout)
        if info is not None and info.partitions == partitions and all(l >= 0 for l in info.leaders.values()):
            return info
        if time.monotonic() > deadline:
            raise ClientError(f"topic {name!r} was created but has no leaders after {timeout:.0f} s")
        time.sleep(0.2)
