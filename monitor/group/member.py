"""One member of the consumer-group canary, run as its own process (``python -m monitor.group.member``).

It subscribes to the canary topic in its group with ``read_committed`` and explicit commits, and
appends what it does to the observation log (one partition; the format is
:mod:`monitor.group.observations`, the rules that read it :mod:`invariants.groups`):

- ``assigned`` is flushed inside the rebalance callback, so before the assignment takes effect
  and its committed offsets are fetched, with the committed offsets the member reads itself and
  the partitions whose committed offset is out of the log's range (it will be reset);
  ``revoked`` after the member committed what it consumed (classic protocol: inside the
  callback, while its generation is still valid); ``lost`` when the group took partitions away
  without asking (no commit);
- ``consumed`` per poll; before each commit the ``consumed`` observations are flushed, then the
  ``intent``, then the commit is sent (synchronously) and its ``ack`` appended;
- ``progress`` every second: owned partitions, librdkafka's rebalance count and last reason, and
  per owned partition the broker it is fetched from, its leader and the consumer lag (from the
  statistics: a follower serves a rack-aware member, ``--rack``, KIP-392);
- ``fatal`` when the consumer hit a fatal error (a static member started again while the group
  still holds its previous instance, under the consumer protocol: UNRELEASED_INSTANCE_ID); it
  then exits with status 3 for its runner to start it again.

It stops when its stdin ends (the runner gone, even by kill -9) or on SIGTERM, closing the
consumer (a static member then does not leave the group: its session times out unless it comes
back). Drills, asked through control files (``<control>.group_skip`` / ``.group_rewind``):
group_skip drops the last records of its next poll on one partition (not reported consumed; the
commit passes them); group_rewind seeks one partition three records below its last acknowledged
commit (noted first as a ``seek``: a backward jump the member made itself). Each applied drill
is reported as a ``drill`` observation naming the offsets involved.
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

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from invariants.doc_runs import offset_runs
from monitor.group import observations as obs_format
from monitor.signals import install_stop_handlers, stop_when_stdin_ends

# Errors with which the group refused a whole commit: nothing was committed. A per-partition error
# (librdkafka reports the last failing partition's even when others were committed) is "unknown".
REFUSED_COMMIT = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
                  KafkaError.FENCED_INSTANCE_ID, KafkaError.STALE_MEMBER_EPOCH, KafkaError.GROUP_AUTHORIZATION_FAILED,
                  KafkaError._NO_OFFSET}

EXIT_FATAL = 3  # the consumer hit a fatal error: start it again
SKIP_RECORDS = 3  # what a group_skip drill drops / a group_rewind drill goes back


def fetch_sources(stats: dict[str, Any], topic: str) -> dict[int, list[int]]:
    """Per partition of ``topic`` in librdkafka's statistics: [the broker it is fetched from, its
    leader, the consumer lag]. The broker fetching a partition is the one whose ``toppars`` hold
    it — a follower when the leader's replica selector chose one for this client's rack."""
    served = {int(tp["partition"]): int(b.get("nodeid", -1)) for b in (stats.get("brokers") or {}).values()
              for tp in (b.get("toppars") or {}).values() if tp.get("topic") == topic}
    parts = ((stats.get("topics") or {}).get(topic) or {}).get("partitions") or {}
    return {p: [broker, int(parts[str(p)].get("leader", -1)), int(parts[str(p)].get("consumer_lag", -1))]
            for p, broker in served.items() if str(p) in parts and p >= 0}


class Member:
    def __init__(self, base: dict[str, Any], args: argparse.Namespace) -> None:
        self.args = args
        self.name = args.member
        self.topic = args.topic
        self.obs_topic = args.obs_topic
        self.control = args.control
        self.stop = threading.Event()
        # Never give up on an observation (a commit must not pass records whose observations were
        # lost): one that cannot be delivered stops the member before its next commit.
        self.obs = Producer({**base, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                             "message.timeout.ms": 0, "client.id": f"vigil-group-{self.name}-obs"})
        self.undelivered = ""  # an observation that could not be delivered: no commit after it
        conf = {**base, "group.id": args.group, "client.id": f"vigil-group-{self.name}",
                "isolation.level": "read_committed", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                "statistics.interval.ms": 1000, "stats_cb": self._stats}
        if args.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": args.session_timeout_ms,
                         "heartbeat.interval.ms": max(100, args.session_timeout_ms // 10),
                         "partition.assignment.strategy": "cooperative-sticky"})
        if args.static:
            conf["group.instance.id"] = f"{args.group}-{self.name}"
        if args.rack:  # fetch from a replica in this rack where the brokers allow it (KIP-392)
            conf["client.rack"] = args.rack
        self.consumer = Consumer(conf)
        self.positions: dict[int, int] = {}  # consumed up to (next offset), per owned partition
        self.committed: dict[int, int] = {}  # what its last acknowledged commit named
        self.rebalances = (0, "")
        self.fetching: dict[int, list[int]] = {}  # p -> [broker fetched from, leader, consumer lag], from the stats
        self.rewinding: dict[int, tuple[int, list[int]]] = {}  # p -> (acked value, offsets consumed below it)
        self.fatal = ""  # the fatal error that ended it
        self.owned: set[int] = set()  # partitions assigned now (a revoked one's late messages are dropped)

    # -- observations -------------------------------------------------------------------------
    def note(self, kind: str, **fields: Any) -> None:
        self.obs.produce(self.obs_topic, obs_format.encode(self.name, kind, self.topic, **fields),
                         key=self.name.encode(), partition=0, on_delivery=self._delivered)
        self.obs.poll(0)

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None and not self.undelivered:
            self.undelivered = err.name()
            self.stop.set()

    def flush(self) -> bool:
        """Wait until every observation is durable (True); False when stopping first, or when one
        could not be delivered."""
        while self.obs.flush(5.0):
            if self.stop.is_set():
                return False  # the observation log unreachable: nothing goes on before they are durable
        return not self.undelivered

    def _stats(self, text: str) -> None:
        try:
            stats = json.loads(text)
            cgrp = stats.get("cgrp") or {}
            self.rebalances = (int(cgrp.get("rebalance_cnt", 0)), str(cgrp.get("rebalance_reason", "")))
            self.fetching = fetch_sources(stats, self.topic)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass

    # -- the group ----------------------------------------------------------------------------
    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned.update(tp.partition for tp in partitions)
        self.note("assigned", p=sorted(tp.partition for tp in partitions), **self._starts(consumer, partitions))
        self.flush()  # durable before the assignment takes effect (and its committed offsets are fetched)

    def _starts(self, consumer: Consumer, partitions: list[TopicPartition]) -> dict[str, Any]:
        """Where the assignment will start, as far as the member can tell: the committed offsets
        (-1: none, so auto.offset.reset decides), the partitions whose committed offset is out of
        the log's range (expired, deleted, a truncated log: reset to the earliest offset) and those
        whose range could not be listed (``uk``: its leader not answering, e.g. a node down with the
        only replica; the committed offset may be out of range once it is back)."""
        try:
            got = consumer.committed([TopicPartition(self.topic, tp.partition) for tp in partitions], timeout=10)
        except KafkaException:
            return {}  # not known: the judge keeps its own candidates
        committed = {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in got}
        out, unknown = [], []
        for p, c in committed.items():
            if c >= 0:
                try:
                    low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5, cached=False)
                except KafkaException:
                    unknown.append(p)
                    continue
                if not low <= c <= high:
                    out.append(p)
        return {"c": {str(p): c for p, c in committed.items()}, "oor": out, "uk": unknown}

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = sorted(tp.partition for tp in partitions)
        self.commit(only=gone)
        self._forget(gone)
        self.note("revoked", p=gone)
        self.flush()

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = sorted(tp.partition for tp in partitions)
        self._forget(gone)
        self.note("lost", p=gone)
        self.flush()

    def _forget(self, gone: list[int]) -> None:
        """Partitions taken away: a rewind drill on one of them ends with what it re-consumed (asked
        again when that was nothing)."""
        for p in gone:
            self.positions.pop(p, None)
            self.committed.pop(p, None)  # (a later assignment starts from what the group committed then)
            self.owned.discard(p)
            if p in self.rewinding:
                _value, below = self.rewinding.pop(p)
                if below:
                    self.note("drill", d="group_rewind", p=p, offsets=below)
                elif self.control:
                    Path(f"{self.control}.group_rewind").write_bytes(b"")

    def commit(self, only: list[int] | None = None) -> None:
        offsets = {p: o for p, o in self.positions.items()
                   if (only is None or p in only) and o > self.committed.get(p, -1)}
        if not offsets:
            return
        if not self.flush():  # what the commit covers was observed first
            return
        self.note("intent", o={str(p): o for p, o in offsets.items()})
        if not self.flush():
            return
        try:
            self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                                 asynchronous=False)
            result, error = "ok", ""
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            result = "refused" if err is not None and err.code() in REFUSED_COMMIT else "unknown"
            error = err.name() if err is not None else str(e)
        self.note("ack", r=result, e=error)
        if result == "ok":
            for p, o in offsets.items():
                self.committed[p] = o
            if only is None:  # not while partitions are being taken away
                self._drill_rewind(offsets)

    # -- drills -------------------------------------------------------------------------------
    def _asked(self, kind: str) -> bool:
        if not self.control:
            return False
        path = Path(f"{self.control}.{kind}")
        if path.exists():
            path.unlink(missing_ok=True)
            return True
        return False

    def _drill_rewind(self, acked: dict[int, int]) -> None:
        for p, value in sorted(acked.items()):
            if value >= SKIP_RECORDS and p not in self.rewinding and self._asked("group_rewind"):
                self.rewinding[p] = (value, [])
                self.note("seek", p=p, to=value - SKIP_RECORDS)  # (a backward jump it made itself)
                self.consumer.seek(TopicPartition(self.topic, p, value - SKIP_RECORDS))
                self.positions[p] = value - SKIP_RECORDS
                return

    def _consumed(self, p: int, offsets: list[int]) -> list[int]:
        """The offsets to report consumed (a group_skip drill drops the last ones)."""
        if len(offsets) > SKIP_RECORDS and self._asked("group_skip"):
            dropped, offsets = offsets[-SKIP_RECORDS:], offsets[:-SKIP_RECORDS]
            self.note("drill", d="group_skip", p=p, offsets=dropped)
        if p in self.rewinding:
            value, below = self.rewinding[p]
            below.extend(o for o in offsets if o < value)
            if any(o >= value - 1 for o in offsets):
                self.note("drill", d="group_rewind", p=p, offsets=below)
                del self.rewinding[p]
        return offsets

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        self.note("started", protocol=self.args.protocol, static=self.args.static, pid=os.getpid())
        self.flush()
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_lost)
        last_commit = last_progress = time.monotonic()
        try:
            while not self.stop.is_set():
                msgs = self.consumer.consume(500, 0.2)
                got: dict[int, list[int]] = {}
                for m in msgs:
                    err = m.error()
                    if err is None:
                        if m.partition() in self.owned:  # (not a revoked partition's late messages)
                            got.setdefault(m.partition(), []).append(m.offset())
                    elif err.code() == KafkaError._FATAL:  # e.g. UNRELEASED_INSTANCE_ID (KIP-848): done
                        # (the message's error never says fatal() in this client: its code does)
                        self.note("fatal", e=err.str())
                        self.flush()
                        self.fatal = err.str() or err.name()
                        self.stop.set()
                runs = {}
                for p, offsets in got.items():
                    if offsets[0] < self.positions.get(p, -1) and p not in self.rewinding:
                        # its client reset the position backwards (a log rewritten below it: an unclean
                        # election, a node back empty): commit where it consumes now, as an application
                        # committing its position would, not only once past what it committed before
                        self.committed.pop(p, None)
                    self.positions[p] = offsets[-1] + 1
                    reported = self._consumed(p, offsets)
                    if reported:
                        runs[str(p)] = offset_runs(reported)
                if runs:
                    self.note("consumed", r=runs)
                now = time.monotonic()
                if now - last_commit >= self.args.commit_interval_ms / 1000:
                    self.commit()
                    last_commit = now
                if now - last_progress >= 1.0:
                    owned = sorted(tp.partition for tp in self.consumer.assignment())
                    self.note("progress", p=owned, rc=self.rebalances[0], rr=self.rebalances[1],
                              ff={str(p): self.fetching[p] for p in owned if p in self.fetching})
                    last_progress = now
        finally:
            if not self.fatal and not self.undelivered:
                self.commit()  # (only after its observations are durable: see commit)
            self.note("stopped", reason=self.fatal or self.undelivered or "stopped")
            self.flush()
            self.consumer.close()
            self.obs.flush(10.0)
        return EXIT_FATAL if self.fatal or self.undelivered else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conf", required=True, help="JSON file of the librdkafka base settings")
    ap.add_argument("--member", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--obs-topic", required=True)
    ap.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    ap.add_argument("--static", action="store_true")
    ap.add_argument("--session-timeout-ms", type=int, default=10000)
    ap.add_argument("--commit-interval-ms", type=int, default=500)
    ap.add_argument("--control", default="")
    ap.add_argument("--rack", default="", help="client.rack")
    args = ap.parse_args(argv)
    base = json.loads(Path(args.conf).read_text())
    member = Member(base, args)
    install_stop_handlers(member.stop)
    stop_when_stdin_ends(member.stop)
    return member.run()


if __name__ == "__main__":
    sys.exit(main())
