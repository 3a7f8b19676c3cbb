"""Vigil's configuration: one YAML file, validated by pydantic.

Every key has a default and a description; ``vigil config reference`` prints the table that
the README carries (a test keeps the two equal). Validation errors name the key path and the
reason. Secrets are ``SecretStr`` and never printed; ``librdkafka()`` is the one place that
turns them into client settings.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from invariants.errors import VigilError
from invariants.model import Settings
from monitor.model_input import format_errors, read_yaml, validated

ClientValue = Union[str, int, float, bool]


class ConfigError(VigilError):
    """A configuration problem, with the offending key path in the message."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class SecurityConfig(_Model):
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="security.protocol for every Kafka client")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="sasl.mechanism (SASL protocols only)")
    sasl_username: str | None = Field(None, description="SASL user name")
    sasl_password: SecretStr | None = Field(None, description="SASL password (never printed)")
    sasl_password_file: str | None = Field(
        None, description="file holding the SASL password, instead of sasl_password: read again every "
        "watch.credentials_check_interval_s, so a rotated password is picked up without a restart")
    ssl_ca_location: str | None = Field(None, description="CA bundle file (PEM)")
    ssl_certificate_location: str | None = Field(None, description="client certificate (PEM)")
    ssl_key_location: str | None = Field(None, description="client private key (PEM)")
    ssl_key_password: SecretStr | None = Field(None, description="private key password (never printed)")

    @model_validator(mode="after")
    def _sasl_complete(self) -> "SecurityConfig":
        if self.protocol.startswith("SASL"):
            if self.sasl_mechanism is None:
                raise ValueError("sasl_mechanism is required when protocol is " + self.protocol)
            if not self.sasl_username or (self.sasl_password is None) == (self.sasl_password_file is None):
                raise ValueError("sasl_username and one of sasl_password and sasl_password_file are required for SASL")
        return self

    def password(self) -> str | None:
        """The SASL password: ``sasl_password``, or the content of ``sasl_password_file`` now."""
        if self.sasl_password_file is None:
            return None if self.sasl_password is None else self.sasl_password.get_secret_value()
        try:
            return Path(self.sasl_password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"sasl_password_file {self.sasl_password_file}: {exc.strerror or exc}") from None

    def librdkafka(self) -> dict[str, ClientValue]:
        conf: dict[str, ClientValue] = {"security.protocol": self.protocol}
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        password = self.password()
        if password is not None:
            conf["sasl.password"] = password
        for key, value in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if value:
                conf[key] = value
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf


class KafkaConfig(_Model):
    bootstrap_servers: str = Field(
        "", description="bootstrap servers; empty means the embedded local cluster")
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    client_overrides: dict[str, ClientValue] = Field(
        default_factory=dict, description="extra librdkafka settings for every client")

    def librdkafka(self, bootstrap: str) -> dict[str, ClientValue]:
        conf: dict[str, ClientValue] = {"bootstrap.servers": bootstrap}
        conf.update(self.security.librdkafka())
        conf.update(self.client_overrides)
        return conf


class ClusterConfig(_Model):
    kafka_version: str = Field("4.1.1", description="Apache Kafka version (kafka_2.13 from Maven Central)")
    nodes: int = Field(3, ge=1, le=9, description="combined broker+controller nodes")
    host: str = Field("127.0.0.1", description="address the client listeners bind and advertise")
    client_port_base: int = Field(9092, ge=1024, le=65000, description="node i listens for clients on base+i-1")
    internal_port_base: int = Field(
        19092, ge=1024, le=65000,
        description="node i binds replication on base+i-1 and controller on base+100+i-1")
    proxy_control_port: int = Field(19090, ge=1024, le=65535, description="control port of the link proxy")
    state_dir: str = Field(".vigil/cluster", description="data, logs, pid files and jars of the local cluster")
    java_home: str = Field("", description="JDK to run brokers with (>= 18); empty = auto-detect")
    heap_mb: int = Field(512, ge=128, description="broker JVM heap")
    min_insync_replicas: int = Field(2, ge=1, description="broker default min.insync.replicas")
    unclean_leader_election: bool = Field(False, description="unclean.leader.election.enable")
    replica_lag_time_max_ms: int = Field(30000, ge=100, description="replica.lag.time.max.ms")
    eligible_leader_replicas: bool = Field(
        False, description="enable the Eligible Leader Replicas feature (KIP-966) when formatting")
    broker_overrides: dict[str, ClientValue] = Field(
        default_factory=dict, description="extra server.properties entries for every node")
    start_timeout_s: float = Field(60.0, gt=0, description="how long `cluster up` waits for readiness")
    security: Literal["plaintext", "sasl_ssl"] = Field(
        "plaintext", description="the client listener: plaintext, or sasl_ssl (SCRAM-SHA-512 over TLS with ACLs: "
        "a CA and broker certificate made under state_dir/tls, the kafka.security user created with the ACLs "
        "Vigil needs)")

    @property
    def bootstrap_servers(self) -> str:
        """Where clients reach the local cluster (each node's client listener, direct)."""
        return ",".join(f"{self.host}:{self.client_port_base + i}" for i in range(self.nodes))

    @model_validator(mode="after")
    def _ports_disjoint(self) -> "ClusterConfig":
        client = set(range(self.client_port_base, self.client_port_base + self.nodes))
        internal = set(range(self.internal_port_base, self.internal_port_base + self.nodes)) | set(
            range(self.internal_port_base + 100, self.internal_port_base + 100 + self.nodes))
        if client & internal or self.proxy_control_port in client | internal:
            raise ValueError("client, internal and proxy control ports overlap")
        # Linux hands out 32768-60999 as source ports of outgoing connections; a listener
        # there can find its port taken at a restart.
        ephemeral = [p for p in sorted(client | internal | {self.proxy_control_port}) if 32768 <= p <= 60999]
        if ephemeral:
            raise ValueError(f"ports {ephemeral[0]}..{ephemeral[-1]} fall in the ephemeral range 32768-60999")
        return self


class TopicConfig(_Model):
    name: str = Field("vigil-canary", min_length=1, description="canary topic")
    partitions: int = Field(3, ge=1, description="partitions when Vigil creates the topic")
    replication_factor: int = Field(3, ge=1, description="replication factor when Vigil creates it")
    min_insync_replicas: int = Field(2, ge=1, description="min.insync.replicas of the topic")
    unclean_leader_election: bool = Field(False, description="unclean.leader.election.enable of the topic")
    extra_config: dict[str, str] = Field(default_factory=dict, description="further topic configs")

    def topic_configs(self) -> dict[str, str]:
        conf = {
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election).lower(),
        }
        conf.update(self.extra_config)
        return conf


class LedgerConfig(_Model):
    topic: str = Field("vigil-ledger", min_length=1, description="outcome ledger topic")
    partitions: int = Field(3, ge=1, description="ledger partitions (entries keyed by instance id)")
    replication_factor: int = Field(3, ge=1, description="ledger replication factor")
    min_insync_replicas: int = Field(2, ge=1, description="ledger min.insync.replicas")
    retention_ms: int = Field(7 * 24 * 3600 * 1000, ge=60_000, description="retention.ms of the ledger topic when "
                              "Vigil creates it (a checker must read entries within it; it reads a ledger whose head "
                              "was trimmed from its first entry on)")
    checkpoint_interval_s: float = Field(10.0, gt=0, description="how often each writer appends a checkpoint "
                                         "entry (topic settings, writes in flight, the open transaction)")
    extra_config: dict[str, str] = Field(default_factory=dict, description="further ledger topic configs (e.g. "
                                         "segment.ms); the durability settings above always win")
    kafka: KafkaConfig | None = Field(
        None, description="a separate cluster for the ledger; empty = the canary cluster")

    def topic_configs(self) -> dict[str, str]:
        # The strongest durability whatever the canary topic's settings; the brokers' clock on
        # every entry (durations are measured on it, not on a writer's or the monitor's clock).
        return {
            **self.extra_config,
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": "false",
            "retention.ms": str(self.retention_ms),
            "message.timestamp.type": "LogAppendTime",
        }


class TransactionConfig(_Model):
    size: int = Field(4, ge=1, le=1000, description="records per transaction, spread over partitions")
    abort_ratio: float = Field(0.3, ge=0.0, le=1.0, description="share of transactions aborted on purpose")
    timeout_ms: int = Field(60000, ge=1000, description="transaction.timeout.ms")


class WriterConfig(_Model):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="writer name, part of its instance id")
    acks: Literal["0", "1", "all"] = Field("all", description="producer acks")
    idempotence: bool = Field(True, description="enable.idempotence")
    transactional: bool = Field(False, description="write in transactions")
    transaction: TransactionConfig = Field(default_factory=TransactionConfig)
    rate: float = Field(100.0, ge=0.0, description="records per second; 0 = as fast as possible")
    record_size: int = Field(100, ge=48, le=1 << 20, description="bytes per record value (>= 48)")
    message_timeout_ms: int = Field(30000, ge=1, description="message.timeout.ms")
    request_timeout_ms: int = Field(10000, ge=1, description="request.timeout.ms")
    linger_ms: int = Field(5, ge=0, description="linger.ms")
    client_overrides: dict[str, ClientValue] = Field(default_factory=dict, description="extra producer settings")

    @model_validator(mode="before")
    @classmethod
    def _acks_as_text(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("acks"), int):
            data = {**data, "acks": str(data["acks"])}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "WriterConfig":
        if self.idempotence and self.acks != "all":
            raise ValueError("idempotence requires acks=all")
        if self.transactional and not self.idempotence:
            raise ValueError("transactional requires idempotence")
        return self

    @property
    def effective_message_timeout_ms(self) -> int:
        """``message.timeout.ms`` as the producer runs with it: ``client_overrides`` are applied
        last, so one there (or its alias ``delivery.timeout.ms``, the later of the two) wins. The
        writer's ``start`` records this one: the checker waits that long for an outcome."""
        value = self.message_timeout_ms
        for key, v in self.client_overrides.items():
            if key in ("message.timeout.ms", "delivery.timeout.ms"):
                try:
                    value = int(v)
                except (TypeError, ValueError):
                    pass  # (the client refuses it, naming the key)
        return value

    def with_overrides(self, **overrides: Any) -> "WriterConfig":
        """This writer with some settings replaced (``None`` = keep). ``abort_ratio`` and
        ``txn_size`` set the transaction's; asking for acks other than ``all`` without saying
        anything about idempotence turns idempotence (and transactions) off, since Kafka allows
        idempotence only with acks=all. Errors name the setting, as for a config file."""
        data = self.model_dump()
        txn = dict(data["transaction"])
        for key, value in overrides.items():
            if value is None:
                continue
            if key in ("abort_ratio", "txn_size"):
                txn["abort_ratio" if key == "abort_ratio" else "size"] = value
            else:
                data[key] = value
        data["transaction"] = txn
        if overrides.get("acks") not in (None, "all") and overrides.get("idempotence") is None:
            data["idempotence"] = False
            data["transactional"] = False
        try:
            return WriterConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_errors(
                exc, f"invalid configuration in writer {self.name!r} with the command line options:")) from None


class MetricsConfig(_Model):
    bind: str = Field("127.0.0.1", description="address of the /metrics endpoint (0.0.0.0 in a pod; "
                      "an IPv6 address such as :: or ::1 binds IPv6, :: dual-stack)")
    port: int = Field(9464, ge=0, le=65535, description="port of the /metrics endpoint; 0 = off")


class EvidenceConfig(_Model):
    path: str = Field("", description="JSON-lines file of every violation; empty = <state_dir>/evidence.jsonl")
    topic: str = Field("", description="also produce every violation to this Kafka topic (keyed by batch id "
                       "and index, so a replayed batch overwrites itself in a compacted topic); empty = off")


class EosConfig(_Model):
    enabled: bool = Field(False, description="run the exactly-once pipeline canary inside `vigil run` and judge "
                          "it live in the watch (eos_loss, eos_duplicate); `vigil eos` works either way")
    output_topic: str = Field("", description="output topic of the exactly-once pipeline canary (`vigil eos "
                              "run`), created with the canary topic's partitions and replication; empty = "
                              "<canary.name>-eos-out")
    group: str = Field("", description="its consumer group; `<group>-<instance id>` is its transactional id and "
                       "static member id (the secured local cluster's ACLs grant both); empty = <canary.name>-eos")
    abort_every: int = Field(5, ge=0, description="abort every Nth transaction on purpose (0 = never); where "
                             "the consumer stands after each abort is reported (KAFKA-17582)")
    close_bound_s: float = Field(30.0, gt=0, description="a close() call (the producer's, then the consumer's, each "
                                 "given three quarters of this as its own timeout) that has not returned after this "
                                 "long is reported hung (KAFKA-17734) and the worker killed")
    client: Literal["java", "librdkafka"] = Field(
        "java", description="the worker's Kafka client: java (a small program compiled at setup against the "
        "kafka-clients jar; most applications run this client) or librdkafka (its twin in Python on "
        "confluent-kafka); the eos metrics are labelled by it")


class GroupsConfig(_Model):
    enabled: bool = Field(True, description="run the consumer-group canary inside `vigil run` and judge it live "
                          "in the watch (group_skip, group_rewind, rebalance_stall); `vigil group` works either way. "
                          "Turning it on or off under an existing checkpoint needs `vigil state rebuild`")
    members: int = Field(3, ge=1, le=32, description="members of the consumer-group canary (`vigil group run`), "
                         "each its own process")
    group: str = Field("", description="its consumer group (the secured local cluster's ACLs grant it); "
                       "members are static as <group>-m<N>, so two Vigil instances on one cluster need a group "
                       "and an observation_topic each, as they need a canary topic each; empty = "
                       "<canary.name>-group")
    protocol: Literal["classic", "consumer"] = Field(
        "classic", description="group protocol: classic (session.timeout_ms and cooperative-sticky assignment "
        "are the members') or consumer (KIP-848: session, heartbeat and assignment are the broker's)")
    static: bool = Field(True, description="static membership (group.instance.id = <group>-<member>, KIP-345): "
                         "a member restarted within its session timeout causes no rebalance (classic)")
    session_timeout_ms: int = Field(10000, ge=1000, description="session.timeout.ms of the classic protocol "
                                    "(the brokers bound it by group.min/max.session.timeout.ms)")
    observation_topic: str = Field("", description="the topic (one partition) the members append their "
                                   "observations to: assignments, records consumed, commits and their results, "
                                   "progress; empty = <canary.name>-group-obs")
    commit_interval_ms: int = Field(500, ge=10, description="how often a member commits what it consumed")
    rack: str = Field("rack-1", description="client.rack of the last member: where the brokers have broker.rack "
                      "and a rack-aware replica.selector.class (the local cluster: rack-<node id>), it fetches from "
                      "a follower in that rack (KIP-392); empty = no rack-aware member")
    stall_ms: int = Field(60000, ge=100, description="rebalance_stall: a partition with no owner alive on it "
                          "for longer than this")


class WatchConfig(_Model):
    checkpoint_dir: str = Field("", description="Spark checkpoint and checker state; empty = <state_dir>/checkpoint")
    spark_master: str = Field("local[2]", description="Spark master of the watch job; empty = the one "
                              "spark-submit sets (Spark on Kubernetes)")
    driver_memory: str = Field("2g", description="spark.driver.memory")
    driver_gc_time_ratio: int = Field(
        4, ge=0, le=1000, description="-XX:GCTimeRatio of Spark's driver JVM with G1 (in local mode the executors run "
        "there too): the share of time G1 may spend collecting, 1/(1+n), before it grows the heap instead. The JVM's "
        "own 12 grew the heap towards driver_memory as soon as a batch's rows were handed to Python: 4 kept the driver "
        "about 600 MB smaller over a 50M-read catch-up at the same rate (README, Benchmark); 0 = the JVM's default. "
        "Not added when driver_java_options choose another collector; with an empty spark_master (spark-submit "
        "started the driver) set it in spark-submit's driver options instead")
    driver_java_options: str = Field(
        "", description="more JVM options of Spark's driver (spark.driver.extraJavaOptions, after Vigil's log "
        "configuration; in local mode the executors run in that JVM too), e.g. -XX:TieredStopAtLevel=1 for "
        "short runs on few cores: the JIT's optimising compiler then costs more CPU than it gives back")
    class_data_sharing: bool = Field(
        True, description="start Spark's driver JVM with the class-data archive `scripts/bootstrap.sh` makes once "
        "per virtualenv, Java and Spark (monitor/watch/cds.py: classes mapped, not parsed again; a watch started "
        "in about 40 % less time); without one it starts as before. Not with an empty spark_master (spark-submit "
        "starts the driver)")
    decode_on: Literal["auto", "jvm", "driver", "executors"] = Field(
        "auto", description="where the canary records' headers are decoded and cut into runs: in Spark's JVM "
        "where each partition is read (monitor/watch/JvmDecode.java, compiled once with javac; a row per run "
        "reaches the driver), on the executors' Python (a row per run reaches the driver; Vigil's code is "
        "shipped to them) or in the driver (each record's header, length and CRC-32 reach it); auto = the JVM "
        "in local mode (measured fastest on one machine; the driver where Spark's Java has no javac beside it), the "
        "executors' Python on a cluster")
    executor_python: str = Field("", description="the Python Spark's executors run (spark.pyspark.python; it "
                                 "needs numpy and pyarrow, Vigil's own code is shipped to it); empty = the driver's")
    java_home: str = Field("", description="JDK for Spark (17 or 21); empty = found automatically")
    overlap_check: bool = Field(
        True, description="apply a micro-batch in a thread of its own once it is fetched and written ahead "
        "(<state>/pending-batches), so that Spark fetches the next meanwhile; false = apply it inside Spark's "
        "batch handler, Spark waiting (monitor/watch/write_ahead.py: either way each batch is applied once)")
    trigger_ms: int = Field(500, ge=50, description="processing-time trigger interval of the query")
    max_offsets_per_trigger: int = Field(200000, ge=1, description="maxOffsetsPerTrigger of each source, "
                                         "so a catch-up batch stays short")
    ledger_lead_s: float = Field(
        30.0, ge=5, description="in a catch-up (a batch cut short by max_offsets_per_trigger), how far ahead of "
        "the newest canary record read (by the writers' clocks) the ledger's entries are applied; the rest of what "
        "Spark fetched of the ledger is held beside the state (<state>/ledger-held) and applied as the readers come "
        "near — an acknowledgement at the latest before the first read at its offset, whatever the clocks say — so "
        "the checker's state stays about as large as it is live. Larger holds less, smaller holds more in memory "
        "(invariants/ledger_hold.py)")
    ledger_records_per_task: Optional[int] = Field(
        None, ge=0, description="maxRecordsPerPartition of the ledger's source: a batch's ledger offsets are read "
        "in tasks of at most this many records (a catch-up's first batch may fetch most of its backlog's ledger at "
        "once: one task's result of 100,000 ledger rows held at once made Spark's driver JVM about 300 MB larger "
        "over a 50M-read catch-up, README, Benchmark); 0 = one task per ledger partition, as Spark plans it; empty = "
        "40000 in local mode and 0 on a cluster (with the option set, Spark gives the ledger's tasks no preferred "
        "executor, so its Kafka consumers are not reused from batch to batch)")
    poll_timeout_ms: int = Field(30000, ge=1000, description="kafkaConsumer.pollTimeoutMs: how long a hung "
                                 "fetch blocks a batch before the query fails and is restarted")
    fetch_max_wait_ms: int = Field(50, ge=10, le=500, description="kafka.fetch.max.wait.ms of Spark's Kafka "
                                   "consumers: how long a fetch that finds nothing new waits at the broker. A "
                                   "consumer's fetch sent ahead at the end of a batch holds the next batch's fetch "
                                   "from that broker until it returns, and read_committed finds nothing new while a "
                                   "transaction is open: Kafka's 500 ms held a batch's task that long (10 at least: a "
                                   "consumer waiting for data fetches again as soon as one comes back empty)")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest", description="where a new checkpoint starts reading the canary and ledger topics")
    settle_offsets: int = Field(Settings.settle_offsets, ge=1, description="H: a write missing at its acked offset o is lost once "
                                "the reader reached o+H without finding it (found before: offset_mismatch)")
    horizon_offsets: int = Field(Settings.horizon_offsets, ge=100, description="per reader and partition, how far behind the "
                                 "frontier the checker remembers offsets (older anomalies: the audit's)")
    credentials_check_interval_s: float = Field(
        10.0, gt=0, description="how often kafka.security.sasl_password_file (and the ledger's) is read again; "
        "a changed password is given to every open client")
    unseen_after_s: float = Field(10.0, gt=0, description="an acked write not yet read after this is `unseen`")
    certificate_check_interval_s: float = Field(
        300.0, gt=0, description="how often the TLS certificates of the brokers, CA bundle and client are looked "
        "at for vigil_tls_certificate_expiry_timestamp_seconds (SSL and SASL_SSL only)")
    stall_threshold_s: float = Field(15.0, gt=0, description="stalled_poll: no progress with records available")
    lso_stuck_threshold_s: float = Field(30.0, gt=0, description="lso_stuck: LSO frozen below a moving high "
                                         "watermark (longest canary transaction plus a margin)")
    producer_stall_s: float = Field(30.0, gt=0, description="producer_stalled: a write waiting this long "
                                    "for its outcome")
    topic_gone_after_s: float = Field(60.0, gt=0, description="a canary topic missing this long (and not "
                                      "created again) is gone: its acked writes are judged (lost, "
                                      "cause topic_vanished)")
    probe_interval_s: float = Field(1.0, gt=0, description="how often the poll prober checks each partition")
    restart_backoff_max_s: float = Field(30.0, gt=0, description="longest wait before restarting a failed query")
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)


def _default_writers() -> list[WriterConfig]:
    return [
        WriterConfig(name="idempotent", acks="all", idempotence=True, rate=200.0),
        WriterConfig(name="txn", acks="all", idempotence=True, transactional=True, rate=40.0),
    ]


class Config(_Model):
    instance_id: str = Field(
        "", description="Vigil instance id, unique per pod or process; empty = host name")
    state_dir: str = Field(".vigil", description="where incarnation numbers and local state persist")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    canary: TopicConfig = Field(default_factory=TopicConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    writers: list[WriterConfig] = Field(default_factory=_default_writers, description="canary writers of `vigil run`")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    eos: EosConfig = Field(default_factory=EosConfig)
    groups: GroupsConfig = Field(default_factory=GroupsConfig)

    @model_validator(mode="after")
    def _application_canary_names(self) -> "Config":
        """The application canaries' groups and topics, where not given, are the canary topic's:
        two instances on one cluster, which need a canary topic each, never share them by default
        (a shared observation log would judge one's group by the other's canary)."""
        c = self.canary.name
        self.groups.group = self.groups.group or f"{c}-group"
        self.groups.observation_topic = self.groups.observation_topic or f"{c}-group-obs"
        self.eos.group = self.eos.group or f"{c}-eos"
        self.eos.output_topic = self.eos.output_topic or f"{c}-eos-out"
        for key, topic in (("groups.observation_topic", self.groups.observation_topic),
                           ("eos.output_topic", self.eos.output_topic)):
            if len(topic) > 249:
                raise ValueError(f"{key} is {len(topic)} characters long, Kafka allows 249 (by default it is "
                                 "canary.name with a suffix): set it, or shorten canary.name")
        return self

    @model_validator(mode="after")
    def _unique_writer_names(self) -> "Config":
        names = [w.name for w in self.writers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"writer names must be unique, repeated: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _secured_cluster_has_a_canary_principal(self) -> "Config":
        sec = self.kafka.security
        if self.cluster.security == "sasl_ssl" and (sec.protocol != "SASL_SSL" or sec.sasl_mechanism != "SCRAM-SHA-512"):
            raise ValueError("cluster.security sasl_ssl needs kafka.security.protocol SASL_SSL and sasl_mechanism "
                             "SCRAM-SHA-512 (with sasl_username and sasl_password): the canary principal the "
                             "cluster creates")
        return self

    @property
    def embedded(self) -> bool:
        return not self.kafka.bootstrap_servers

    def resolved_instance_id(self) -> str:
        return self.instance_id or socket.gethostname()

    def writer(self, name: str) -> WriterConfig:
        for w in self.writers:
            if w.name == name:
                return w
        raise ConfigError(f"writers: no writer named {name!r} (have: {', '.join(w.name for w in self.writers)})")

    def ledger_kafka(self) -> KafkaConfig:
        return self.ledger.kafka or self.kafka

    def canary_bootstrap(self) -> str:
        """The canary cluster's bootstrap servers (the embedded local cluster when none is set)."""
        return self.kafka.bootstrap_servers or self.cluster.bootstrap_servers

    def ledger_bootstrap(self) -> str:
        if self.ledger.kafka is not None and self.ledger.kafka.bootstrap_servers:
            return self.ledger.kafka.bootstrap_servers
        return self.canary_bootstrap()

    def ledger_placement(self) -> str:
        """``separate`` when the ledger is on a cluster of its own, else ``shared`` (with the canary:
        then a ledger that is away is the canary's cluster away, and says nothing of its own)."""
        return "separate" if self.ledger_bootstrap() != self.canary_bootstrap() else "shared"

    def checkpoint_dir(self) -> Path:
        return Path(self.watch.checkpoint_dir or Path(self.state_dir) / "checkpoint")

    def spark_checkpoint_dir(self) -> Path:
        """Spark's own checkpoint, next to the checker state it must stay paired with."""
        return self.checkpoint_dir() / "spark"

    def evidence_path(self) -> Path:
        return Path(self.watch.evidence.path or Path(self.state_dir) / "evidence.jsonl")


def parse(data: Any, source: str = "<config>") -> Config:
    return validated(Config, {} if data is None else data, "configuration", source, ConfigError)


def load(path: str | os.PathLike[str] | None) -> Config:
    """Load a config file; ``None`` gives the defaults (or ``$VIGIL_CONFIG`` if set)."""
    if path is None:
        path = os.environ.get("VIGIL_CONFIG") or None
    if path is None:
        return Config()
    p = Path(path)
    data = read_yaml(p, "config file", ConfigError)
    return parse(expand_env(data), str(p))


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(data: Any, where: str = "") -> Any:
    """Replace ``${NAME}`` in string values by the environment variable (secrets from a pod's env)."""
    if isinstance(data, dict):
        return {k: expand_env(v, f"{where}.{k}" if where else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [expand_env(v, f"{where}.{i}") for i, v in enumerate(data)]
    if isinstance(data, str) and "${" in data:
        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in os.environ:
                raise ConfigError(f"{where}: environment variable {m.group(1)} is not set")
            return os.environ[m.group(1)]
        return _ENV_REF.sub(sub, data)
    return data


def own_application_canaries(prefix: str) -> dict[str, dict[str, str]]:
    """Group and topic names of the application canaries for a run of its own (chaos, soak, bench
    --live): their topics are read from the start and their group ids are static member and
    transactional ids, so a run sharing them would judge an earlier run's observations and fence
    its members."""
    return {"groups": {"group": f"{prefix}-group", "observation_topic": f"{prefix}-group-obs"},
            "eos": {"group": f"{prefix}-eos", "output_topic": f"{prefix}-eos-out"}}


def to_document(cfg: Config) -> dict[str, Any]:
    """``cfg`` as a config document that :func:`parse` reads back the same — secrets included
    (``model_dump`` masks them), for the configs Vigil writes for its own child runs (bench
    --live, soak, chaos), which are written owner-only. Never print it."""
    shown = cfg.model_dump(mode="json", exclude_none=True)
    held = cfg.model_dump(mode="python", exclude_none=True)

    def reveal(doc: Any, raw: Any) -> Any:
        if isinstance(raw, SecretStr):
            return raw.get_secret_value()
        if isinstance(doc, dict):
            return {k: reveal(v, raw[k]) for k, v in doc.items()}
        if isinstance(doc, list):
            return [reveal(d, r) for d, r in zip(doc, raw)]
        return doc

    return reveal(shown, held)


def write_document(cfg_or_doc: Config | dict[str, Any], path: Path) -> None:
    """Writes a config document (see :func:`to_document`) owner-only: it may hold secrets."""
    import yaml

    doc = to_document(cfg_or_doc) if isinstance(cfg_or_doc, Config) else cfg_or_doc
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also a file that existed before
    with os.fdopen(fd, "w") as f:
        f.write(yaml.safe_dump(doc, sort_keys=False))
