"""``vigil bench``: catch-up throughput of the checker against its own ceilings.

Over one pre-filled topic of canary records (with their ledger, as a real writer leaves it):

(a) a bare confluent-kafka batch consumer reading every partition once per isolation level;
(b) a Spark query over the same two sources writing to the ``noop`` sink;
(b') the checker's fetch alone: the watch query's rows handed to this process, nothing checked (where the
    JVM or the executors decode, ``watch.decode_on``, that decoding is part of it; ``rows`` counts the Kafka
    rows, ``driver_rows`` what reached this process) (``ratio_fetch_to_spark``: the most a checker of those
    rows can reach);
(c) the full checker (the ``vigil watch`` batch handler with a fresh checkpoint);
(d) with ``--only ...,tws``: per-partition state on the executors, ``transformWithStateInPandas``
    (:mod:`monitor.bench_tws`: a part of the checking only, the most that direction could reach).

Each figure counts every isolation level's read (so 2 × records). (b) and (c) run with the
``availableNow`` trigger and ``watch.max_offsets_per_trigger``. Peak RSS is sampled over this
process and its children (the Spark driver JVM, the Python workers that decode on the executors)
and, with ``--standalone N``, the standalone cluster's daemons and executor JVMs; CPU seconds per
million reads over the same processes are steadier on a noisy machine than the rates. The local
cluster's brokers and link proxy are not counted, even where the bench started them as its
children (before 2026-11-29 they were, then: about 2 GB of RSS and the brokers' CPU in both (b) and
(c), so the figures of runs that started the cluster and of runs that found it running differ).

Before (b) and (c), an untimed **warm-up** pass reads the whole topic through the checker's fetch
(the Kafka source, its projection, the JVM's decoding where it decodes, the Arrow transfer to this
process; nothing checked): the first
query of a JVM pays for its class loading and JIT compilation (measured here: a no-op pass over 3.9M
reads took 10.3 s cold and 5.5 s after one pass), and whichever of (b) and (c) ran first would pay it
alone. ``--no-jvm-warmup`` skips it (then the ratio favours the second, the checker).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil
from confluent_kafka import KafkaError, TopicPartition

from monitor import clients
from monitor.canary.runner import WriterThread, open_writer, prepare_topics
from monitor.config import Config, WriterConfig

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
        if "per_partition_state" in self.figures and "spark_noop" in self.figures:
            out["ratio_per_partition_state_to_spark"] = round(
                self.rate("per_partition_state") / self.rate("spark_noop"), 3)
        if "fetch_only" in self.figures and "spark_noop" in self.figures:  # the most any checker here can reach
            out["ratio_fetch_to_spark"] = round(self.rate("fetch_only") / self.rate("spark_noop"), 3)
        if "checker" in self.figures and "bare_consumer" in self.figures:
            out["ratio_checker_to_bare"] = round(self.rate("checker") / self.rate("bare_consumer"), 4)
        return out


class PeakRss:
    """Samples the RSS of this process plus its children (and ``extra`` processes: a standalone
    Spark cluster's daemons and executors) until stopped; also the CPU seconds they used meanwhile."""

    def __init__(self, interval: float = 0.25, extra: Callable[[], list[int]] = list,
                 exclude: Callable[[], set[int]] = set) -> None:
        self.peak = 0
        self.cpu_seconds = 0.0
        self._extra = extra
        self._exclude = exclude  # processes not counted, with their children (the local Kafka cluster's)
        self._excluded: set[int] = set()
        self._highest = 0  # the highest sample, and how many were taken
        self._samples = 0
        self.peak_by_kind: dict[str, int] = {}  # Spark's JVMs and the Python processes apart, each its own peak
        self._last_by_kind: dict[str, int] = {}
        self._highest_by_kind: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _leave_out(self) -> None:
        """The processes to leave out, looked up again at every sample and kept (once a lookup
        failed under load, and a run counted the three brokers: 4,518 MB where they were left out
        2,728)."""
        for pid in self._exclude():
            self._excluded.add(pid)
            try:
                self._excluded.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass

    def _tree(self) -> list[psutil.Process]:
        self._leave_out()
        me = psutil.Process()
        found = [me, *me.children(recursive=True)]
        for pid in self._extra():  # (a standalone cluster's daemons are this process's children too: once each)
            try:
                root = psutil.Process(pid)
                found += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
        return list({p.pid: p for p in found if p.pid not in self._excluded}.values())

    def _cpu(self) -> dict[int, float]:
        """CPU seconds per process of the tree, children already reaped included (a Python worker
        that exited counts in its parent's ``children_*``)."""
        out = {}
        for p in self._tree():
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return out

    def _sample(self) -> int:
        total = 0
        kinds: dict[str, int] = {}
        for p in self._tree():
            try:
                rss = p.memory_info().rss
                kind = _kind(p.name())
            except psutil.Error:
                continue
            total += rss
            kinds[kind] = kinds.get(kind, 0) + rss
        self._highest = max(self._highest, total)
        self._samples += 1
        for kind in set(kinds) | set(self._last_by_kind):  # (the same two-in-a-row rule as the total's)
            now = kinds.get(kind, 0)
            self._highest_by_kind[kind] = max(self._highest_by_kind.get(kind, 0), now)
            self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0), min(self._last_by_kind.get(kind, 0), now))
        self._last_by_kind = kinds
        return total

    def _run(self, interval: float) -> None:
        last = 0
        while not self._stop.is_set():
            total = self._sample()
            # a peak counts once two samples in a row reach it: a child the JVM or Python is
            # spawning shares its parent's memory until it execs, and its RSS reads as the
            # parent's; caught in one sample, it counted Spark's JVM twice (+1.1 to 1.8 GB in 4 of
            # 12 readers' runs of 2026-11-29, against a sampler of the same processes beside it)
            self.peak = max(self.peak, min(last, total))
            last = total
            self._stop.wait(interval)

    def __enter__(self) -> "PeakRss":
        self._cpu_start = self._cpu()
        self._thread.start()
        self._started = time.monotonic()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.seconds = time.monotonic() - self._started  # (the window's: what ran inside the with)
        # the tree's CPU at the end less at the start, both without the processes left out by then
        # (a process that exited meanwhile counts in its parent's children_* at the end, if reaped)
        end = self._cpu()
        self.cpu_seconds = sum(end.values()) - sum(cpu for pid, cpu in self._cpu_start.items()
                                                   if pid not in self._excluded)
        self._stop.set()
        self._thread.join()
        if self._samples < 2:  # (too short a window for two samples in a row: the highest of one more)
            self._sample()
            self.peak = max(self.peak, self._highest)
            self.peak_by_kind = {k: max(self.peak_by_kind.get(k, 0), v) for k, v in self._highest_by_kind.items()}

    def figures(self, reads: int, seconds: float | None = None) -> dict[str, float]:
        """``seconds``: the window's own when not given."""
        seconds = self.seconds if seconds is None else seconds
        return {"reads": reads, "seconds": round(seconds, 2), "records_per_s": round(reads / seconds),
                "peak_rss_mb": round(self.peak / 2**20),
                "peak_rss_mb_by_kind": {k: round(v / 2**20) for k, v in sorted(self.peak_by_kind.items()) if v},
                "left_out": len(self._excluded),
                "cpu_s_per_m_reads": round(self.cpu_seconds / max(reads, 1) * 1e6, 2)}


def _kind(name: str) -> str:
    """What a process of the sampled tree is: ``jvm`` (Spark's driver, a standalone cluster's daemons
    and executors), ``python`` (this process, Spark's Python workers) or ``other``."""
    if name == "java":
        return "jvm"
    return "python" if name.startswith("python") or name == "vigil" else "other"


BENCH_WRITERS = 3  # idempotent writers pre-filling side by side, and one transactional writer
TXN_SIZE = 100  # records per transaction of the pre-fill's transactional writer
PREFILL_LEAD = 0.002  # how far ahead of the pre-fill's slowest writer (in shares of their records) the others may be
PREFILL_SLACK = 2 * TXN_SIZE  # and by how many records more (so the slowest can always write its next step)


def prefill_writers(cfg: Config, records: int) -> list[tuple[WriterConfig, int]]:
    """The pre-fill: :data:`BENCH_WRITERS` idempotent writers and one transactional writer, the
    canary's own writers at full speed, interleaving in the log as real ones do. The transactional
    writer writes the share of records the default composition gives it (the configured writers'
    rates: 40 of 240 by default), in transactions of :data:`TXN_SIZE` records (the default 4 would
    make the pre-fill slow), aborting as configured; the others split the rest."""
    txn = next((w for w in cfg.writers if w.transactional), None)
    plain = next((w for w in cfg.writers if not w.transactional), None)
    total_rate = sum(w.rate for w in cfg.writers) or 1.0
    txn_records = round(records * txn.rate / total_rate) if txn is not None else 0
    base = plain or WriterConfig(name="idempotent")
    out = [(base.model_copy(update={"name": f"bench-{i}", "rate": 0.0}), (records - txn_records) // BENCH_WRITERS
            + (1 if i < (records - txn_records) % BENCH_WRITERS else 0)) for i in range(BENCH_WRITERS)]
    if txn is not None:
        out.append((txn.model_copy(update={"name": "bench-txn", "rate": 0.0, "transaction": txn.transaction.model_copy(
            update={"size": TXN_SIZE})}), txn_records))
    return out


def side_by_side(threads: list[WriterThread], records: int) -> Callable[[], int]:
    """How many of its ``records`` a pre-fill writer may have planned by now: as far as the slowest of
    ``threads`` (all of them, once the list is complete) got through its own share, and a little
    more. The transactional writer is several times slower per record than the idempotent ones:
    unpaced, they finished first and it wrote the last tenth of the topic alone, so the ledger's
    entries (mostly its transactions') were bunched at the end, unlike a canary's, whose writers
    write side by side at their rates throughout."""
    def allowed() -> int:
        going = [t.writer.planned / t.max_records for t in threads if t.max_records and t.error is None]
        slowest = min(going, default=1.0)  # (a writer that failed holds no one back: the pre-fill stops)
        return int(records * (slowest + PREFILL_LEAD)) + PREFILL_SLACK

    return allowed


def prefill(cfg: Config, records: int, progress: Callable[[str], None]) -> int:
    """Fill the canary topic with ``records`` canary records (and their ledger) once: the canary's
    own writers (:func:`prefill_writers`) side by side, at full speed."""
    topics = prepare_topics(cfg)
    probe = clients.consumer(cfg, "read_uncommitted", group="vigil-bench")
    have = sum(probe.get_watermark_offsets(TopicPartition(cfg.canary.name, p), timeout=10)[1]
               for p in range(topics.canary.partitions))
    probe.close()
    if have >= records:
        progress(f"{cfg.canary.name} already holds {have} offsets")
        return have
    stop = threading.Event()
    shares = [(w, n) for w, n in prefill_writers(cfg, records) if n]
    threads: list[WriterThread] = []
    for w, n in shares:
        writer = open_writer(cfg, w, topics, instance_id=f"{cfg.resolved_instance_id()}-{cfg.canary.name}-{w.name}")
        threads.append(WriterThread(writer, stop, max_records=n, allowed=side_by_side(threads, n)))
    started = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(2.0)
        if any(t.error is not None for t in threads):
            stop.set()  # the others would wait for it: they stop, and the failure is raised below
        done = sum(t.writer.planned for t in threads)
        progress(f"prefill: {done}/{records} records ({done / (time.monotonic() - started):,.0f}/s)")
    failed = [t for t in threads if t.error is not None]
    if failed:
        raise RuntimeError(f"prefill writer {failed[0].writer.cfg.name} failed: {failed[0].error}") from failed[0].error
    return sum(t.writer.planned for t in threads)


def release_memory(spark: Any) -> None:
    """Before each reader: Spark's driver JVM collects its garbage in full (G1 then returns the heap
    it no longer needs) and this process returns what it freed (Python's allocator and Arrow's), so
    that a reader's peak RSS is its own and not partly the heap the readers before it grew. All
    readers run in one JVM (warm), whose RSS otherwise only grows: measured at 50M reads, Spark's
    JVM read 1,260 MB after the warm-up, 1,269 in (b), 1,539 in (b') — the warm-up's own work again —
    and 1,966 in (c). Local mode only: with ``--standalone`` the executors' JVMs keep their heaps
    from one reader to the next (and a driver started with -XX:+DisableExplicitGC ignores it)."""
    import ctypes
    import gc

    import pyarrow as pa

    spark.sparkContext._jvm.java.lang.System.gc()
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # (not glibc: what Python freed stays with the allocator)


def fetch_all(spark: Any, cfg: Config, checkpoint: Path) -> dict[str, int]:
    """Every record of the topic through the checker's fetch, the rows handed to this process and
    dropped (the warm-up, and (b'): module docstring): ``rows``, the Kafka rows they stand for (a run
    decoded in the JVM or by the executors counts its records), and ``driver_rows``, the rows this
    process received."""
    from monitor.watch import spark as spark_job
    from monitor.watch.executor import rows_read

    fetched = {"rows": 0, "driver_rows": 0}

    def fetch(df: Any, _batch_id: int) -> None:
        table = df.toArrow()
        fetched["rows"] += rows_read(table)
        fetched["driver_rows"] += table.num_rows

    q = (spark_job.fetched_sources(spark, cfg).writeStream.foreachBatch(fetch)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    return fetched


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


def local_cluster_pids(cfg: Config) -> Callable[[], set[int]]:
    """The local Kafka cluster's brokers and link proxy, which :class:`PeakRss` leaves out (the bench
    may have started them: then they are its children); nothing for a configured cluster."""
    if not cfg.embedded:
        return set
    from monitor.cluster.local_cluster import LocalCluster

    cluster = LocalCluster(cfg.cluster)

    def pids() -> set[int]:
        found = [cluster.proxy_pid(), *(cluster.node_pid(n.node_id) for n in cluster.layout.nodes)]
        return {pid for pid in found if pid is not None}
    return pids


def run_bench(cfg: Config, records: int, which: tuple[str, ...], progress: Callable[[str], None],
              standalone: int = 0, warmup: bool = True) -> BenchResult:
    """``standalone``: run (b) and (c) on a Spark standalone cluster of that many workers started
    for the bench (their JVMs and executors count in RSS and CPU); ``warmup``: the untimed pass
    first (module docstring)."""
    from monitor.watch import spark as spark_job
    from monitor.watch.runtime import WatchRuntime
    from monitor.watch.standalone import StandaloneSpark

    prefill(cfg, records, progress)
    partitions = cfg.canary.partitions
    result = BenchResult(records, partitions)
    brokers = local_cluster_pids(cfg)
    if "bare" in which:
        progress("(a) bare confluent-kafka consumer, both isolation levels")
        with PeakRss(exclude=brokers) as rss:
            n = bare_consumer(cfg, partitions)
        result.figures["bare_consumer"] = rss.figures(n)
    if not {"spark", "checker", "tws"} & set(which):
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

        def reader(what: str) -> PeakRss:
            """One reader of the bench: said, its memory its own (:func:`release_memory`), measured."""
            progress(what)
            release_memory(spark)
            return PeakRss(extra=extra, exclude=brokers)

        spark.sparkContext.setLogLevel("ERROR")
        # the no-op's rows are summed from recentProgress, which keeps the last 100 triggers by
        # default: a run of more (50M reads at maxOffsetsPerTrigger) counted only the last 100
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(NOOP_PROGRESS_KEPT))
        if warmup:
            progress("warm-up: one untimed pass over the topic through the checker's fetch")
            t = time.monotonic()
            result.figures["warmup"] = {**fetch_all(spark, cfg, tmp / "warmup"),
                                        "seconds": round(time.monotonic() - t, 2)}
        if "spark" in which:
            with reader("(b) Spark no-op query over both isolation levels") as rss:
                q = (spark_job.union_of_sources(spark, cfg, with_ledger=False).writeStream.format("noop")
                     .option("checkpointLocation", str(tmp / "noop")).trigger(availableNow=True).start())
                q.awaitTermination()
            progress_kept = q.recentProgress
            if len(progress_kept) >= NOOP_PROGRESS_KEPT:
                raise RuntimeError(f"the no-op query ran {len(progress_kept)}+ triggers: its rows cannot be summed")
            n = sum(p["numInputRows"] for p in progress_kept)
            result.figures["spark_noop"] = rss.figures(n)
            with reader("(b') the checker's fetch alone: its query's rows handed to this process, "
                        "nothing checked") as rss:
                fetched = fetch_all(spark, cfg, tmp / "fetch")
            result.figures["fetch_only"] = {**rss.figures(n), **fetched}
        if "checker" in which:
            checker_cfg = cfg.model_copy(update={"watch": cfg.watch.model_copy(update={
                "checkpoint_dir": str(tmp / "checker")}), "metrics": cfg.metrics.model_copy(update={"port": 0})})
            runtime = WatchRuntime(checker_cfg, progress)
            runtime.evidence.path = tmp / "evidence.jsonl"
            with reader("(c) the full checker") as rss:
                q = spark_job.start_query(spark, checker_cfg, runtime.handle_batch, name="vigil-bench-checker",
                                          available_now=True)
                q.awaitTermination()
                runtime.catch_up()  # the last batch applied (watch.overlap_check): counted in the time
                runtime.release_held_ledger(at_end=True)  # (the last batch may look cut short)
            if runtime.unloadable is not None:
                raise runtime.unloadable
            ck = runtime.state.checker
            n = sum(ck.records_checked.values())
            result.figures["checker"] = {
                **rss.figures(n), "state_mb": round(runtime.state_bytes / 2**20, 3),
                "state_mb_peak": round(runtime.state_bytes_peak / 2**20, 3),  # the largest saved during the run
                "ledger_held_peak": runtime.ledger_held_peak,  # ledger rows held beside the state, at most
                "violations": sum(ck.counts.values()), "batches": runtime.state.batches,
                "reads_per_row": round(n / max(runtime.rows_in, 1), 1),  # what the executors' runs saved the driver
                "batch_seconds": {k: round(v, 1) for k, v in sorted(runtime.batch_seconds.items())},
            }
        if "tws" in which:
            from monitor.bench_tws import run_per_partition

            with reader("(d) per-partition state on the executors (transformWithStateInPandas, "
                        "a part of the checks)") as rss:
                found = run_per_partition(spark, cfg, tmp / "tws")
            result.figures["per_partition_state"] = {**rss.figures(found["reads"]), **found}
    finally:
        if spark is not None:
            spark.stop()
        cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return result
