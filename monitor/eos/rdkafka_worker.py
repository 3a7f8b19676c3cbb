"""The exactly-once pipeline canary on librdkafka (``python -m monitor.eos.rdkafka_worker``): the
twin of ``EosWorker.java``, with the same arguments' meaning, the same output records
(:mod:`monitor.eos.output_format`) and the same JSON events on stdout, so that
:mod:`monitor.eos.worker` runs either and the verdicts and counters (labelled by client) compare.

It reads the input topic in a consumer group (``read_committed``, no auto commit, static member
``group.instance.id`` = its transactional id) and writes, per record consumed, one output record
naming the record's source position, in a transaction that also carries the group's offsets
(``send_offsets_to_transaction``). Every ``abort_every``-th transaction is aborted on purpose.
Where the consumer stands right after ``abort_transaction`` and where its next poll resumes are
measured *before* the worker moves it (KAFKA-17582: that is the client's behaviour, not Vigil's);
only then does it seek back to the group's committed offsets, as an exactly-once application on
this client must. A transaction that fails (a fenced generation, a send error) is aborted and
resumed the same way; a fatal error (the transactional id fenced by a newer instance) ends the
worker with status 3, anything else unexpected with 4.

Events: ``started``, ``assigned`` / ``revoked`` (partitions), ``abort`` (partition, before, end,
after, resumed, resumed_record, committed, first, last, records: as ``EosWorker.java`` says), ``drill`` (eos_duplicate: partition, offset; eos_loss:
partition, from, to, records), ``progress`` every 5 s, ``closing`` (the loop ended), ``closed_call``
(call: producer, then consumer; ms: how long that client's close took — KAFKA-17734 is timed per
call) and ``closed`` (ms: both). Drills are files
next to ``--control`` (``.eos_loss``: the aborted records are skipped and the position committed
past them; ``.eos_duplicate``: the next transaction writes its first record twice). It stops on
SIGTERM or when its stdin ends.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from monitor.eos.output_format import FLAG_DRILL_COPY, encode
from monitor.signals import install_stop_handlers, stop_when_stdin_ends

EXIT_FENCED, EXIT_FAILED = 3, 4
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
MAX_POLL_RECORDS = 200
TXN_TIMEOUT_S = 30.0


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    sys.stderr.write(f"rdkafka_worker: {text}\n")
    sys.stderr.flush()


def take_drill(control: str, kind: str) -> bool:
    try:
        os.unlink(f"{control}.{kind}")
        return True
    except OSError:
        return False


def records_by_partition(batch: list[Message]) -> dict[int, list[Message]]:
    out: dict[int, list[Message]] = {}
    for m in batch:
        out.setdefault(m.partition(), []).append(m)
    return out


class Worker:
    def __init__(self, base: dict[str, Any], args: argparse.Namespace) -> None:
        self.args = args
        self.stop = threading.Event()
        self.consumer = Consumer({
            **base, "group.id": args.group, "group.instance.id": args.transactional_id,
            "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 2000, "client.id": "vigil-eos-rdkafka",
        })
        # An open transaction of a killed worker holds the output's LSO until the coordinator aborts it.
        self.producer = Producer({
            **base, "transactional.id": args.transactional_id, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "transaction.timeout.ms": 10000, "client.id": "vigil-eos-rdkafka",
        })
        self.committed_txns = self.aborted_txns = self.failed_txns = self.records = self.txns = 0

    def _assigned(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        emit("assigned", partitions=sorted(tp.partition for tp in parts))

    def _revoked(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        emit("revoked", partitions=sorted(tp.partition for tp in parts))

    def positions(self, parts: list[int]) -> dict[int, int]:
        """Where the consumer stands on each of ``parts`` (those it has a valid position for)."""
        if not parts:
            return {}
        got = self.consumer.position([TopicPartition(self.args.input, p) for p in parts])
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        """commit_transaction, again while its error is retriable (its outcome is then unknown and
        an abort not allowed: retrying completes the commit it started)."""
        while True:
            try:
                self.producer.commit_transaction(TXN_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or self.stop.is_set():
                    raise
                say(f"commit did not complete, retrying it: {err.str()}")

    def poll(self) -> list[Message]:
        batch = []
        for m in self.consumer.consume(MAX_POLL_RECORDS, 0.2):
            err = m.error()
            if err is None:
                batch.append(m)
            elif err.code() == KafkaError._FATAL:
                raise KafkaException(err)
            elif err.code() != KafkaError._PARTITION_EOF:
                say(f"consumer: {err.str()}")
        return batch

    def run(self) -> int:
        try:
            self.producer.init_transactions(60.0)
            self.consumer.subscribe([self.args.input], on_assign=self._assigned, on_revoke=self._revoked)
            emit("started", transactional_id=self.args.transactional_id, group=self.args.group, client="librdkafka")
            self.loop()
            return 0
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in FENCED:  # as the Java worker: only its producer fenced is status 3
                say(f"fenced (a newer instance of {self.args.transactional_id}, or the coordinator aborted a "
                    f"transaction past its timeout): {err.str()}")
                return EXIT_FENCED
            say(f"giving up{' (fatal)' if err.fatal() else ''}: {err.str()}")
            return EXIT_FAILED
        except Exception as exc:  # noqa: BLE001 (its runner starts it again; never a hang)
            say(f"giving up: {exc!r}")
            return EXIT_FAILED
        finally:
            emit("closing")
            t0 = time.monotonic()
            try:  # what is queued, for as long as the runner allows a close; then the producer itself
                self.producer.flush(self.args.close_timeout_ms / 1000)
                self.producer.close()
            except Exception as exc:  # noqa: BLE001
                say(f"producer close: {exc!r}")
            emit("closed_call", call="producer", ms=int((time.monotonic() - t0) * 1000))
            t1 = time.monotonic()
            try:
                self.consumer.close()
            except Exception as exc:  # noqa: BLE001
                say(f"consumer close: {exc!r}")
            emit("closed_call", call="consumer", ms=int((time.monotonic() - t1) * 1000))
            emit("closed", ms=int((time.monotonic() - t0) * 1000))

    def loop(self) -> None:
        last_progress = time.monotonic()
        control = self.args.control
        while not self.stop.is_set():
            before = self.positions(sorted(self.owned()))
            batch = self.poll()
            if time.monotonic() - last_progress > 5.0:
                last_progress = time.monotonic()
                emit("progress", committed_txns=self.committed_txns, aborted_txns=self.aborted_txns,
                     failed_txns=self.failed_txns, records=self.records)
            if not batch:
                continue
            self.txns += 1
            by_part = records_by_partition(batch)
            polled_to = self.positions(sorted(by_part))
            loss_drill = take_drill(control, "eos_loss")
            abort = loss_drill or (self.args.abort_every > 0 and self.txns % self.args.abort_every == 0)
            dup_drill = not abort and take_drill(control, "eos_duplicate")
            dup_at: Message | None = None
            try:
                self.producer.begin_transaction()
                for m in batch:
                    self.producer.produce(self.args.output, encode(m.partition(), m.offset(), m.value() or b""),
                                          partition=m.partition())
                    if dup_drill and dup_at is None:
                        self.producer.produce(self.args.output, encode(m.partition(), m.offset(), m.value() or b"",
                                                                       FLAG_DRILL_COPY), partition=m.partition())
                        dup_at = m
                    self.producer.poll(0)
                next_offsets = [TopicPartition(self.args.input, p, rs[-1].offset() + 1) for p, rs in by_part.items()]
                self.producer.send_offsets_to_transaction(next_offsets, self.consumer.consumer_group_metadata(),
                                                          TXN_TIMEOUT_S)
                if not abort:
                    self.commit()
                    if dup_at is not None:
                        emit("drill", kind="eos_duplicate", partition=dup_at.partition(), offset=dup_at.offset())
                    self.committed_txns += 1
                    self.records += len(batch)
                    continue
                self.producer.abort_transaction(TXN_TIMEOUT_S)
                self.aborted_txns += 1
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal() or self.stop.is_set():
                    raise  # fenced; or a commit given up on while stopping: its outcome unknown, no abort
                # a failed send, offset commit (a stale generation) or commit: abort, resume from the
                # group's committed offsets like an aborted transaction
                say(f"transaction failed, aborting: {err.str()}")
                self.failed_txns += 1
                self.producer.abort_transaction(TXN_TIMEOUT_S)
                abort = False
                for kind, asked in (("eos_loss", loss_drill), ("eos_duplicate", dup_drill)):
                    if asked:  # not applied: next time
                        Path(f"{control}.{kind}").write_bytes(b"")
            self._resume(by_part, before, polled_to, abort, abort and loss_drill)

    def _resume(self, by_part: dict[int, list[Message]], before: dict[int, int], polled_to: dict[int, int],
                abort: bool, skip: bool) -> None:
        """After an aborted or failed transaction: measure where the client stands and resumes (an
        abort only), then seek back to the group's committed offsets — or, for the loss drill, past
        the aborted records, committing that position at once."""
        parts = sorted(by_part)
        after: dict[int, int] = {}
        resumed: dict[int, int] = {}
        peek: dict[int, list[Message]] = {}  # the next poll's records: ``resumed`` is a record's offset there
        if abort:
            after = self.positions(parts)
            peek = records_by_partition(self.poll())  # where does it resume? put back whatever it returned
            owned = self.owned()
            for p, rs in peek.items():
                resumed[p] = rs[0].offset()
                if p in owned:
                    self._seek(p, rs[0].offset())
            for p, at in self.positions([p for p in parts if p not in resumed and p in owned]).items():
                resumed[p] = at
        # (a partition whose committed offset could not be fetched counts as none: resumed from
        # where its transaction began, which is below anything not written)
        committed = {tp.partition: (tp.offset if tp.error is None else -1) for tp in self.consumer.committed(
            [TopicPartition(self.args.input, p) for p in parts], TXN_TIMEOUT_S)}
        owned = self.owned()
        skipped: list[TopicPartition] = []
        skip_events: list[dict[str, Any]] = []
        for p in parts:
            if p not in owned:
                continue  # revoked meanwhile: its new owner resumes from the committed offset
            rs = by_part[p]
            end = rs[-1].offset() + 1
            c = committed.get(p, -1)
            c = c if c >= 0 else -1
            began = before.get(p, c if c >= 0 else rs[0].offset())
            if abort:
                emit("abort", partition=p, before=began, end=polled_to.get(p, end), after=after.get(p, -1),
                     resumed=resumed.get(p, -1), resumed_record=p in peek, committed=c, first=rs[0].offset(),
                     last=rs[-1].offset(), records=len(rs))
            if skip:
                skip_events.append({"kind": "eos_loss", "partition": p, "from": rs[0].offset(), "to": end,
                                    "records": len(rs)})
                skipped.append(TopicPartition(self.args.input, p, end))
                self._seek(p, end)
            else:
                self._seek(p, c if c >= 0 else began)
        if skipped:
            # the drill is the application that does not rewind: its position past the aborted
            # records is committed at once (so no later abort's rewind takes the loss back)
            self.producer.begin_transaction()
            self.producer.send_offsets_to_transaction(skipped, self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
            self.commit()
            for e in skip_events:
                emit("drill", **e)

    def _seek(self, partition: int, offset: int) -> None:
        try:
            self.consumer.seek(TopicPartition(self.args.input, partition, offset))
        except KafkaException as exc:  # not fetching yet: the position it is given at start
            say(f"seek {partition}@{offset}: {exc.args[0].str()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("conf", help="JSON file of the librdkafka base settings (bootstrap, security)")
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("group")
    ap.add_argument("transactional_id")
    ap.add_argument("abort_every", type=int)
    ap.add_argument("control")
    ap.add_argument("close_timeout_ms", type=int, help="how long the producer's queue may take to flush at close")
    args = ap.parse_args(argv)
    worker = Worker(json.loads(Path(args.conf).read_text()), args)
    install_stop_handlers(worker.stop)
    stop_when_stdin_ends(worker.stop)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
