"""``vigil bench``: catch-up throughput of the checker against its own ceilings.

Over one pre-filled topic of canary records (with their ledger, as a real writer leaves it):

(a) a bare confluent-kafka batch consumer reading every partition once per isolation level;
(b) a Spark query over the same two sources writing to the ``noop`` sink;
(c) the full checker (the ``vigil watch`` batch handler with a fresh checkpoint).

Each figure counts every isolation level's read (so 2 × records). (b) and (c) run with the
``availableNow`` trigger and ``watch.max_offsets_per_trigger``. Peak RSS is sampled over this
process and its children (the Spark driver JVM, the Python workers that decode on the executors)
and, with ``--standalone N``, the standalone cluster's daemons and executor JVMs; CPU seconds per
million reads over the same processes are steadier on a noisy machine than the rates.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psutil
from confluent_kafka import KafkaError, TopicPartition

from invariants.ledger_format import Intent, OutcomeRun, Outcomes, Start, Stop, WriteOutcome, WriteRange, WriterSettings
from monitor import client_config, clients, record_format
from monitor.canary.runner import open_ledger, prepare_topics
from monitor.config import Config
from monitor.identity import claim
from monitor.ledger import now_us

RECORD_SIZE = 100
CHUNK = 50_000
_SEQ_AT = record_format.HEADER_DTYPE.fields["seq"][1]  # byte offset of the big-endian u64 seq
NOOP_PROGRESS_KEPT = 100_000  # triggers of the no-op query whose progress Spark keeps (default 100)


@dataclass
class BenchResult:
    records: int
    partitions: int
    figures: dict[str, dict[str, float]] = field(default_factory=dict)

    def rate(self, name: str) -> float:
        return self.figures[name]["records_per_s"]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "partitions": self.partitions, **self.figures}
        if "checker" in self.figures and "spark_noop" in self.figures:
            out["ratio_checker_to_spark"] = round(self.rate("checker") / self.rate("spark_noop"), 3)
        if "checker" in self.figures and "bare_consumer" in self.figures:
            out["ratio_checker_to_bare"] = round(self.rate("checker") / self.rate("bare_consumer"), 4)
        return out


class PeakRss:
    """Samples the RSS of this process plus its children (and ``extra`` processes: a standalone
    Spark cluster's daemons and executors) until stopped; also the CPU seconds they used meanwhile."""

    def __init__(self, interval: float = 0.25, extra: Callable[[], list[int]] = list) -> None:
        self.peak = 0
        self.cpu_seconds = 0.0
        self._extra = extra
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _tree(self) -> list[psutil.Process]:
        me = psutil.Process()
        out = [me, *me.children(recursive=True)]
        for pid in self._extra():
            try:
                root = psutil.Process(pid)
                out += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
        return out

    def _cpu(self) -> float:
        """CPU seconds of the tree, children already reaped included (a Python worker that exited
        counts in its parent's ``children_*``)."""
        total = 0.0
        for p in self._tree():
            try:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return total

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            total = 0
            for p in self._tree():
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(interval)

    def __enter__(self) -> "PeakRss":
        self._cpu_start = self._cpu()
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.cpu_seconds = self._cpu() - self._cpu_start
        self._stop.set()
        self._thread.join()

    def figures(self, reads: int, seconds: float) -> dict[str, float]:
        return {"reads": reads, "seconds": round(seconds, 2), "records_per_s": round(reads / seconds),
                "peak_rss_mb": round(self.peak / 2**20),
                "cpu_s_per_m_reads": round(self.cpu_seconds / max(reads, 1) * 1e6, 2)}


def _values(writer_id: int, inc: int, first_seq: int, count: int) -> list[bytes]:
    header = np.zeros(count, dtype=record_format.HEADER_DTYPE)
    header["magic"], header["version"] = record_format.MAGIC, record_format.VERSION
    header["writer_id"], header["incarnation"] = writer_id, inc
    header["seq"] = np.arange(first_seq, first_seq + count, dtype=np.uint64)
    header["produce_ts_us"] = now_us()
    header["padding_len"] = RECORD_SIZE - record_format.HEADER_SIZE
    rows = np.zeros((count, RECORD_SIZE), dtype=np.uint8)
    rows[:, :record_format.HEADER_SIZE] = header.view(np.uint8).reshape(count, record_format.HEADER_SIZE)
    buf = rows.tobytes()
    return [buf[i * RECORD_SIZE:(i + 1) * RECORD_SIZE] for i in range(count)]


def prefill(cfg: Config, records: int, progress: Callable[[str], None]) -> int:
    """Fill the canary topic up to ``records`` honest canary records (with their ledger)."""
    info = prepare_topics(cfg).canary
    probe = clients.consumer(cfg, "read_uncommitted", group="vigil-bench")
    have = sum(probe.get_watermark_offsets(TopicPartition(cfg.canary.name, p), timeout=10)[1]
               for p in range(info.partitions))
    probe.close()
    if have >= records:
        progress(f"{cfg.canary.name} already holds {have} records")
        return have
    identity = claim(cfg.state_dir, f"{cfg.resolved_instance_id()}-bench")
    try:
        ledger = open_ledger(cfg, identity)
        ledger.append(Start(info.name, info.topic_id, info.partitions, WriterSettings(name="bench", role="bench")),
                      sync=True)
        producer = clients.producer(client_config.bench_producer(cfg), "bench", cfg)
        seq = [0] * info.partitions
        written, started = have, time.monotonic()
        while written < records:
            p = (written // CHUNK) % info.partitions
            n = min(CHUNK, records - written)
            first = seq[p]
            seq[p] += n
            ledger.append(Intent(info.topic_id, (WriteRange(p, first, n),)), sync=True)
            offsets = np.full(n, -1, dtype=np.int64)

            def delivered(err: KafkaError | None, msg: Any, offsets: np.ndarray = offsets, first: int = first) -> None:
                if err is None:
                    offsets[int.from_bytes(msg.value()[_SEQ_AT:_SEQ_AT + 8], "big") - first] = msg.offset()

            send_ts = now_us()
            for value in _values(identity.writer_id, identity.incarnation, first, n):
                while True:
                    try:
                        producer.produce(cfg.canary.name, value=value, partition=p, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.flush()
            ledger.append(Outcomes(info.topic_id, _runs(p, first, offsets, send_ts)))
            written += n
            progress(f"prefill: {written}/{records} records ({(written - have) / (time.monotonic() - started):,.0f}/s)")
        ledger.append(Stop(), sync=True)
        ledger.sync()
        return written
    finally:
        identity.release()


def _runs(p: int, first: int, offsets: np.ndarray, ts: int) -> tuple[OutcomeRun, ...]:
    runs: list[OutcomeRun] = []
    done = now_us()
    i = 0
    while i < len(offsets):
        j = i + 1
        if offsets[i] < 0:
            while j < len(offsets) and offsets[j] < 0:
                j += 1
            runs.append(OutcomeRun(p, first + i, j - i, WriteOutcome.INDETERMINATE, -1, ts, done, "no delivery report"))
        else:
            while j < len(offsets) and offsets[j] == offsets[j - 1] + 1:
                j += 1
            runs.append(OutcomeRun(p, first + i, j - i, WriteOutcome.ACKED, int(offsets[i]), ts, done))
        i = j
    return tuple(runs)


def bare_consumer(cfg: Config, partitions: int) -> int:
    """Read every partition once per isolation level; returns records read."""
    total = 0
    for iso in ("read_committed", "read_uncommitted"):
        c = clients.consumer(cfg, iso, group="vigil-bench", profile="bulk")
        c.assign([TopicPartition(cfg.canary.name, p, 0) for p in range(partitions)])
        eof: set[int] = set()
        while len(eof) < partitions:
            for msg in c.consume(100_000, 1.0):
                if msg.error() is None:
                    total += 1
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
        c.close()
    return total


def run_bench(cfg: Config, records: int, which: tuple[str, ...], progress: Callable[[str], None],
              standalone: int = 0) -> BenchResult:
    """``standalone``: run (b) and (c) on a Spark standalone cluster of that many workers started
    for the bench (their JVMs and executors count in RSS and CPU)."""
    from monitor.watch import spark as spark_job
    from monitor.watch.runtime import WatchRuntime
    from monitor.watch.standalone import StandaloneSpark

    prefill(cfg, records, progress)
    partitions = cfg.canary.partitions
    result = BenchResult(records, partitions)
    if "bare" in which:
        progress("(a) bare confluent-kafka consumer, both isolation levels")
        with PeakRss() as rss:
            t = time.monotonic()
            n = bare_consumer(cfg, partitions)
            secs = time.monotonic() - t
        result.figures["bare_consumer"] = rss.figures(n, secs)
    if not {"spark", "checker"} & set(which):
        return result
    tmp = Path(tempfile.mkdtemp(prefix="vigil-bench-"))
    cluster = StandaloneSpark(tmp / "spark", workers=standalone, port_base=27277, java_home=cfg.watch.java_home)
    extra: Callable[[], list[int]] = list
    spark = None
    try:
        if standalone:
            cluster.up(progress)
            cfg = cfg.model_copy(update={"watch": cfg.watch.model_copy(update={"spark_master": cluster.master_url})})
            extra = cluster.pids
            result.figures["spark_master"] = {"standalone_workers": standalone}
        spark = spark_job.session(cfg, progress, app="vigil-bench")
        spark.sparkContext.setLogLevel("ERROR")
        # the no-op's rows are summed from recentProgress, which keeps the last 100 triggers by
        # default: a run of more (50M reads at maxOffsetsPerTrigger) counted only the last 100
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(NOOP_PROGRESS_KEPT))
        if "spark" in which:
            progress("(b) Spark no-op query over both isolation levels")
            with PeakRss(extra=extra) as rss:
                t = time.monotonic()
                q = (spark_job.union_of_sources(spark, cfg, with_ledger=False).writeStream.format("noop")
                     .option("checkpointLocation", str(tmp / "noop")).trigger(availableNow=True).start())
                q.awaitTermination()
                secs = time.monotonic() - t
            progress_kept = q.recentProgress
            if len(progress_kept) >= NOOP_PROGRESS_KEPT:
                raise RuntimeError(f"the no-op query ran {len(progress_kept)}+ triggers: its rows cannot be summed")
            n = sum(p["numInputRows"] for p in progress_kept)
            result.figures["spark_noop"] = rss.figures(n, secs)
        if "checker" in which:
            progress("(c) the full checker")
            checker_cfg = cfg.model_copy(update={"watch": cfg.watch.model_copy(update={
                "checkpoint_dir": str(tmp / "checker")}), "metrics": cfg.metrics.model_copy(update={"port": 0})})
            runtime = WatchRuntime(checker_cfg, progress)
            runtime.evidence.path = tmp / "evidence.jsonl"
            with PeakRss(extra=extra) as rss:
                t = time.monotonic()
                q = spark_job.start_query(spark, checker_cfg, runtime.handle_batch, name="vigil-bench-checker",
                                          available_now=True)
                q.awaitTermination()
                secs = time.monotonic() - t
            ck = runtime.state.checker
            n = sum(ck.records_checked.values())
            result.figures["checker"] = {
                **rss.figures(n, secs), "state_mb": round(runtime.state_bytes / 2**20, 3),
                "violations": sum(ck.counts.values()), "batches": runtime.state.batches,
            }
    finally:
        if spark is not None:
            spark.stop()
        cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return result
