"""Helpers for integration tests: test configs, reading topics back, running the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from monitor.audit.book import LedgerBook
from monitor.audit.reader import CONSUME_WAIT_S
from monitor.clients import watermarks
from monitor.config import Config, parse

VIGIL = [sys.executable, "-m", "monitor"]
# Spark's driver JVM in the tests' watches compiles with C1 only: a run of a minute or two on 2
# cores spends more CPU in C2's compilation than C2's code gives back (measured side by side on the
# local cluster, `vigil run` with the default writers for 90 s: 40 micro-batches instead of 24, the
# first batch with data fetched in 4.2 s instead of 8.5 s, the Spark JVM at 44 % of a core instead of
# 53 %). The soak keeps the JVM's default (it stands for the long-running monitor).
SHORT_RUN_JVM = "-XX:TieredStopAtLevel=1"


def make_config(tmp: Path, client_base: int, internal_base: int, control_port: int, **extra: Any) -> tuple[Config, Path]:
    """A config on its own ports. A cluster uses internal_base..+2 and internal_base+100..+102,
    so clusters that may run at the same time need internal bases at least 200 apart. Keep every
    port below 32768, out of Linux's ephemeral range, or an outgoing connection can hold it."""
    data: dict[str, Any] = {
        "instance_id": "it",
        "state_dir": str(tmp / "state"),
        "cluster": {
            "state_dir": str(tmp / "cluster"),
            "client_port_base": client_base,
            "internal_port_base": internal_base,
            "proxy_control_port": control_port,
        },
        "metrics": {"port": 0},
        # the group canary (on in `vigil run` by default) where a test asks for it: three more
        # processes and a Spark source cost every run's time on 2 cores
        "groups": {"enabled": False},
        "watch": {"driver_java_options": SHORT_RUN_JVM},
    }
    for key, value in extra.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    path = tmp / "vigil.yaml"
    path.write_text(yaml.safe_dump(data))
    return parse(data, str(path)), path


def vigil(config_path: Path, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(VIGIL + list(args) + ["--config", str(config_path)], capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"vigil {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def vigil_json(config_path: Path, *args: str, timeout: float = 300) -> Any:
    out = vigil(config_path, *args, "--json", timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


@dataclass(frozen=True)
class ReadRecord:
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None


def read_all(bootstrap: str, topic: str, isolation: str, timeout: float = 60.0) -> list[ReadRecord]:
    """Every record of every partition from the beginning up to the current end."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"it-read-{os.getpid()}", "enable.auto.commit": False,
        "isolation.level": isolation, "enable.partition.eof": True, "auto.offset.reset": "earliest",
    })
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        ends = {}
        for p in parts:
            ends[p] = watermarks(consumer, topic, p)[1]
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done = {p for p in parts if ends[p] == 0}
        out: list[ReadRecord] = []
        import time

        deadline = time.monotonic() + timeout
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} ({isolation}) did not reach the end: {done} of {parts}")
            for msg in consumer.consume(1000, CONSUME_WAIT_S):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        if consumer.position([TopicPartition(topic, msg.partition())])[0].offset >= ends[msg.partition()]:
                            done.add(msg.partition())
                        continue
                    raise AssertionError(f"consume error: {msg.error()}")
                out.append(ReadRecord(msg.partition(), msg.offset(), msg.value(), msg.key()))
        return out
    finally:
        consumer.close()


def read_ledger(bootstrap: str, topic: str) -> LedgerBook:
    book = LedgerBook()
    records = read_all(bootstrap, topic, "read_committed")
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        book.apply_raw(rec.value)
    return book


def write_source_with_aborts(bootstrap: str, topic: str, stop: threading.Event, written: Counter,
                             partitions: int = 3) -> None:
    """Transactions over every partition (one in four aborted, so the source has aborted records
    and control records for read_committed to skip) and plain idempotent records in between.
    A transactional producer that fails fatally (librdkafka#4849: an abort refused with
    INVALID_TXN_STATE now and then) is replaced under the same transactional id, as an application
    would (so its open transaction is aborted at once rather than holding back read_committed until
    it times out), and counted in ``written["replaced"]``: the source must keep flowing for the
    tests that read it."""
    transactional_id = f"eos-src-{uuid.uuid4().hex[:8]}"

    def transactional() -> Producer:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                             "linger.ms": 5})
        producer.init_transactions(30)
        return producer

    txn = transactional()
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    n = 0
    while not stop.is_set():
        n += 1
        abort = n % 4 == 0
        try:
            txn.begin_transaction()
            for i in range(6):
                txn.produce(topic, b"t%d-%d" % (n, i), partition=i % partitions)
            if abort:
                txn.abort_transaction(30)
            else:
                txn.commit_transaction(30)
            written["aborted" if abort else "committed"] += 6
        except KafkaException as exc:
            if not exc.args[0].fatal():
                raise
            written["replaced"] += 1  # (the transaction it was ending is aborted by the next init)
            txn = transactional()
        plain.produce(topic, b"p%d" % n, partition=n % partitions)
        written["plain"] += 1
        plain.poll(0)
        time.sleep(0.02)
    plain.flush(30)
