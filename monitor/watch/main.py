"""Wiring of the watch job: state, metrics endpoint, Spark, prober, supervisor — in that order."""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import datetime
from typing import Callable

from prometheus_client import CollectorRegistry
from pyspark.sql.streaming import StreamingQueryListener

from monitor.config import Config
from monitor.signals import install_stop_handlers
from monitor.watch.runtime import WatchRuntime
from monitor.watch.supervisor import supervise


def _started(stamp: str) -> float:
    """A Spark progress timestamp (ISO 8601, UTC) as unix seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class _Freshness(StreamingQueryListener):
    """Marks the monitor fresh on every trigger, with or without data.

    Spark hands it each trigger's progress as Spark's own JSON of it (one Py4J call):
    PySpark's events convert the progress field by field, a few hundred Py4J calls per trigger
    (each source's metrics are iterated over the gateway, every end of an iteration a Java exception
    converted), which took a fifth of a thread and the driver's JVM time beside it in the live bench."""

    def __init__(self, runtime: WatchRuntime) -> None:
        self.runtime = runtime
        self._java: object | None = None

    @property
    def _jlistener(self):  # what StreamingQueryManager.addListener registers (PySpark 4.3's contract)
        from pyspark import SparkContext

        if self._java is None:
            self._java = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressAsJson(self))
        return self._java

    def progressed(self, progress: dict) -> None:
        """A trigger's progress, as Spark's JSON of it (``StreamingQueryProgress.json``)."""
        caught_up = all(src.get("endOffset") == src.get("latestOffset") for src in progress.get("sources") or [])
        self.runtime.on_progress(_started(progress["timestamp"]) if caught_up else None,
                                 dict(progress.get("durationMs") or {}))

    def idle(self, timestamp: str) -> None:
        self.runtime.on_progress(_started(timestamp))

    def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802 (PySpark's event, where it calls this one)
        self.progressed(json.loads(event.progress.json))

    def onQueryIdle(self, event) -> None:  # noqa: N802
        self.idle(event.timestamp)

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass


class _ProgressAsJson:
    """The Python side of Spark's ``PythonStreamingQueryListener``, in place of PySpark's: it takes
    each progress as one JSON string (whose offsets are JSON values, not strings of JSON)."""

    def __init__(self, listener: _Freshness) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent) -> None:  # noqa: N802 (Spark's names)
        pass

    def onQueryProgress(self, jevent) -> None:  # noqa: N802
        self.listener.progressed(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent) -> None:  # noqa: N802
        self.listener.idle(jevent.timestamp())

    def onQueryTerminated(self, jevent) -> None:  # noqa: N802
        pass

    def onQueryExecutionStart(self, jevent) -> None:  # noqa: N802 (newer Sparks' interface has it; 4.3.0's not)
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def _same_sources_as_the_checkpoint(cfg: Config) -> None:
    """Spark resumes a query only over the sources its checkpoint has: switching ``eos.enabled`` or
    ``groups.enabled`` (one more source each) under an existing checkpoint would fail every restart
    of the query; renaming the canary or the ledger topic (``canary.name``, ``ledger.topic``) would
    have a batch Spark planned but did not commit read again from the old topic while its rows are
    named after the new one (a row's topic follows from its source, ``topics_by_src``), and the
    checker's state keeps the old topic's writes. Refused at once, with the way out."""
    from monitor.watch.state import StateError
    from monitor.watch.topics import topics_by_src

    offsets = cfg.spark_checkpoint_dir() / "offsets"
    logs = sorted((int(f.name), f) for f in offsets.iterdir() if f.name.isdigit()) if offsets.is_dir() else []
    if not logs:
        return
    try:
        lines = [line for line in logs[-1][1].read_text().splitlines()[2:] if line.strip()]
    except OSError:
        return
    topics = topics_by_src(cfg)
    for src, key in ((0, "canary.name"), (2, "ledger.topic")):
        read = _source_topic(lines[src]) if len(lines) > src else ""
        if read and read != topics[src]:
            raise StateError(f"{cfg.spark_checkpoint_dir()}: the Spark checkpoint reads topic {read} where this "
                             f"config's {key} is {topics[src]}: set it back, or start the checker afresh over what "
                             "the topics retain: `vigil state rebuild`")
    # the application canaries' sources follow the canary's two and the ledger's, by topic
    canaries = [topic for topic, on in ((cfg.eos.output_topic, cfg.eos.enabled),
                                        (cfg.groups.observation_topic, cfg.groups.enabled)) if on]
    had = [_source_topic(line) for line in lines[3:]]
    if len(lines) != 3 + len(canaries) or (all(had) and had != canaries):
        raise StateError(f"{cfg.spark_checkpoint_dir()}: the Spark checkpoint reads {len(lines)} sources"
                         f"{' (' + ', '.join(had) + ' after the canary and the ledger)' if any(had) else ''}, this "
                         f"config {3 + len(canaries)}{' (' + ', '.join(canaries) + ')' if canaries else ''}; "
                         f"eos.enabled is {str(cfg.eos.enabled).lower()}, groups.enabled is "
                         f"{str(cfg.groups.enabled).lower()} (their topics: eos.output_topic, "
                         "groups.observation_topic, by default named after canary.name): set them back, or start "
                         "the checker afresh over what the topics retain: `vigil state rebuild`")


def _source_topic(line: str) -> str:
    """The topic of one source's offsets in Spark's offset log ({"topic": {"partition": offset}});
    "" when the line says none."""
    try:
        offsets = json.loads(line)
    except ValueError:
        return ""
    return next(iter(offsets), "") if isinstance(offsets, dict) and len(offsets) == 1 else ""



def run_watch(cfg: Config, runtime: WatchRuntime, duration: float | None = None,
              progress: Callable[[str], None] = lambda _m: None, registry: CollectorRegistry | None = None,
              on_tick: Callable[[], None] = lambda: None) -> None:
    """Serve /metrics from the restored state first, then run the query until stop or ``duration``."""
    from monitor.watch import spark as spark_job  # pyspark is heavy: imported when used

    if runtime.state.batch_id >= 0 and not (cfg.spark_checkpoint_dir() / "offsets").is_dir():
        from monitor.watch.state import StateError

        raise StateError(f"{cfg.checkpoint_dir()}: checker state of batch {runtime.state.batch_id} but no Spark "
                         "checkpoint next to it; restore both, or rebuild the state from the evidence and the retained "
                         "logs: `vigil state rebuild`")
    _same_sources_as_the_checkpoint(cfg)
    runtime.serve_metrics(registry)
    if cfg.watch.evidence.topic:
        from monitor import clients

        clients.ensure_topic(clients.admin(cfg), cfg.watch.evidence.topic, 1, cfg.canary.replication_factor,
                             {"cleanup.policy": "compact"})
    runtime.prober.start()
    ticks = None
    if runtime.eos_feed is not None:
        ticks = threading.Thread(target=runtime.eos_ticks, name="vigil-eos-ticks", daemon=True)
        ticks.start()
    runtime.start_refetching()
    runtime.apply_written_ahead()  # what the last run fetched and did not apply, before Spark's next batch
    runtime.certificates.start()
    runtime.credentials.start()
    progress("starting Spark (the first batch takes a few seconds)")
    on_ctrl_c = signal.getsignal(signal.SIGINT)
    spark = spark_job.session(cfg, progress)
    if threading.current_thread() is threading.main_thread() and on_ctrl_c is not None:
        # PySpark's SparkContext takes Ctrl-C for itself (it cancels jobs, then raises
        # KeyboardInterrupt): given back, Ctrl-C stops in order (writers first, then the drain)
        signal.signal(signal.SIGINT, on_ctrl_c)
    spark.sparkContext.setLogLevel("ERROR")
    spark.streams.addListener(_Freshness(runtime))
    deadline = None if duration is None else time.monotonic() + duration
    try:
        supervise(runtime, lambda: spark_job.start_query(spark, cfg, runtime.handle_batch), deadline, on_tick)
    finally:
        runtime.stop.set()
        for q in spark.streams.active:
            q.stop()
        runtime.finish_applying()
        runtime.prober.join(10)
        runtime.stop_refetching()
        if ticks is not None:
            ticks.join(15)
        if runtime.eos_feed is not None:
            runtime.eos_feed.close()  # (waits for a sample in progress)
        spark.stop()
    if runtime.unloadable is not None:  # a batch failed and the saved state could not be loaded again
        raise runtime.unloadable


def watch(cfg: Config, duration: float | None = None, progress: Callable[[str], None] = lambda _m: None,
          on_start: Callable[[Config], None] = lambda _c: None, until_caught_up: bool = False) -> WatchRuntime:
    """`vigil watch`: topics, durable state, signal handling, then :func:`run_watch`.
    ``until_caught_up``: stop once a trigger found nothing left to read (check what is there, then stop)."""
    from monitor.canary.runner import prepare_topics_patiently

    runtime = WatchRuntime(cfg, progress)
    runtime.serve_metrics()  # from the start: a cluster that refuses the clients shows there
    install_stop_handlers(runtime.stop)
    if prepare_topics_patiently(cfg, runtime.stop, progress) is None:
        return runtime
    on_start(cfg)
    if until_caught_up:
        def stop_when_caught_up() -> None:
            if runtime.wait_caught_up(timeout_s=float("inf")):
                progress("caught up: stopping")
                runtime.stop.set()

        threading.Thread(target=stop_when_caught_up, name="vigil-caught-up", daemon=True).start()
    run_watch(cfg, runtime, duration, progress)
    return runtime
