"""The watch runtime: durable checker state and the batch handler, between Spark and /metrics.

Order at start: load the durable state, publish its counters, *then* open ``/metrics`` — a
restarted monitor never shows a counter lower than before. Each micro-batch is applied under
one lock, its evidence written, the state saved, and only then its counts published. The
prober's liveness verdicts take the same path between batches. The query itself is run and
restarted by :mod:`monitor.watch.supervisor`; names and IDs come from
:mod:`monitor.watch.topics`; the exported figures from :mod:`monitor.watch.snapshot`.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from invariants.model import Isolation, Read, Settings, Violation
from monitor import client_config, clients
from monitor.config import Config
from monitor.client_errors import ERRORS, classify_java
from monitor.metrics import ClientErrorsCollector, WatchCollector, WatchSnapshot
from monitor.credentials import CredentialWatch
from monitor.tls_expiry import CertificateExpiryCollector, CertificateWatch
from monitor.watch import http
from monitor.watch import state as state_store
from monitor.watch import write_ahead
from monitor.watch import ledger_hold as held_ledger
from monitor.watch.batch import BatchStats, EosInput, apply_batch, apply_ledger_rows, latencies_only
from monitor.watch.eos_feed import EosFeed
from monitor.watch.offset_log import batch_ends, drop_unrunnable_batch
from monitor.watch.executor import decode_table
from monitor.watch.evidence import EvidenceLog
from monitor.watch.prober import Prober
from monitor.watch.refetch import Refetcher
from monitor.watch.snapshot import build_snapshot
from monitor.watch.topics import TopicDirectory, topics_by_src

MAX_REFETCHES_PER_ROUND = 8
REREAD_DRAIN_S = 30.0  # at the end of a run, the longest wait for the re-reads verdicts wait for
REFETCH_RETRY_S = 5.0  # a partition whose re-read failed is tried again after this (the others meanwhile)


@dataclass
class QueryStatus:
    running: bool = False
    last_error: str | None = None
    started_at: float = 0.0


class WatchRuntime:
    def __init__(self, cfg: Config, progress: Callable[[str], None] = lambda _m: None, check: bool = True) -> None:
        self.cfg = cfg
        self.check = check  # False (`vigil run --no-check`): batches fetched and handed over, nothing judged

        def say(message: str) -> None:  # a full volume may hold stderr too: saying must not fail
            try:
                progress(message)
            except OSError:
                pass

        self.progress = say
        self._served: CollectorRegistry | None = None  # the registry /metrics serves, once served
        self.settings = Settings(cfg.watch.settle_offsets, cfg.watch.horizon_offsets)
        self.dir = cfg.checkpoint_dir()
        self.lock = threading.RLock()
        self.watched = (cfg.canary.name,)
        self.owner = state_store.own(self.dir)  # one monitor per state: `vigil state rebuild` waits for none
        try:
            # a state read unchecked is never checked on (nor the reverse)
            state_store.claim_for(self.dir, cfg.spark_checkpoint_dir(), check)
        except state_store.StateError:
            self.owner.release()
            raise
        self.unloadable: state_store.StateError | None = None  # why a revert failed (_revert): nothing more saved
        self.state = self._load()
        self.eos_feed = EosFeed(cfg) if cfg.eos.enabled else None
        # counted in memory but not yet saved (the state's volume full): saved with the next save,
        # and kept across a revert to the saved state
        self.unsaved_liveness: list[Violation] = []
        self.unsaved_restarts = 0
        self.unsaved_rewinds: list[tuple[str, int, int, int]] = []  # high watermarks gone backwards
        self.save_failures: Counter[str] = Counter()  # errno name -> saves that failed
        self.save_error: str | None = None  # the last save's error, until one succeeds
        self._said_save_error = 0.0
        state_path = self.dir / state_store.STATE_FILE
        self.state_bytes = state_path.stat().st_size if state_path.exists() else 0
        self.state_bytes_peak = self.state_bytes  # the largest state saved since start (the bench reports it)
        self.ledger_held_peak = self.state.ledger_hold.held()  # the most ledger rows held since start (the bench)
        self._release_wanted = False  # a trigger read everything there was: release what is held
        self.batch_seconds: Counter[str] = Counter()  # phase of a micro-batch -> seconds since start
        self.rows_in = 0  # rows the micro-batches brought to the driver (runs, single records, latency rows...)
        self.trigger_seconds: Counter[str] = Counter()  # part of Spark's triggers -> seconds since start
        self.triggers = 0
        self.evidence = EvidenceLog(cfg.evidence_path(), self._evidence_producer(), cfg.watch.evidence.topic,
                                    clients.refusals("evidence", cfg))
        self.stop = threading.Event()
        self.prober = Prober(cfg, self.record_liveness, self.stop, on_round=self.after_probe, say=say)
        self.prober.prime(self.state.open_episodes)
        self.certificates = CertificateWatch(cfg, self.stop)
        self.credentials = CredentialWatch(cfg, self.stop)
        self.topics = TopicDirectory(cfg, self.prober, lambda tid: self.state.checker.topics.name_of(tid))
        self.refetcher = Refetcher(cfg, stop=self.stop)
        # reads below Spark's first read of a recreated topic, under the batch lock (_fill): consumers of
        # their own, since the re-fetch thread holds its own while it waits for that lock
        self.filler = Refetcher(cfg, stop=self.stop)
        self._refetching = threading.Lock()
        self._refetch_wake = threading.Event()
        self._refetch_thread: threading.Thread | None = None
        self._refetch_failed: dict[tuple[str, int], float] = {}  # (topic ID, partition) -> retry after (monotonic)
        self.status = QueryStatus()
        self.last_batch = self.state.last_batch_at  # freshness continues from before a restart
        self.caught_up_at = 0.0
        self.query_runs = threading.Event()  # set once the query completed a trigger (with or without data)
        self._applier: threading.Thread | None = None  # applying the last batch handed (watch.overlap_check)
        self.apply_error: str | None = None  # why a batch Spark committed is not applied yet, until it is
        self._apply_failed_at = 0.0
        self.last_progress: dict[Any, float] = {}
        self._frontiers: dict[Any, int] = {}
        self.published = self._snapshot()

    def _load(self) -> state_store.WatchState:
        state = state_store.load(self.dir, self.settings, self.watched)
        # the EOS pipeline the checker judges (eos.enabled): the one reading the canary topic
        state.checker.eos_source = self.cfg.canary.name if self.cfg.eos.enabled else ""
        # the group canary the checker judges (groups.enabled): the one reading the canary topic
        state.checker.group_source = self.cfg.canary.name if self.cfg.groups.enabled else ""
        state.checker.groups.stall_ms = self.cfg.groups.stall_ms
        state.ledger_hold.lead_us = int(self.cfg.watch.ledger_lead_s * 1e6)
        return state

    def _revert(self) -> None:
        """Back to the state saved last (a half-applied or unsaved batch dropped), with what was
        counted since and not saved yet. If the saved state cannot be loaded (a held ledger file gone
        while the watch ran), the state in memory is half applied: it is never saved again (:meth:`_save`),
        and the watch must be restarted, where loading names what is missing."""
        try:
            state = self._load()
        except state_store.StateError as exc:
            self.unloadable = exc
            self.stop.set()  # the watch stops and fails with it (run_watch)
            raise
        self.unloadable = None  # (the state in memory is the saved one again)
        self.state = state
        for v in self.unsaved_liveness:
            self.state.liveness[(v.invariant, v.isolation)] += 1
        self.state.restarts += self.unsaved_restarts
        for tid, p, new, old in self.unsaved_rewinds:
            self.state.checker.log_went_back(tid, p, new, old)

    def _save_failed(self, exc: state_store.StateSaveError) -> None:
        self.save_failures[exc.reason] += 1
        now = time.monotonic()
        if exc.reason != self.save_error or now - self._said_save_error >= 60:  # a line a minute at most
            self._said_save_error = now
            self.progress(f"checker state not saved: {exc}")
        self.save_error = exc.reason
        self.published = self._snapshot()

    def _evidence_producer(self) -> Any:
        """A producer for the optional evidence topic (created compacted by `vigil watch`)."""
        if not self.cfg.watch.evidence.topic:
            return None

        return clients.producer(client_config.evidence_producer(self.cfg), "evidence", self.cfg)

    # -- the batch handler -----------------------------------------------------------------

    def handle_batch(self, df: Any, batch_id: int) -> None:
        """Spark's ``foreachBatch``: fetch and decode the batch, then apply it — here, or (with
        ``watch.overlap_check``) in the applier thread once written ahead, so that Spark commits it
        and fetches the next meanwhile (:mod:`monitor.watch.write_ahead` says why that stays
        exactly once). Whatever was written ahead and not applied yet goes first."""
        if batch_id <= self.state.batch_id:
            return  # replayed after a restart: already applied and saved
        started = time.monotonic()
        batch = self._fetch(df, batch_id)
        fetched = time.monotonic()  # (before the lock: an applier at the batch before holds it)
        with self.lock:
            self.batch_seconds["fetch"] += fetched - started
        self.catch_up()  # the batch before (or a failure of its applier raised here), and a crash's
        if batch_id <= self.state.batch_id:
            return  # written ahead before a crash, and just applied from there
        if not self.cfg.watch.overlap_check:
            self._apply(batch)
            return
        waited = time.monotonic()
        try:
            write_ahead.write(self.dir, batch)
        except state_store.StateSaveError as exc:  # the batch fails (Spark has not committed it)
            with self.lock:
                self._save_failed(exc)
            raise
        written = time.monotonic()
        with self.lock:  # (what the overlap costs the trigger: the batch before still applying, the file)
            self.batch_seconds["wait"] += waited - fetched
            self.batch_seconds["write_ahead"] += written - waited
        self._applier = threading.Thread(target=self._apply_in_thread, args=(batch,), name="vigil-apply",
                                         daemon=True)
        self._applier.start()

    def _fetch(self, df: Any, batch_id: int) -> write_ahead.PendingBatch:
        table = df.toArrow()  # runs the Spark job; a hung fetch must not block the prober's records
        if "kind" not in table.column_names:  # watch.decode_on: the driver decodes what the executors did not
            table = decode_table(table, topics_by_src(self.cfg))
        # the EOS pipeline: where the output reader stands, then the group's offsets and the output's ends
        eos = None if self.eos_feed is None else EosInput(self.eos_feed.positions_at(batch_id), self.eos_feed.sample())
        # the group canary: where the read_committed reader of the canary stands after this batch
        group_reader_at = (batch_ends(self.cfg.spark_checkpoint_dir(), batch_id, self.cfg.canary.name)
                           if self.cfg.groups.enabled else None)
        return write_ahead.PendingBatch(batch_id, table, eos, group_reader_at)

    def catch_up(self) -> None:
        """Wait for the applier; then apply, in order, what was written ahead above the saved state
        (the batch of an applier that failed, or of a monitor that stopped before applying it).
        Raises as a failed batch does: the query is restarted and this is tried again."""
        applier = self._applier
        if applier is not None:
            applier.join()
            self._applier = None
        self._apply_pending(write_ahead.pending_ids(self.dir, self.state.batch_id))

    def _apply_pending(self, ids: list[int]) -> None:
        """Apply the batches written ahead under ``ids``, in order, from their files."""
        for i in ids:
            self._apply(write_ahead.read(write_ahead.path_of(self.dir, i)))

    def applying(self) -> bool:
        """A batch Spark committed is not applied yet (the applier at it, or written ahead)."""
        applier = self._applier
        return (applier is not None and applier.is_alive()) or bool(
            write_ahead.pending_ids(self.dir, self.state.batch_id))

    def apply_written_ahead(self) -> None:
        """At the start: the batches fetched before the monitor stopped and not saved yet are
        applied now, before Spark's next (a failed save is said and tried again before that one)."""
        write_ahead.drop_through(self.dir, self.state.batch_id, temporaries=True)
        pending = write_ahead.pending_ids(self.dir, self.state.batch_id)
        if pending:
            self.progress(f"applying {len(pending)} batch(es) fetched before the restart and not checked yet "
                          f"({pending[0]}..{pending[-1]})")
        try:
            self.catch_up()
        except state_store.StateSaveError:
            pass  # said by _save_failed

    def finish_applying(self) -> None:
        """At the end: the last batch applied (what cannot be is applied at the next start)."""
        try:
            self.catch_up()
        except Exception as exc:  # noqa: BLE001 - kept on disk, applied at the next start
            self.progress(f"a fetched batch is left to the next start: {type(exc).__name__}: {exc}")

    def taken_id(self) -> int:
        """The last batch the checker took: saved, or written ahead to be applied."""
        return max([self.state.batch_id, *write_ahead.pending_ids(self.dir, self.state.batch_id)])

    def _apply_in_thread(self, batch: write_ahead.PendingBatch) -> None:
        self._try_applying(lambda: self._apply(batch), batch.batch_id)

    def _try_applying(self, apply: Callable[[], None], batch_id: int) -> None:
        """Apply a batch Spark has committed; a failure is kept (not ready meanwhile) and said, and
        the batch is applied again from its file: before Spark's next batch, and by the re-fetch
        thread every ``REFETCH_RETRY_S`` while none comes."""
        try:
            apply()
        except Exception as exc:  # noqa: BLE001 - applied again from its file
            self.apply_error = f"batch {batch_id} not applied: {type(exc).__name__}: {exc}"[:500]
            self._apply_failed_at = time.monotonic()
            if not isinstance(exc, state_store.StateSaveError):  # (that one is said by _save_failed)
                self.progress(f"{self.apply_error}; tried again from {write_ahead.path_of(self.dir, batch_id)}")

    def retry_written_ahead(self) -> None:
        """Between batches (the re-fetch thread): a batch whose applier failed is tried again from
        its file, so that it does not wait for Spark's next batch — none may come."""
        if self.apply_error is None or time.monotonic() - self._apply_failed_at < REFETCH_RETRY_S:
            return
        applier = self._applier
        if applier is not None and applier.is_alive():
            return
        pending = write_ahead.pending_ids(self.dir, self.state.batch_id)
        if pending:
            self._try_applying(lambda: self._apply_pending(pending), pending[0])

    def _apply(self, batch: write_ahead.PendingBatch) -> None:
        """Apply one fetched batch under the batch lock, save it, and only then publish its counts."""
        batch_id, table = batch.batch_id, batch.table
        with self.lock:
            if batch_id <= self.state.batch_id:
                return
            applying = time.monotonic()
            try:
                if self.check:
                    self._note_topic()  # the canary topic's ID now, and below its log start nothing is judged
                    ledger = self._ledger_due(batch_id, table)
                    violations, stats = apply_batch(self.state.checker, table, self.topics.fresh_id, eos=batch.eos,
                                                    group_reader_at=batch.group_reader_at, ledger=ledger,
                                                    fill=self._fill)
                else:  # --no-check: the pipeline's own latency, nothing judged
                    violations, stats = [], latencies_only(table)
                checked = time.monotonic()
                st = self.state
                st.malformed.update(stats.malformed)
                for iso, counts in stats.e2e_counts.items():
                    st.add_e2e(iso, counts, stats.e2e_sum[iso])
                st.batches += 1
                st.batch_id = batch_id
                st.last_batch_at = time.time()
                self._persist(batch_id, violations)
                self.rows_in += table.num_rows
                for phase, secs in (("check", checked - applying), ("persist", time.monotonic() - checked)):
                    self.batch_seconds[phase] += secs
            except state_store.StateSaveError as exc:
                # the batch fails (Spark has not committed it, or it waits written ahead): applied
                # again once it can be saved; /metrics keeps what was saved
                self._revert()
                self._save_failed(exc)
                raise
            except BaseException:
                self._revert()  # drop the half-applied batch
                raise
            write_ahead.drop_through(self.dir, batch_id)
            if not write_ahead.pending_ids(self.dir, batch_id):
                self.apply_error = None
            now = time.time()
            self.last_batch = now
            for key, frontier in self.state.checker.frontiers().items():
                if self._frontiers.get(key) != frontier:
                    self._frontiers[key] = frontier
                    self.last_progress[key] = now
            self.published = self._snapshot()
        self.wake_refetches()

    def _ledger_due(self, batch_id: int, table: Any) -> list[tuple[int, bytes | None]]:
        """The ledger rows to apply before this batch's reads (:mod:`invariants.ledger_hold`); those
        it leaves held are written beside the state first."""
        try:
            drained = not held_ledger.cut_short(table, self.cfg.watch.max_offsets_per_trigger)
            released = held_ledger.take(self.dir, self.state.ledger_hold, batch_id, table, drained)
        except OSError as exc:  # (writing the rows held: reading them back fails as ValueError)
            raise state_store.StateSaveError(held_ledger.path_of(self.dir, batch_id), exc) from None
        self.ledger_held_peak = max(self.ledger_held_peak, self.state.ledger_hold.held())
        return released

    def release_held_ledger(self, at_end: bool = False) -> None:
        """Between batches: what is held is applied once Spark said a trigger read everything there
        was (the last batch of a catch-up may not look like it) and that batch is applied; ``at_end``:
        now (the query read everything: ``availableNow``, or a wait for the catch-up's end)."""
        with self.lock:
            hold = self.state.ledger_hold
            if not hold.held():
                self._release_wanted = False  # (a later catch-up holds again)
                return
            if not (at_end or self._release_wanted) or self.applying():
                return
            self._release_wanted = False
            stats = BatchStats()
            ck = self.state.checker
            try:
                ck.begin_batch()
                apply_ledger_rows(ck, held_ledger.values_of(self.dir, hold.release_all(self.state.batch_id)), stats)
                violations = ck.settle()
                self.state.malformed.update(stats.malformed)
                self._persist(self.state.batch_id, violations)
            except state_store.StateSaveError as exc:
                self._revert()  # released again at the next round
                self._save_failed(exc)
                return
            except Exception:
                self._revert()
                raise
            self.published = self._snapshot()
        self.wake_refetches()

    def _note_topic(self) -> None:
        """What the prober's metadata says of the canary topic (under the batch lock): its ID now
        (an ID it replaced is gone), whether it has been missing long enough to be gone, and its
        partitions' log starts."""
        view = self.prober.snapshot()
        ck = self.state.checker
        name = self.cfg.canary.name
        if view.missing_since and time.time() - view.missing_since >= self.cfg.watch.topic_gone_after_s:
            ck.topic_vanished(name)
        elif view.topic_id:
            ck.note_topic(name, view.topic_id)
            for p, ends in view.ends.items():
                if ends.log_start > 0:
                    ck.set_log_start(view.topic_id, p, ends.log_start)

    def after_probe(self) -> None:
        """After each prober round: the topic's ID, high watermarks that went backwards, then what
        is to be read again."""
        rewinds = self.prober.take_rewinds()
        if not self.check:
            return
        with self.lock:
            self._note_topic()
            for tid, p, new, old in rewinds:
                self.state.checker.log_went_back(tid, p, new, old)
                self.unsaved_rewinds.append((tid, p, new, old))  # the prober hands each once
        self.wake_refetches()

    def eos_ticks(self, every_s: float = 2.0) -> None:
        """The EOS pipeline judged between batches, every ``every_s``, in a thread of its own (its
        sample's requests must not hold up the prober's rounds)."""
        while not self.stop.wait(every_s):
            self.eos_tick()

    def eos_tick(self) -> None:
        """The EOS pipeline judged between batches: with its output read to the end no batch comes,
        yet the last commits are still to be judged. Saved only when it found something."""
        if self.eos_feed is None or self.state.batch_id < 0 or not self.check:
            return
        sample = self.eos_feed.sample()
        with self.lock:
            violations = self.state.checker.eos_tick(self.eos_feed.positions_at(self.state.batch_id), sample)
            if not violations:
                return
            try:
                self._persist(self.state.batch_id, violations)
            except state_store.StateSaveError as exc:
                self._revert()  # found again by the next batch or tick, from the saved state
                self._save_failed(exc)
                return
            self.published = self._snapshot()

    def start_refetching(self) -> None:
        """Read again in a thread of its own from now on: Spark's next trigger does not wait for
        the re-reads of the last batch (and a slow broker holds up neither Spark nor the prober)."""
        if self._refetch_thread is None:
            self._refetch_thread = threading.Thread(target=self._refetch_loop, name="vigil-refetch", daemon=True)
            self._refetch_thread.start()

    def stop_refetching(self, timeout_s: float = 10.0) -> None:
        """After ``stop`` was set: the re-fetch thread ends (a read under way stops at its next poll),
        then the re-fetcher's consumers are closed — never while a read still uses them."""
        self._refetch_wake.set()
        if self._refetch_thread is not None:
            self._refetch_thread.join(timeout_s)
        if self._refetching.acquire(timeout=timeout_s):  # no read under way (wait_caught_up reads too)
            try:
                self.refetcher.close()
            finally:
                self._refetching.release()
        else:
            self.progress("a re-fetch did not end in time: its consumers are left to the process's exit")
        if self.lock.acquire(timeout=timeout_s):  # (the filler reads under the batch lock)
            try:
                self.filler.close()
            finally:
                self.lock.release()

    def _fill(self, iso: Isolation, name: str, topic_id: str, partition: int, lo: int, hi: int) -> list[Read] | None:
        """``[lo, hi)`` of ``name``'s partition read directly for one reader, under the batch lock
        (:meth:`invariants.topic_lifecycle.TopicLifecycle._fill_below`: what Spark skipped below its
        first read of a recreated topic); None unless read up to ``hi`` and the name still points at
        ``topic_id`` after the read (uncached, as a re-fetch checks). A part would leave a gap the
        checker would take for offsets without records, so it is all or nothing; what retention
        deleted below the log start is not asked for."""
        try:
            if self.topics.fresh_id(name, max_age_s=0.0) != topic_id:
                return None
            got = self.filler.read(iso, name, partition, lo, hi)
            if got.hi < hi or self.topics.fresh_id(name, max_age_s=0.0) != topic_id:
                self.progress(f"{name}[{partition}] {lo}-{hi} ({iso.value}), below Spark's first read of the "
                              f"recreated topic, could not be read whole: it expires unread")
                return None
        except Exception as exc:  # noqa: BLE001 - a broker away: what lies below expires unread, as before
            self.progress(f"{name}[{partition}] {lo}-{hi} ({iso.value}), below Spark's first read of the recreated "
                          f"topic, not read: {type(exc).__name__}: {exc}")
            return None
        self.progress(f"{name}[{partition}] {got.lo}-{hi} ({iso.value}): Spark resumed the recreated topic above "
                      f"its log start; read directly ({len(got.reads)} records)")
        return got.reads

    def wake_refetches(self) -> None:
        """A batch or a prober round may have left ranges to read again: read them now (in the
        re-fetch thread once it runs, else here)."""
        if self._refetch_thread is None:
            self.release_held_ledger()
            self.service_refetches()
        else:
            self._refetch_wake.set()

    def _refetch_loop(self) -> None:
        while not self.stop.is_set():
            self._refetch_wake.wait(1.0)
            self._refetch_wake.clear()
            if not self.stop.is_set():
                self.retry_written_ahead()
                self.release_held_ledger()
                self.service_refetches()

    def service_refetches(self) -> None:
        """Read again, directly, what the checker asks for; apply it like a batch (outside the
        batch lock while reading, so a slow broker holds up neither Spark nor the prober)."""
        if not self._refetching.acquire(blocking=False):
            return  # the other thread is at it
        started = time.monotonic()
        try:
            with self.lock:  # the checker's state (its topic names too) only under the batch lock
                wanted = self.state.checker.refetch_wanted()
                names = {w.topic_id: self.topics.topic_name_of(w.topic_id) for w in wanted}
            results, tried = [], 0
            for w in wanted:
                if tried >= MAX_REFETCHES_PER_ROUND:
                    break
                if self._refetch_failed.get((w.topic_id, w.partition), 0.0) > time.monotonic():
                    continue  # its re-read just failed: it waits its turn, the other partitions go first
                tried += 1
                name = names[w.topic_id]
                if name and self.topics.fresh_id(name) != w.topic_id:
                    continue  # the name points at another topic now: that ID cannot be read again
                if name and not self.stop.is_set():
                    try:
                        got = self.refetcher.read_both(name, w.partition, w.lo, w.hi)
                        self._refetch_failed.pop((w.topic_id, w.partition), None)
                        # read by name: if the topic was deleted (and created again) while it was read,
                        # what was read may be another topic's, at the same offsets: dropped. A name
                        # that still points at the ID after the read read nothing else (an ID is never
                        # reused), so this look-up is not cached. (The checker also refuses a re-read
                        # whose canary records were meant for another ID, by content:
                        # Checker.apply_refetched; this catches what content cannot tell, such as
                        # records not the canary's.)
                        if self.topics.fresh_id(name, max_age_s=0.0) == w.topic_id:
                            results.append((w, got))
                    except Exception as exc:  # noqa: BLE001 - this partition's leader away: it stays
                        # wanted, and the other partitions' re-reads go on without it
                        self._refetch_failed[(w.topic_id, w.partition)] = time.monotonic() + REFETCH_RETRY_S
                        self.progress(f"re-fetch of {name}[{w.partition}] {w.lo}-{w.hi} failed: "
                                      f"{type(exc).__name__}: {exc}")
            if not results or self.stop.is_set():
                return  # stopping: what was read stays wanted, and is read again after a restart
            with self.lock:
                ck = self.state.checker
                try:
                    for w, by_iso in results:
                        for iso, got in by_iso.items():
                            if got.hi > got.lo:
                                ck.apply_refetched(iso, w.topic_id, w.partition, got.reads, (got.lo, got.hi))
                    violations = ck.settle()
                    self.state.refetches += len(results)
                    self._persist(self.state.batch_id, violations)
                except state_store.StateSaveError as exc:  # not saved: not applied (the ranges stay wanted)
                    self._revert()
                    self._save_failed(exc)
                    return
                except Exception:
                    self._revert()  # half applied: dropped, the ranges stay wanted
                    raise
                self.batch_seconds["refetch"] += time.monotonic() - started
                self.published = self._snapshot()
        except Exception as exc:  # a broker away: the ranges stay wanted, the next round tries again
            self.progress(f"re-fetch failed: {type(exc).__name__}: {exc}")
        finally:
            self._refetching.release()

    def record_liveness(self, violations: list[Violation]) -> None:
        if not self.check:
            return  # (--no-check judges nothing)
        with self.lock:
            for v in violations:
                self.state.liveness[(v.invariant, v.isolation)] += 1
            try:
                self._persist(self.state.batch_id, violations)
            except state_store.StateSaveError as exc:  # counted, exported and evidenced once saved
                self.unsaved_liveness.extend(violations)
                self._save_failed(exc)
                return
            self.published = self._snapshot()

    def _persist(self, batch_id: int, violations: list[Violation]) -> None:
        """Write the evidence of ``violations`` (and of liveness counted but not saved yet), then
        save the state; on failure the state in memory says the evidence written before."""
        self._refuse_half_applied()  # (before its evidence is written)
        st = self.state
        st.open_episodes = self._probe_view().open_episodes
        todo = self.unsaved_liveness + violations
        before = st.evidence_bytes
        if todo:
            try:
                st.evidence_bytes = self.evidence.write(batch_id, todo, before, st.incidents,
                                                        self.topics.topic_name_of, self.topics.leader_of)
            except OSError as exc:
                raise state_store.StateSaveError(self.evidence.path, exc) from None
        try:
            self._save()
        except state_store.StateSaveError:
            st.evidence_bytes = before  # the lines written are cut off by the next write
            raise

    def _refuse_half_applied(self) -> None:
        if self.unloadable is not None:
            raise state_store.StateError(f"the checker state in memory is half applied and the state saved cannot be "
                                         f"loaded ({self.unloadable}): nothing more is saved; restart the watch")

    def _save(self) -> None:
        self._refuse_half_applied()
        self.state_bytes = state_store.save(self.dir, self.state)
        self.state_bytes_peak = max(self.state_bytes_peak, self.state_bytes)
        held_ledger.prune(self.dir, self.state.ledger_hold, self.state.batch_id)
        self.unsaved_liveness.clear()
        self.unsaved_restarts = 0
        self.unsaved_rewinds.clear()
        self.save_error = None

    # -- the supervisor's hooks ------------------------------------------------------------

    def query_started(self) -> None:
        self.status = QueryStatus(True, None, time.time())

    def query_failed(self, error: str) -> None:
        self.status = QueryStatus(False, error[:500], 0.0)
        self._replan_on_gone_partitions()
        refused = classify_java(error)
        if refused is not None:  # Spark's source refused by the brokers: counted and said like any client's
            ledger = self.cfg.ledger.kafka is not None and self.cfg.ledger.topic in error  # its own cluster's
            settings = "ledger.kafka.security" if ledger else "kafka.security"
            user = (self.cfg.ledger_kafka() if ledger else self.cfg.kafka).security.sasl_username
            ERRORS.report_kind("spark", refused[0], refused[1], settings, user)

    def _replan_on_gone_partitions(self) -> None:
        """A failed query whose planned batch names canary partitions the topic no longer has
        (recreated with fewer) would fail the same way at every restart: that batch is planned
        again (:func:`monitor.watch.offset_log.drop_unrunnable_batch`)."""
        view = self.prober.snapshot()
        if not view.topic_id or view.missing_since or not view.partitions:
            return
        with self.lock:
            dropped = drop_unrunnable_batch(self.cfg.spark_checkpoint_dir(), self.cfg.canary.name,
                                            set(range(view.partitions)), self.taken_id())
        if dropped is not None:
            self.progress(f"batch {dropped} was planned on partitions {self.cfg.canary.name} no longer has "
                          f"(it has {view.partitions}): planned again")

    def count_restart(self) -> None:
        with self.lock:
            self.state.restarts += 1
            try:
                self._persist(self.state.batch_id, [])  # with the evidence of liveness not saved yet
            except state_store.StateSaveError as exc:  # counted once saved; the supervisor goes on
                self.unsaved_restarts += 1
                self._save_failed(exc)
                return
            self.published = self._snapshot()

    # -- metrics ---------------------------------------------------------------------------

    def _snapshot(self) -> WatchSnapshot:
        st = self.state
        if self.unsaved_liveness or self.unsaved_restarts:  # exported once saved: never more than a restart shows
            st = copy.copy(st)
            st.liveness = st.liveness - Counter((v.invariant, v.isolation) for v in self.unsaved_liveness)
            st.restarts -= self.unsaved_restarts
        return build_snapshot(st, self._probe_view(), unseen_after_s=self.cfg.watch.unseen_after_s,
                              last_progress=self.last_progress, last_batch=self.last_batch,
                              up=self.status.running, state_bytes=self.state_bytes,
                              batch_seconds=dict(self.batch_seconds), save_failures=dict(self.save_failures),
                              trigger_seconds=dict(self.trigger_seconds), triggers=self.triggers)

    def _probe_view(self) -> Any:
        """The prober's view as the state and /metrics take it: with ``--no-check`` without the liveness
        episodes its rounds still judge (their verdicts are dropped: :meth:`record_liveness`)."""
        view = self.prober.snapshot()
        if not self.check:
            view.open_stalls, view.open_episodes = {}, {}
        return view

    def refresh(self) -> None:
        """Recompute the gauges between batches (unseen grows while the query is stuck)."""
        if self.lock.acquire(timeout=0.5):
            try:
                self.published = self._snapshot()
            finally:
                self.lock.release()

    def serve_metrics(self, registry: CollectorRegistry | None = None) -> CollectorRegistry:
        """Serve /metrics (once: a second call returns the registry already served)."""
        if self._served is not None:
            return self._served
        registry = self._served = registry or CollectorRegistry()
        registry.register(WatchCollector(lambda: self.published))
        registry.register(ClientErrorsCollector(ERRORS.snapshot))
        registry.register(CertificateExpiryCollector(self.certificates))
        registry.register(self.credentials)
        if self.cfg.metrics.port:
            http.serve(self.cfg.metrics.bind, self.cfg.metrics.port, registry, self.ready)
        return registry

    def ready(self) -> tuple[bool, str]:
        """Readiness: the query runs and its last trigger is recent."""
        age = time.time() - self.last_batch
        limit = max(60.0, 10 * self.cfg.watch.trigger_ms / 1000)
        if self.save_error:
            return False, f"checker state not saved ({self.save_error})"
        if self.apply_error:
            return False, self.apply_error
        if not self.status.running:
            return False, f"query not running ({self.status.last_error or 'starting'})"
        if age > limit:
            return False, f"stale: last trigger {age:.0f} s ago"
        return True, "ready"

    # -- progress --------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """What the checker found so far, as `vigil run --json` and `vigil watch --json` print it."""
        snap = self.published
        return {"records_checked": {i.value: n for i, n in snap.records_checked.items()},
                "violations": {f"{inv.value}/{iso.value}/{dur.value}": n
                               for (inv, iso, dur), n in snap.violations.items() if n},
                "aborted_records_read": snap.aborted_allowed, "expired_unread": snap.expired_unread,
                "batches": snap.batches, "restarts": snap.restarts,
                "ledger_held_peak": self.ledger_held_peak}  # (rows held beside the state at most, this process)

    def wait_caught_up(self, timeout_s: float, reread_s: float = REREAD_DRAIN_S) -> bool:
        """Wait until a trigger that started after this call found nothing left to read, then until
        what the checker asked to be read again was read (a loss, a reorder or a torn transaction is
        counted only after that), for at most ``reread_s`` more: a partition that cannot be read
        leaves those verdicts undecided."""
        begin = time.time()
        deadline = time.monotonic() + timeout_s
        caught_up = None
        while time.monotonic() < deadline and not self.stop.is_set():
            if self.caught_up_at > begin and not self.applying():
                caught_up = time.monotonic() if caught_up is None else caught_up
                self.release_held_ledger(at_end=True)  # (the last batch may not look like it)
                with self.lock:
                    wanted = self.state.checker.refetch_wanted()
                if not wanted:
                    return True
                if time.monotonic() - caught_up >= reread_s:
                    self.progress(f"stopping with {len(wanted)} range(s) not read again: the verdicts resting on "
                                  f"them stay undecided ({', '.join(f'{w.partition}:{w.lo}-{w.hi}' for w in wanted[:5])})")
                    return True
                self.service_refetches()
            time.sleep(0.25)
        return False

    def on_progress(self, caught_up_trigger_start: float | None = None, durations_ms: dict | None = None) -> None:
        """A trigger finished; ``caught_up_trigger_start``: it read all that was there when it began;
        ``durations_ms``: what its parts took, as Spark reports them."""
        if durations_ms:
            self.triggers += 1
            for part, ms in durations_ms.items():
                self.trigger_seconds[part] += ms / 1000
        self.last_batch = time.time()
        self.query_runs.set()
        if caught_up_trigger_start is not None:
            self.caught_up_at = max(self.caught_up_at, caught_up_trigger_start)
            if self.state.ledger_hold.held():
                self._release_wanted = True
                self.wake_refetches()
