"""Every Prometheus metric Vigil exports, created against a registry passed in.

Label sets are bounded: ``writer`` takes the configured writer names, ``outcome`` the outcome
vocabulary, ``kind`` a fixed list. Every error series is initialised to 0 at start so that
rate/increase and absent()-style alerts work from the first scrape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from invariants.catalog import series
from invariants.ledger_format import TxnOutcome, WriteOutcome
from invariants.acked_writes import EXPIRED_REASONS
from invariants.model import DURABILITIES, LOST_CAUSES, READERS, RU

WRITE_OUTCOMES = [o.value for o in WriteOutcome if o is not WriteOutcome.PENDING]
TXN_OUTCOMES = [o.value for o in TxnOutcome if o is not TxnOutcome.PENDING]
PRODUCER_ERROR_KINDS = ["init_producer_id", "transaction", "fatal", "client", "queue_full", "list_offsets"]
TOPIC_CHANGE_KINDS = ["recreated", "partitions_added"]
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass
class ProducerMetrics:
    writes: Counter
    latency: Histogram
    transactions: Counter
    errors: Counter
    last_ack: Gauge
    incarnation: Gauge
    info: Gauge
    topic_changes: Counter
    ledger_wait: Gauge

    def init_writer(self, writer: str, transactional: bool, acks: str = "all", idempotence: bool = True) -> None:
        self.info.labels(writer, acks, str(idempotence).lower(), str(transactional).lower()).set(1)
        for outcome in WRITE_OUTCOMES:
            self.writes.labels(writer, outcome)
        for kind in PRODUCER_ERROR_KINDS:
            self.errors.labels(writer, kind)
        if transactional:
            for outcome in TXN_OUTCOMES:
                self.transactions.labels(writer, outcome)
        self.latency.labels(writer)
        self.last_ack.labels(writer)
        for kind in TOPIC_CHANGE_KINDS:
            self.topic_changes.labels(writer, kind)


def producer_metrics(registry: CollectorRegistry) -> ProducerMetrics:
    return ProducerMetrics(
        writes=Counter(
            "vigil_producer_writes", "Canary writes by final outcome as the client reported it "
            "(acked, failed, indeterminate, unconfirmed).", ["writer", "outcome"], registry=registry),
        latency=Histogram(
            "vigil_producer_ack_latency_seconds", "Time from send to acknowledgement of acked canary writes.",
            ["writer"], buckets=LATENCY_BUCKETS, registry=registry),
        transactions=Counter(
            "vigil_producer_transactions", "Canary transactions by outcome (committed/aborted only when the "
            "call returned, else indeterminate).", ["writer", "outcome"], registry=registry),
        errors=Counter(
            "vigil_producer_errors", "Producer errors by kind: init_producer_id (InitProducerId failed), "
            "transaction (begin/commit/abort failed), fatal (producer had to be recreated), client "
            "(other client errors), queue_full, list_offsets (the log start after a suspect ack could not "
            "be listed).", ["writer", "kind"], registry=registry),
        last_ack=Gauge(
            "vigil_producer_last_ack_timestamp_seconds", "Wall-clock time of the last acknowledged canary write.",
            ["writer"], registry=registry),
        incarnation=Gauge(
            "vigil_producer_incarnation", "Current incarnation number of the writer instance.", ["writer"],
            registry=registry),
        info=Gauge(
            "vigil_producer_info", "1 per canary writer of this process, with what it does (acks=0 writers are "
            "never acknowledged: the stalled-producer alert leaves them out).",
            ["writer", "acks", "idempotence", "transactional"], registry=registry),
        topic_changes=Counter(
            "vigil_producer_topic_changes", "Times the writer carried on on a changed canary topic: recreated "
            "(a new topic ID: gone and created again, by the writer or anyone else) or partitions_added.",
            ["writer", "kind"], registry=registry),
        ledger_wait=Gauge(
            "vigil_ledger_wait_seconds", "How long the writer has been waiting for its ledger entries to be "
            "durable, 0 when it is not: while it waits it writes no canary record (an intent comes first), so a "
            "ledger that is away pauses the canary instead of losing its outcomes. ledger: separate (a cluster of "
            "its own) or shared (the canary's).", ["writer", "ledger"], registry=registry),
    )


# -- the live checker ------------------------------------------------------------------------

# fine between 0.5 and 5 s, where the live latency of a 2-core machine sits and its goals are (p99 <= 2 s)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 10, 30, 60, 300)
E2E_BUCKETS_BEFORE = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)  # of states saved without their bounds


def rebucket(counts: list[int], bounds: tuple[float, ...], into: tuple[float, ...]) -> list[int]:
    """Per-bucket counts (``+Inf`` last) over ``bounds`` as counts over ``into``: each bucket's count
    goes to the bucket of ``into`` with the same upper bound, or the next one above (so the
    cumulative counts at every bound the two share stay exact)."""
    out = [0] * (len(into) + 1)
    for upper, n in zip((*bounds, float("inf")), counts):
        out[next((i for i, b in enumerate(into) if b >= upper), len(into))] += int(n)
    return out


@dataclass
class WatchSnapshot:
    """Everything the watch exports, as of the last durable save (so a restart never shows less)."""

    violations: dict  # (Invariant, Isolation, Durability) -> int, every catalog series x class present
    records_checked: dict  # Isolation -> int
    expired_unread: dict = field(default_factory=dict)  # reason -> int
    malformed: dict = field(default_factory=dict)  # kind -> int
    aborted_allowed: int = 0
    unseen: dict = field(default_factory=dict)  # Isolation -> int
    e2e_counts: dict = field(default_factory=dict)  # Isolation -> list of per-bucket counts (+Inf last)
    e2e_sum: dict = field(default_factory=dict)
    lag: dict = field(default_factory=dict)  # (Isolation, partition) -> records
    last_progress: dict = field(default_factory=dict)  # (Isolation, partition) -> unix seconds
    last_batch: float = 0.0
    up: int = 0
    restarts: int = 0
    led: dict = field(default_factory=dict)  # broker id -> partitions led
    stalls_open: dict = field(default_factory=dict)  # (Invariant, Isolation) -> open episodes
    state_bytes: int = 0
    ledger_held: int = 0  # ledger rows held ahead of the canary readers (a catch-up)
    batch_seconds: dict = field(default_factory=dict)  # phase -> seconds (fetch, check, persist, refetch)
    trigger_seconds: dict = field(default_factory=dict)  # part of Spark's trigger (its durationMs keys) -> seconds
    triggers: int = 0  # triggers that reported progress
    batches: int = 0
    lost_by_writer: dict = field(default_factory=dict)  # (writer name, Isolation, Durability, cause) -> int
    rewrites: dict = field(default_factory=dict)  # partition -> offsets found rewritten
    unconfirmed_missing: dict = field(default_factory=dict)  # Isolation -> int
    writers: list = field(default_factory=list)  # (name, acks, idempotence, transactional) of the canary writers
    refetches: int = 0
    old_log_reads: dict = field(default_factory=dict)  # Isolation -> records
    filled_reads: dict = field(default_factory=dict)  # Isolation -> records
    fill_left_out: dict = field(default_factory=dict)  # Isolation -> records
    list_offsets_failures: int = 0
    topics: dict = field(default_factory=dict)  # topic ID -> (name, state: current | gone reason | known)
    clock_skew: dict = field(default_factory=dict)  # writer name -> seconds its clock is ahead of the brokers'
    save_failures: dict = field(default_factory=dict)  # errno name -> saves of the state that failed
    ledger_reachable: int = 1  # the prober found the ledger answering last round
    ledger_placement: str = "shared"  # Config.ledger_placement
    group_redeliveries: int = 0  # the group canary's (invariants.groups)
    group_rebalances: dict = field(default_factory=dict)  # (member, reason) -> rebalances librdkafka counted
    group_fetching: dict = field(default_factory=dict)  # (member, partition) -> (broker fetched from, leader, lag)
    group_resets: int = 0  # positions the group canary's members reported out of range
    group_observations_lost: int = 0  # gaps in its observation log
    group_recreations: int = 0  # the canary topic recreated under it (invariants.groups.GroupJudge.recreated)


MALFORMED_KINDS = ("foreign", "malformed", "ledger", "unknown_topic", "eos_output", "group_observation",
                   "foreign_group_observation")
BATCH_PHASES = ("fetch", "wait", "write_ahead", "check", "persist", "refetch")
SAVE_FAILURE_REASONS = ("ENOSPC", "EFBIG")  # a full volume, a file-size limit
TRIGGER_PARTS = ("triggerExecution", "latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit",
                 "commitOffsets")


class ClientErrorsCollector:
    """``vigil_client_errors_total{client,kind}``: errors the Kafka clients of this process reported
    on their own (:mod:`monitor.client_errors`), from ``counts()`` at scrape time."""

    def __init__(self, counts: Callable[[], dict]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily("vigil_client_errors", "Errors the Kafka clients reported on their own, by client "
                                  "(writer-<name>, ledger, admin, prober, refetch, audit, drill, bench, evidence) "
                                  "and kind (authentication: credentials refused; authorization: an ACL missing; "
                                  "tls; transport: brokers unreachable; other). The clients retry by themselves; "
                                  "the first two kinds are also said on stderr, naming the setting to check.",
                                  labels=["client", "kind"])
        for (client, kind), n in sorted(self.counts().items()):
            fam.add_metric([client, kind], n)
        yield fam


class WatchCollector:
    """Exports a :class:`WatchSnapshot` obtained from ``snapshot()`` at scrape time.

    Label sets: ``invariant`` × ``isolation`` = the 21 catalog series, each × ``durability`` (3);
    ``isolation`` 2 values; ``partition`` = the canary topic's partitions; ``broker`` = the
    cluster's broker ids; ``kind`` = :data:`MALFORMED_KINDS`; ``writer`` = the writers' configured
    names (and drill kinds).
    """

    def __init__(self, snapshot: Callable[[], WatchSnapshot]) -> None:
        self.snapshot = snapshot

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot()
        v = CounterMetricFamily("vigil_violations", "Invariant violations detected, by invariant, isolation level "
                                "and durability class: guaranteed = a promise Kafka makes was broken (pages), "
                                "at_risk = the configuration allowed it, unknown = the topic's settings were not "
                                "observed (cumulative across monitor restarts; see docs/invariants.md).",
                                labels=["invariant", "isolation", "durability"])
        for (inv, iso) in series():
            for d in DURABILITIES:
                v.add_metric([inv.value, iso.value, d.value], s.violations.get((inv, iso, d), 0))
        yield v
        lost = CounterMetricFamily("vigil_lost_writes", "lost_write violations per canary writer (its configured "
                                   "name), isolation, durability class and cause (never_read: never read where "
                                   "acknowledged; vanished: read there, later gone; topic_vanished: its topic ID is "
                                   "gone): what each writer's settings cost.",
                                   labels=["writer", "isolation", "durability", "cause"])
        lost_by_writer = {(name, iso, d, cause): 0 for name, *_rest in s.writers for iso in READERS
                          for d in DURABILITIES for cause in LOST_CAUSES}
        lost_by_writer.update(s.lost_by_writer)  # every announced writer's series from the start, at 0
        for (writer, iso, d, cause), n in sorted(lost_by_writer.items(), key=lambda kv: (
                kv[0][0], kv[0][1].value, kv[0][2].value, kv[0][3])):
            lost.add_metric([writer, iso.value, d.value, cause], n)
        yield lost
        info = GaugeMetricFamily("vigil_writer_info", "1 per canary writer the ledger announced, with what it does.",
                                 labels=["writer", "acks", "idempotence", "transactional"])
        for name, acks, idem, txn in s.writers:
            info.add_metric([name, acks, str(idem).lower(), str(txn).lower()], 1)
        yield info
        rw = CounterMetricFamily("vigil_log_rewrites", "Offsets a re-read found holding something else than "
                                 "before (a truncated or rewritten log), per canary partition.", labels=["partition"])
        for p, n in sorted(s.rewrites.items()):
            rw.add_metric([str(p)], n)
        yield rw
        um = CounterMetricFamily("vigil_unconfirmed_missing", "acks=0 writes never read although later writes of "
                                 "their writer and partition were (counted, never a violation).", labels=["isolation"])
        for iso in READERS:
            um.add_metric([iso.value], s.unconfirmed_missing.get(iso, 0))
        yield um
        ti = GaugeMetricFamily("vigil_topic_info", "1 per topic ID the checker knows, with its name and state: "
                               "current (what the name points at now), known, vanished or retired.",
                               labels=["topic", "topic_id", "state"])
        for tid, (name, state) in sorted(s.topics.items()):
            ti.add_metric([name, tid, state], 1)
        yield ti
        skew = GaugeMetricFamily("vigil_writer_clock_skew_seconds", "How far each writer's clock is ahead of the "
                                 "brokers' (its ledger entries' own time minus their append time, the largest "
                                 "over the last probe round; negative: behind). Durations are taken from the "
                                 "brokers' clock, so skew cannot fake or hide a stall.", labels=["writer"])
        for name, seconds in sorted(s.clock_skew.items()):
            skew.add_metric([name], seconds)
        yield skew
        yield CounterMetricFamily("vigil_refetches", "Ranges read again directly to confirm a verdict or follow a "
                                  "rewrite.", value=s.refetches)
        old = CounterMetricFamily("vigil_old_log_reads", "Records Spark fetched under a topic name that were "
                                  "intended for an older ID of it (a broker that had not yet deleted a recreated "
                                  "topic's old log, or stragglers), and records beside them, or, in a batch put on an "
                                  "ID the name has since left, a writer's records above every seq it said it "
                                  "intended: not checked; what the new log holds there is read again.", labels=["isolation"])
        for iso in READERS:
            old.add_metric([iso.value], s.old_log_reads.get(iso, 0))
        yield old
        filled = CounterMetricFamily("vigil_filled_reads", "Records of a recreated canary topic that Spark skipped "
                                     "(it resumed above the new log's start: no batch was planned while the topic "
                                     "was gone) and the watch read directly, before the reader's first read there.",
                                     labels=["isolation"])
        refused = CounterMetricFamily("vigil_fill_left_out", "Records of such direct reads not applied: up to the "
                                      "last canary record there not known to be meant for the new topic ID (an old log "
                                      "still served under the name, a straggler): what lies below the first record "
                                      "applied expires unread (below_first_read).", labels=["isolation"])
        for iso in READERS:
            filled.add_metric([iso.value], s.filled_reads.get(iso, 0))
            refused.add_metric([iso.value], s.fill_left_out.get(iso, 0))
        yield filled
        yield refused
        reach = GaugeMetricFamily("vigil_ledger_reachable", "1 when the prober's last look found the ledger "
                                  "answering (its metadata, every partition with a leader and min.insync.replicas "
                                  "in sync), 0 when not: the writers then pause (no canary record without a durable "
                                  "intent) and the checker waits. ledger: separate (a cluster of its own) or shared "
                                  "(the canary's: then it is the canary's cluster that is away).", labels=["ledger"])
        reach.add_metric([s.ledger_placement], s.ledger_reachable)
        yield reach
        yield CounterMetricFamily("vigil_list_offsets_failures", "Partition end listings of the prober that got no "
                                  "answer (their last known values were kept).", value=s.list_offsets_failures)
        checked = CounterMetricFamily("vigil_records_checked", "Canary records read and checked, per reader.",
                                      labels=["isolation"])
        for iso in READERS:
            checked.add_metric([iso.value], s.records_checked.get(iso, 0))
        yield checked
        ex = CounterMetricFamily("vigil_expired_unread", "Acked writes that could not be judged (never a "
                                 "violation), by reason: below_first_read (below the reader's first offset), "
                                 "log_start (below the log start offset), horizon (beyond the live horizon: the "
                                 "audit's), retired (its topic ID was retired with vigil retire).", labels=["reason"])
        for reason in EXPIRED_REASONS:
            ex.add_metric([reason], s.expired_unread.get(reason, 0))
        yield ex
        mal = CounterMetricFamily("vigil_malformed_records", "Records that are not well-formed canary records "
                                  "(foreign, malformed, bad ledger entries, unknown topic); counted, never fatal.",
                                  labels=["kind"])
        for kind in MALFORMED_KINDS:
            mal.add_metric([kind], s.malformed.get(kind, 0))
        yield mal
        ab = CounterMetricFamily("vigil_aborted_records_read", "Records of aborted transactions returned by the "
                                 "read_uncommitted reader (allowed; not a violation).", labels=["isolation"])
        ab.add_metric([RU.value], s.aborted_allowed)
        yield ab
        yield CounterMetricFamily("vigil_group_redeliveries", "Records the group canary's members were delivered "
                                  "again at or below what the group had consumed, not below its acknowledged "
                                  "committed offset (at-least-once behaviour; not a violation).",
                                  value=s.group_redeliveries)
        reb = CounterMetricFamily("vigil_group_rebalances", "Rebalances each group canary member's client counted, "
                                  "by its last reason (librdkafka's).", labels=["member", "reason"])
        for (member, reason), n in sorted(s.group_rebalances.items()):
            reb.add_metric([member, reason], n)
        yield reb
        follower = GaugeMetricFamily("vigil_group_fetch_from_follower", "1 where a follower serves a group canary "
                                     "member's fetches of a partition (a rack-aware member, KIP-392), 0 where "
                                     "its leader does; from the member's last progress report",
                                     labels=["member", "partition"])
        lag = GaugeMetricFamily("vigil_group_lag_records", "A group canary member's consumer lag per partition "
                                "(its client's statistics, last progress report): a follower-served member's extra "
                                "lag against the others", labels=["member", "partition"])
        for (member, p), (broker, leader, behind) in sorted(s.group_fetching.items()):
            follower.add_metric([member, str(p)], int(broker >= 0 and broker != leader))
            lag.add_metric([member, str(p)], max(behind, 0))
        yield follower
        yield lag
        yield CounterMetricFamily("vigil_group_offset_resets", "Committed offsets the group canary's members "
                                  "found missing or out of range at assignment, and backward jumps their client "
                                  "made unannounced (auto.offset.reset, a truncation detected): what follows is "
                                  "redelivered, not rewound.",
                                  value=s.group_resets)
        yield CounterMetricFamily("vigil_group_observations_lost", "Gaps in the group canary's observation log "
                                  "(its head deleted counts as one): group_skip is no longer judged after one.",
                                  value=s.group_observations_lost)
        yield CounterMetricFamily("vigil_group_topic_recreations", "The canary topic recreated under the group "
                                  "canary (a new topic ID): group_skip is no longer judged after one (its members "
                                  "commit the old log's positions for a while).",
                                  value=s.group_recreations)
        unseen = GaugeMetricFamily("vigil_unseen_writes", "Acked writes older than watch.unseen_after_s that the "
                                   "reader has not reached yet (late, not lost).", labels=["isolation"])
        for iso in READERS:
            unseen.add_metric([iso.value], s.unseen.get(iso, 0))
        yield unseen
        e2e = HistogramMetricFamily("vigil_e2e_latency_seconds", "Produce-to-check latency of canary records, "
                                    "per reader.", labels=["isolation"])
        for iso in READERS:
            counts = list(s.e2e_counts.get(iso, [0] * (len(E2E_BUCKETS) + 1)))
            cumulative, total = [], 0
            for bound, c in zip([*map(str, E2E_BUCKETS), "+Inf"], counts):
                total += c
                cumulative.append((bound, total))
            e2e.add_metric([iso.value], cumulative, s.e2e_sum.get(iso, 0.0))
        yield e2e
        lag = GaugeMetricFamily("vigil_partition_lag_records", "Records between the checker's position and the "
                                "end (high watermark, or LSO for read_committed), per partition.",
                                labels=["isolation", "partition"])
        prog = GaugeMetricFamily("vigil_partition_last_progress_timestamp_seconds", "When the checker last "
                                 "advanced on the partition.", labels=["isolation", "partition"])
        for (iso, p), n in sorted(s.lag.items(), key=lambda kv: (kv[0][0].value, kv[0][1])):
            lag.add_metric([iso.value, str(p)], n)
        for (iso, p), t in sorted(s.last_progress.items(), key=lambda kv: (kv[0][0].value, kv[0][1])):
            prog.add_metric([iso.value, str(p)], t)
        yield lag
        yield prog
        yield GaugeMetricFamily("vigil_last_batch_timestamp_seconds", "When the watch last completed a "
                                "micro-batch or an idle trigger (the monitor's own freshness).", value=s.last_batch)
        yield GaugeMetricFamily("vigil_up", "1 while the watch query runs, 0 while it is (re)starting.", value=s.up)
        yield CounterMetricFamily("vigil_query_restarts", "Times the supervisor restarted the failed query.",
                                  value=s.restarts)
        led = GaugeMetricFamily("vigil_partitions_led", "Canary partitions led per broker (0 = a broker the "
                                "canary does not cover).", labels=["broker"])
        for broker, n in sorted(s.led.items()):
            led.add_metric([str(broker)], n)
        yield led
        stalls = GaugeMetricFamily("vigil_stalls_open", "Liveness episodes currently open (stalled_poll, "
                                   "lso_stuck, producer_stalled).", labels=["invariant", "isolation"])
        for (inv, iso), n in sorted(s.stalls_open.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
            stalls.add_metric([inv.value, iso.value], n)
        yield stalls
        yield GaugeMetricFamily("vigil_state_bytes", "Size of the checker's durable state.", value=s.state_bytes)
        yield GaugeMetricFamily("vigil_ledger_held_rows", "Ledger entries fetched far ahead of the canary readers in "
                                "a catch-up, held beside the state until the readers come near (watch.ledger_lead_s); "
                                "0 live.", value=s.ledger_held)
        failed = CounterMetricFamily("vigil_state_save_failures", "Saves of the checker state (or of the evidence "
                                     "with it) that failed since the monitor started, by errno (ENOSPC: the volume "
                                     "is full, EFBIG: a file-size limit): the batch is not exported and is applied "
                                     "again.", labels=["reason"])
        for reason, n in sorted({**dict.fromkeys(SAVE_FAILURE_REASONS, 0), **s.save_failures}.items()):
            failed.add_metric([reason], n)  # the usual reasons from 0: an alert on the increase sees the first
        yield failed
        yield CounterMetricFamily("vigil_batches", "Micro-batches the checker applied.", value=s.batches)
        phases = CounterMetricFamily("vigil_batch_seconds", "Time the micro-batches spent per phase since the "
                                     "monitor started: fetch (Spark job, executors' decoding, transfer to the "
                                     "driver), check (the checker), persist (saving its state), refetch (ranges read again "
                                     "directly after a batch, and applied). With watch.overlap_check, check and "
                                     "persist run beside the next batch's fetch (the phases overlap), and the batch "
                                     "handler then spends wait (for the batch before to be applied) and write_ahead "
                                     "(its batch written to disk for the applier) before Spark commits the batch.",
                                     labels=["phase"])
        for phase in BATCH_PHASES:
            phases.add_metric([phase], s.batch_seconds.get(phase, 0.0))
        yield phases
        yield CounterMetricFamily("vigil_triggers", "Triggers of the query that reported progress.", value=s.triggers)
        parts = CounterMetricFamily("vigil_trigger_seconds", "Time Spark's triggers spent per part since the monitor "
                                    "started, as Spark reports it (durationMs: triggerExecution is the whole trigger, "
                                    "addBatch the foreachBatch handler with its job, latestOffset and getBatch the "
                                    "sources' offset lookups, queryPlanning, walCommit and commitOffsets the "
                                    "checkpoint).", labels=["part"])
        for part in TRIGGER_PARTS:
            parts.add_metric([part], s.trigger_seconds.get(part, 0.0))
        yield parts
