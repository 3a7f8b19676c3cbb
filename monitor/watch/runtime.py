"""The watch runtime: durable checker state, the batch handler, the prober, the supervisor.

Order at start: load the durable state, publish its counters, *then* open ``/metrics`` — a
restarted monitor never shows a counter lower than before. Each micro-batch is applied under
one lock, its evidence written, the state saved, and only then its counts published. The
supervisor restarts a failed query from its checkpoint with exponential backoff and counts
the restarts; ``/metrics`` keeps answering throughout (``vigil_up`` says whether the query runs,
``vigil_last_batch_timestamp_seconds`` how fresh the monitor is).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from invariants.catalog import series
from invariants.model import RC, Settings, Violation
from monitor import clients
from monitor.config import Config
from monitor.metrics import WatchCollector, WatchSnapshot
from monitor.watch import http
from monitor.watch import state as state_store
from monitor.watch.batch import apply_batch
from monitor.watch.evidence import EvidenceLog
from monitor.watch.prober import Prober


@dataclass
class QueryStatus:
    running: bool = False
    last_error: str | None = None
    started_at: float = 0.0


class WatchRuntime:
    def __init__(self, cfg: Config, progress: Callable[[str], None] = lambda _m: None) -> None:
        self.cfg = cfg
        self.progress = progress
        self.settings = Settings(cfg.watch.settle_offsets, cfg.watch.horizon_offsets)
        self.dir = cfg.checkpoint_dir()
        self.lock = threading.RLock()
        self.state = state_store.load(self.dir, self.settings)
        self.state_bytes = (self.dir / state_store.STATE_FILE).stat().st_size if (
            self.dir / state_store.STATE_FILE).exists() else 0
        self.evidence = EvidenceLog(cfg.evidence_path(), self._evidence_producer(), cfg.watch.evidence.topic)
        self.stop = threading.Event()
        self.prober = Prober(cfg, self.record_liveness, self.stop)
        self.prober.prime(self.state.open_episodes)
        self.status = QueryStatus()
        self.last_batch = self.state.last_batch_at  # freshness continues from before a restart
        self.caught_up_at = 0.0
        self.last_progress: dict[tuple, float] = {}
        self._frontiers: dict[tuple, int] = {}
        self._topic_ids: dict[str, str] = {}
        self._admin = None
        self.published = self._snapshot()

    def _evidence_producer(self) -> Any:
        """A producer for the optional evidence topic (created compacted by `vigil watch`)."""
        if not self.cfg.watch.evidence.topic:
            return None
        from confluent_kafka import Producer

        conf = self.cfg.kafka.librdkafka(clients.canary_bootstrap(self.cfg))
        conf.update({"acks": "all", "enable.idempotence": True, "linger.ms": 5, "client.id": "vigil-evidence"})
        return Producer(conf)

    # -- identities ------------------------------------------------------------------------

    def topic_id_of(self, name: str) -> str | None:
        view = self.prober.snapshot()
        if name == self.cfg.canary.name and view.topic_id:
            return view.topic_id
        if name not in self._topic_ids:
            if self._admin is None:
                self._admin = clients.admin(self.cfg.kafka, clients.canary_bootstrap(self.cfg))
            info = clients.describe_topic(self._admin, name, timeout=10)
            if info is None:
                return None
            self._topic_ids[name] = info.topic_id
        return self._topic_ids[name]

    def topic_name_of(self, topic_id: str) -> str:
        view = self.prober.snapshot()
        if topic_id == view.topic_id:
            return self.cfg.canary.name
        return next((n for n, t in self._topic_ids.items() if t == topic_id), "")

    def leader_of(self, topic_id: str, partition: int) -> int | None:
        view = self.prober.snapshot()
        return view.leaders.get(partition) if topic_id == view.topic_id else None

    # -- the batch handler -----------------------------------------------------------------

    def handle_batch(self, df: Any, batch_id: int) -> None:
        if batch_id <= self.state.batch_id:
            return  # replayed after a restart: already applied and saved
        table = df.toArrow()  # runs the Spark job; a hung fetch must not block the prober's records
        with self.lock:
            if batch_id <= self.state.batch_id:
                return
            try:
                view = self.prober.snapshot()  # below the log start nothing is judged (retention)
                for p, ends in view.ends.items():
                    if view.topic_id and ends.log_start > 0:
                        self.state.checker.set_log_start(view.topic_id, p, ends.log_start)
                violations, stats = apply_batch(self.state.checker, table, self.topic_id_of)
                st = self.state
                st.malformed.update(stats.malformed)
                for iso, counts in stats.e2e_counts.items():
                    st.add_e2e(iso, counts, stats.e2e_sum[iso])
                st.batches += 1
                st.batch_id = batch_id
                st.last_batch_at = time.time()
                self._persist(batch_id, violations)
            except BaseException:
                self.state = state_store.load(self.dir, self.settings)  # drop the half-applied batch
                raise
            now = time.time()
            self.last_batch = now
            for key, frontier in self.state.checker.frontiers().items():
                if self._frontiers.get(key) != frontier:
                    self._frontiers[key] = frontier
                    self.last_progress[key] = now
            self.published = self._snapshot()

    def record_liveness(self, violations: list[Violation]) -> None:
        with self.lock:
            for v in violations:
                self.state.liveness[(v.invariant, v.isolation)] += 1
            self._persist(self.state.batch_id, violations)
            self.published = self._snapshot()

    def _persist(self, batch_id: int, violations: list[Violation]) -> None:
        st = self.state
        st.open_episodes = self.prober.snapshot().open_keys
        if violations:
            st.evidence_bytes = self.evidence.write(batch_id, violations, st.evidence_bytes, st.incidents,
                                                    self.topic_name_of, self.leader_of)
        self.state_bytes = state_store.save(self.dir, st)

    # -- metrics ---------------------------------------------------------------------------

    def _snapshot(self) -> WatchSnapshot:
        st, ck = self.state, self.state.checker
        violations = {k: ck.counts.get(k, 0) + st.liveness.get(k, 0) for k in series()}
        view = self.prober.snapshot()
        lag, progress = {}, {}
        for (iso, tid, p), frontier in ck.frontiers().items():
            if tid != view.topic_id:
                continue
            ends = view.ends.get(p)
            if ends is not None:
                end = ends.lso if iso is RC else ends.high_watermark
                lag[(iso, p)] = max(0, end - frontier)
            if (iso, tid, p) in self.last_progress:
                progress[(iso, p)] = self.last_progress[(iso, tid, p)]
        led = {b: 0 for b in view.brokers}
        for leader in view.leaders.values():
            if leader >= 0:
                led[leader] = led.get(leader, 0) + 1
        return WatchSnapshot(
            violations=violations, records_checked=dict(ck.records_checked), expired_unread=ck.expired_unread,
            malformed=dict(st.malformed), aborted_allowed=ck.aborted_allowed,
            unseen=ck.unseen(int(time.time() * 1e6), self.cfg.watch.unseen_after_s),
            e2e_counts={k: v.tolist() for k, v in st.e2e_counts.items()}, e2e_sum=dict(st.e2e_sum),
            lag=lag, last_progress=progress, last_batch=self.last_batch, up=int(self.status.running),
            restarts=st.restarts, led=led, stalls_open=dict(view.open_stalls), state_bytes=self.state_bytes,
            batches=st.batches,
        )

    def refresh(self) -> None:
        """Recompute the gauges between batches (unseen grows while the query is stuck)."""
        if self.lock.acquire(timeout=0.5):
            try:
                self.published = self._snapshot()
            finally:
                self.lock.release()

    def serve_metrics(self, registry: CollectorRegistry | None = None) -> CollectorRegistry:
        registry = registry or CollectorRegistry()
        registry.register(WatchCollector(lambda: self.published))
        if self.cfg.metrics.port:
            http.serve(self.cfg.metrics.bind, self.cfg.metrics.port, registry, self.ready)
        return registry

    def ready(self) -> tuple[bool, str]:
        """Readiness: the query runs and its last trigger is recent."""
        age = time.time() - self.last_batch
        limit = max(60.0, 10 * self.cfg.watch.trigger_ms / 1000)
        if not self.status.running:
            return False, f"query not running ({self.status.last_error or 'starting'})"
        if age > limit:
            return False, f"stale: last trigger {age:.0f} s ago"
        return True, "ready"

    # -- running ---------------------------------------------------------------------------

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Wait until a trigger that started after this call found nothing left to read."""
        begin = time.time()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stop.is_set():
            if self.caught_up_at > begin:
                return True
            time.sleep(0.25)
        return False

    def on_progress(self, caught_up_trigger_start: float | None = None) -> None:
        """A trigger finished; ``caught_up_trigger_start``: it read all that was there when it began."""
        self.last_batch = time.time()
        if caught_up_trigger_start is not None:
            self.caught_up_at = max(self.caught_up_at, caught_up_trigger_start)

    def supervise(self, start_query: Callable[[], Any], deadline: float | None = None,
                  on_tick: Callable[[], None] = lambda: None) -> None:
        """Run the query until stop (or the deadline), restarting it with backoff when it fails."""
        backoff = 1.0
        while not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                query = start_query()
            except Exception as exc:  # e.g. brokers away while planning: retry like a failure
                query, self.status.last_error = None, f"{type(exc).__name__}: {exc}"
            if query is not None:
                self.status = QueryStatus(True, None, time.time())
                while query.isActive and not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
                    query.awaitTermination(1)
                    self.refresh()
                    on_tick()
                    if time.time() - self.status.started_at > 60:
                        backoff = 1.0
                if query.isActive:
                    query.stop()
                    self.status.running = False
                    break
                exc = query.exception()
                self.status = QueryStatus(False, str(exc)[:500] if exc else "query stopped", 0.0)
            else:
                self.status.running = False
            with self.lock:
                self.state.restarts += 1
                self.state_bytes = state_store.save(self.dir, self.state)
                self.published = self._snapshot()
            self.progress(f"query failed ({(self.status.last_error or '')[:200]}); restarting in {backoff:.0f} s")
            waited = time.monotonic()
            while time.monotonic() - waited < backoff and not self.stop.is_set():
                self.stop.wait(0.5)
                self.refresh()
                on_tick()
            backoff = min(backoff * 2, self.cfg.watch.restart_backoff_max_s)
        self.status.running = False
        self.refresh()
