"""Every Kafka client configuration Vigil uses, built from the one :class:`~monitor.config.Config`.

Nothing else in Vigil builds a client configuration: the librdkafka dictionaries of the canary
and ledger producers, the drill, bench and evidence producers, every consumer and admin
client, and the Spark Kafka source's Java-client options all come from here, so the security
settings (``kafka.security``, ``ledger.kafka.security``) reach every client the same way.
Pure: dictionaries in, dictionaries out, no client is opened here (:mod:`monitor.clients`
opens them).
"""

from __future__ import annotations

from typing import Any, Literal

from monitor.config import ClientValue, Config, KafkaConfig, WriterConfig

Conf = dict[str, Any]
Profile = Literal["default", "probe", "bulk"]

# Consumer tunings by use: the prober must never block long (a fetch to a paused broker would
# stall every partition's probe) and wants end-of-partition events; bulk readers (audit, bench)
# want large fetches.
_PROFILES: dict[str, Conf] = {
    "default": {},
    "probe": {"fetch.wait.max.ms": 100, "socket.timeout.ms": 10000},
    "bulk": {"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20},
}


def _base(config: Config, ledger: bool) -> Conf:
    kafka: KafkaConfig = config.ledger_kafka() if ledger else config.kafka
    bootstrap = config.ledger_bootstrap() if ledger else config.canary_bootstrap()
    return dict(kafka.librdkafka(bootstrap))


def canary_producer(config: Config, writer: WriterConfig, instance_id: str) -> Conf:
    conf = _base(config, ledger=False)
    conf.update({
        "client.id": f"vigil-{instance_id}",
        "acks": writer.acks,
        "enable.idempotence": writer.idempotence,
        "linger.ms": writer.linger_ms,
        "message.timeout.ms": writer.message_timeout_ms,
        "request.timeout.ms": writer.request_timeout_ms,
        # Never let the client pick partitions: the writer chooses each one.
        "partitioner": "consistent_random",
        # Notice a recreated topic or new partitions within seconds (librdkafka's default: 5 minutes).
        "topic.metadata.refresh.interval.ms": 10000,
    })
    if not writer.idempotence:
        # Chosen on purpose, as the Java client's defaults: retry until the message times out, five
        # requests in flight. The canary then measures what an ordinary acks=0/1 application lives
        # with: a retry after a lost response may duplicate, and a retry behind other requests may
        # reorder — both allowed by these settings (at_risk), none of them Kafka's fault.
        conf["retries"] = 2147483647
        conf["max.in.flight.requests.per.connection"] = 5
    if writer.transactional:
        conf["transactional.id"] = f"vigil-{instance_id}"
        conf["transaction.timeout.ms"] = writer.transaction.timeout_ms
    conf.update(writer.client_overrides)
    return conf


def ledger_producer(config: Config, instance_id: str) -> Conf:
    conf = _base(config, ledger=True)
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


def evidence_producer(config: Config) -> Conf:
    """For the optional evidence topic (on the canary cluster)."""
    conf = _base(config, ledger=False)
    conf.update({"acks": "all", "enable.idempotence": True, "linger.ms": 5, "client.id": "vigil-evidence"})
    return conf


def drill_producer(config: Config, instance_id: str, idempotent: bool = True, transactional_id: str | None = None,
                   txn_timeout_ms: int = 60000) -> Conf:
    """A drill writes one record at a time and waits for each (no batching)."""
    conf = _base(config, ledger=False)
    conf.update({"acks": "all", "enable.idempotence": idempotent, "linger.ms": 0, "client.id": f"vigil-{instance_id}"})
    if transactional_id:
        conf.update({"transactional.id": transactional_id, "transaction.timeout.ms": txn_timeout_ms})
    return conf


def bench_producer(config: Config) -> Conf:
    """The bench pre-fill: large compressed batches, a deep queue."""
    conf = _base(config, ledger=False)
    conf.update({"acks": "all", "enable.idempotence": True, "linger.ms": 20, "batch.size": 1 << 20,
                 "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20,
                 "compression.type": "lz4", "client.id": "vigil-bench"})
    return conf


def consumer(config: Config, isolation: str, group: str, ledger: bool = False, profile: Profile = "default") -> Conf:
    """An ``assign()`` reader (groups only name it; nothing is committed)."""
    conf = _base(config, ledger)
    conf.update({
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    conf.update(_PROFILES[profile])
    return conf


def admin(config: Config, ledger: bool = False) -> Conf:
    return _base(config, ledger)


def local_admin(bootstrap: str) -> Conf:
    """The embedded local cluster's own readiness checks (its client listener is plaintext)."""
    return {"bootstrap.servers": bootstrap}


# -- the Spark Kafka source (the Java client) --------------------------------------------------

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quoted(value: str) -> str:
    """A JAAS option value between double quotes (Kafka parses JAAS with a StreamTokenizer:
    backslash escapes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def java_security(conf: dict[str, ClientValue]) -> dict[str, str]:
    """librdkafka security settings translated to the Java client's (PEM trust store, JAAS)."""
    out: dict[str, str] = {}
    if "security.protocol" in conf:
        out["kafka.security.protocol"] = str(conf["security.protocol"])
    if "sasl.mechanism" in conf:
        mech = str(conf["sasl.mechanism"])
        out["kafka.sasl.mechanism"] = mech
        user = _jaas_quoted(str(conf.get("sasl.username", "")))
        password = _jaas_quoted(str(conf.get("sasl.password", "")))
        out["kafka.sasl.jaas.config"] = f'{_LOGIN_MODULES[mech]} required username="{user}" password="{password}";'
    if conf.get("ssl.ca.location"):
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = str(conf["ssl.ca.location"])
    if conf.get("ssl.certificate.location"):
        # The Java client wants one PEM file holding the key and the certificate chain.
        out["kafka.ssl.keystore.type"] = "PEM"
        out["kafka.ssl.keystore.location"] = str(conf["ssl.certificate.location"])
    return out


def spark_source(config: Config, ledger: bool) -> dict[str, str]:
    """Options of Spark's Kafka source, from the same security config the librdkafka clients use."""
    base = _base(config, ledger)
    return {"kafka.bootstrap.servers": str(base["bootstrap.servers"]), **java_security(base)}
