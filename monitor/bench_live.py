"""``vigil bench --live``: how fast the running monitor sees what is written, under load.

Starts ``vigil run`` (the default composition of writers from the config, each writer's rate
scaled so that together they write ``rate`` records/s) on its own topics and metrics port, lets
it warm up, then:

- **produce → checked latency**: the ``vigil_e2e_latency_seconds`` histogram's growth over the
  measured window, per isolation level, as p50/p99 (linear within a bucket; a percentile beyond
  the last finite bucket is reported as that bound);
- **detection latency**: ``drills`` drills, one at a time, kinds in turn
  (:data:`LIVE_DRILLS`), partitions in turn: from the moment the drill returned — its records
  acknowledged, i.e. readable, and its ledger entries durable — to the moment ``/metrics`` shows
  every counter of the drill's row moved by what the drill table says, polled every 50 ms;
- **the floor** (:func:`run_floor`, ``vigil bench --live --floor S``): then the same writers at the
  same rate under ``vigil run --no-check`` — every batch fetched, decoded, written ahead and handed
  over as the checker's are, nothing judged — and its produce → read latency over ``S`` seconds:
  what Spark and the rest of the pipeline cost on this machine under this load, below any checker.

Everything runs on this machine beside the cluster; the figures are medians of what one run
saw, not a promise. At the end its topics are deleted (a run of a few minutes at 2,000 writes/s
leaves tens of MB per topic, and every run has its own), and its directory (its config, state
and ``vigil run``'s output) removed — kept, and named, when the run failed.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from monitor import child_run
from monitor.child_run import first_batch, free_port, scrape
from monitor.config import Config, own_application_canaries, write_document
from monitor.drill_table import expected_counts
from monitor.metrics import E2E_BUCKETS

LIVE_DRILLS = ("duplicate", "reorder", "offset_mismatch", "aborted_read", "partial_txn", "lost_write")
POLL_S = 0.05


def percentile(bounds: tuple[float, ...], counts: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of a histogram: ``counts`` per bucket (not cumulative, +Inf last),
    linear within the bucket that holds it; None for an empty histogram."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    lower = 0.0
    for upper, n in zip((*bounds, float("inf")), counts):
        if n and seen + n >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - seen) / n
        seen += n
        lower = upper
    return lower


def _violations(samples: dict) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for (name, labels), v in samples.items():
        if name == "vigil_violations_total":
            d = dict(labels)
            out[(d["invariant"], d["isolation"])] = out.get((d["invariant"], d["isolation"]), 0) + v
    return out


def _e2e(samples: dict) -> dict[str, list[float]]:
    """Per isolation level, the per-bucket counts (not cumulative, +Inf last); buckets matched by
    the value of their ``le`` label, however it is spelled."""
    out: dict[str, list[float]] = {}
    for iso in ("read_committed", "read_uncommitted"):
        by_bound = {float(dict(labels)["le"]): v for (name, labels), v in samples.items()
                    if name == "vigil_e2e_latency_seconds_bucket" and dict(labels).get("isolation") == iso}
        cumulative = [by_bound.get(float(le), 0.0) for le in (*E2E_BUCKETS, float("inf"))]
        out[iso] = [b - a for a, b in zip([0.0, *cumulative[:-1]], cumulative)]
    return out


def _time_split(first: dict, last: dict) -> dict[str, Any]:
    """Where the live time went between two scrapes: the mean seconds per trigger of each part of
    Spark's triggers, and per micro-batch of each phase of the batch handler."""
    def grew(name: str, label: str | None = None) -> dict[str, float]:
        out: dict[str, float] = {}
        for (n, labels), v in last.items():
            if n == name:
                key = dict(labels).get(label, "") if label else ""
                out[key] = v - first.get((n, labels), 0.0)
        return out

    triggers = grew("vigil_triggers_total").get("", 0.0)
    batches = grew("vigil_batches_total").get("", 0.0)
    return {"triggers": int(triggers), "batches": int(batches),
            "per_trigger_s": {k: round(v / triggers, 3) for k, v in grew("vigil_trigger_seconds_total", "part").items()}
            if triggers else {},
            "per_batch_s": {k: round(v / batches, 3) for k, v in grew("vigil_batch_seconds_total", "phase").items()}
            if batches else {}}


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"n": len(values), "p50_s": round(statistics.median(values), 3), "p99_s": round(p99, 3),
            "max_s": round(ordered[-1], 3)}


class LiveRun:
    """One `vigil run` of the bench on topics and a directory of its own (:meth:`start`), its
    ``/metrics`` on ``port``; :meth:`finish` stops it, then deletes its topics and directory, or
    keeps and names them when the run failed."""

    def __init__(self, cfg: Config, rate: float, progress: Callable[[str], None]) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="vigil-bench-live-"))
        self.port = free_port()
        self.progress = progress
        scale = rate / max(sum(w.rate for w in cfg.writers), 1e-9)
        # its own topics: named after the time and its directory, so two runs never share (and delete) one
        name = f"vigil-bench-live-{int(time.time())}-{self.tmp.name.rsplit('-', 1)[-1].lower()}"
        live = cfg.model_copy(update={
            "state_dir": str(self.tmp / "state"),
            "canary": cfg.canary.model_copy(update={"name": name}),
            "metrics": cfg.metrics.model_copy(update={"port": self.port, "bind": "127.0.0.1"}),
            "writers": [w.model_copy(update={"rate": w.rate * scale}) for w in cfg.writers],
        })
        own = own_application_canaries(live.canary.name)
        self.cfg = live.model_copy(update={
            "ledger": cfg.ledger.model_copy(update={"topic": f"{live.canary.name}-ledger"}),
            "groups": cfg.groups.model_copy(update=own["groups"]), "eos": cfg.eos.model_copy(update=own["eos"])})
        self.proc: subprocess.Popen | None = None
        self.topics: Any = None

    def start(self, *args: str) -> None:
        """`vigil run --json` (and ``args``) on its topics, returned once it completed a micro-batch."""
        from monitor.canary.runner import prepare_topics

        path = self.tmp / "vigil.yaml"
        write_document(self.cfg, path)
        self.topics = prepare_topics(self.cfg)
        with (self.tmp / "run.out").open("w") as out_file, (self.tmp / "run.err").open("w") as err_file:
            self.proc = subprocess.Popen([sys.executable, "-m", "monitor", "run", "--json", *args,
                                          "--config", str(path)], stdout=out_file, stderr=err_file)
        if not first_batch(self.port, self.proc, 180) and self.proc.poll() is not None:
            raise RuntimeError(f"vigil run exited: {(self.tmp / 'run.err').read_text()[-2000:]}")

    def finish(self, failed: bool) -> None:
        if self.proc is not None:
            rc = child_run.stop(self.proc, 120, dump_to=self.tmp / "threads.txt")
            if rc == -9:
                self.progress(f"vigil run did not stop within 120 s: its threads are in {self.tmp / 'run.err'} and "
                              f"{self.tmp / 'threads.txt'}")
            failed = failed or rc != 0
        if failed:  # kept for a look: the run's config, state and output, and the topics they name
            self.progress(f"the live bench did not end cleanly: vigil run's config, state and output are kept in "
                          f"{self.tmp}, its topics ({self.cfg.canary.name}*) in the cluster")
        else:
            delete_run_topics(self.cfg, self.progress)
            shutil.rmtree(self.tmp, ignore_errors=True)


def _percentiles(first: dict, last: dict) -> dict[str, dict[str, Any]]:
    """Per isolation level, the e2e histogram's growth between two scrapes as records, p50 and p99."""
    out = {}
    a, b = _e2e(first), _e2e(last)
    for iso in b:
        counts = [y - x for x, y in zip(a[iso], b[iso])]
        out[iso] = {"records": int(sum(counts)), "p50_s": _round(percentile(E2E_BUCKETS, counts, 0.5)),
                    "p99_s": _round(percentile(E2E_BUCKETS, counts, 0.99))}
    return out


def run_live(cfg: Config, rate: float, drills: int, warmup_s: float, progress: Callable[[str], None]) -> dict[str, Any]:
    from monitor.drills import run_drill

    run = LiveRun(cfg, rate, progress)
    live = run.cfg
    result: dict[str, Any] = {"rate": rate, "writers": {w.name: round(w.rate, 1) for w in live.writers},
                              "topic": live.canary.name}
    port = run.port
    failed = True  # until the run is measured and vigil run stopped cleanly: then its topics and directory go
    try:
        run.start()
        progress(f"vigil run is checking; warming up {warmup_s:.0f} s at {rate:,.0f} writes/s")
        time.sleep(warmup_s)
        first = scrape(port)
        detections: list[float] = []
        by_kind: dict[str, list[float]] = {}
        missed = 0
        for i in range(drills):
            kind = LIVE_DRILLS[i % len(LIVE_DRILLS)]
            want = {(inv.value, iso.value): n for (inv, iso), n in expected_counts(kind, 1).items()}
            before = _violations(scrape(port))
            run_drill(live, run.topics, kind, 1, i % run.topics.canary.partitions)
            done = time.monotonic()
            seen = None
            while time.monotonic() - done < 30:
                now = _violations(scrape(port))
                if all(now.get(k, 0) - before.get(k, 0) >= n for k, n in want.items()):
                    seen = time.monotonic() - done
                    break
                time.sleep(POLL_S)
            if seen is None:
                missed += 1
            else:
                detections.append(seen)
                by_kind.setdefault(kind, []).append(seen)
            progress(f"drill {i + 1}/{drills} {kind}: "
                     + ("not seen in 30 s" if seen is None else f"on /metrics after {seen:.2f} s"))
        last = scrape(port)
        result.update({"produce_to_checked": _percentiles(first, last), "time_split": _time_split(first, last),
                       "state_mb": round(last.get(("vigil_state_bytes", ()), 0.0) / 2**20, 3),
                       "detection": _summary(detections), "missed_drills": missed,
                       "detection_by_kind": {k: _summary(v) for k, v in by_kind.items()}})
        failed = missed > 0
    finally:
        run.finish(failed)
    return result


def run_floor(cfg: Config, rate: float, warmup_s: float, measure_s: float, progress: Callable[[str], None]
              ) -> dict[str, Any]:
    """The pipeline's own floor: the same composition at the same rate, `vigil run --no-check` (every
    batch fetched, decoded and handed over as the checker's are, nothing judged), its produce → read
    latency over ``measure_s`` after ``warmup_s``, and where a trigger's time went."""
    run = LiveRun(cfg, rate, progress)
    failed = True
    try:
        run.start("--no-check")
        progress(f"vigil run --no-check is reading; warming up {warmup_s:.0f} s, then measuring {measure_s:.0f} s "
                 f"at {rate:,.0f} writes/s")
        time.sleep(warmup_s)
        first = scrape(run.port)
        time.sleep(measure_s)
        last = scrape(run.port)
        found = sum(_violations(last).values())
        checked = sum(v for (name, _labels), v in last.items() if name == "vigil_records_checked_total")
        result = {"topic": run.cfg.canary.name, "seconds": measure_s, "produce_to_read": _percentiles(first, last),
                  "time_split": _time_split(first, last), "violations": int(found), "records_checked": int(checked)}
        read = sum(f["records"] for f in result["produce_to_read"].values())
        wrong = [what for what, bad in (("no latency counted", not read), (f"{found:.0f} violations", found),
                                        (f"{checked:.0f} records checked", checked)) if bad]
        if wrong:  # (nothing is judged, and something is read: otherwise a bug, kept for a look)
            progress(f"the floor's run went wrong: {', '.join(wrong)}")
        failed = bool(wrong)
    finally:
        run.finish(failed)
    return result


def delete_run_topics(live: Config, progress: Callable[[str], None]) -> None:
    """Delete the topics of a live bench run (its canary, ledger and application canaries' topics:
    named after its canary, never another run's). What cannot be deleted is said, not raised."""
    from monitor import clients

    wanted = [(live.canary.name, False), (live.groups.observation_topic, False), (live.eos.output_topic, False),
              (live.ledger.topic, True)]
    for ledger in (False, True):
        names = [name for name, on_ledger in wanted if on_ledger == ledger]
        try:
            admin = clients.admin(live, ledger=ledger)
            present = [n for n in names if n in admin.list_topics(timeout=10).topics]
            futures = admin.delete_topics(present, operation_timeout=30) if present else {}
        except Exception as exc:  # noqa: BLE001 - the figures stand; the leftover is reported
            progress(f"could not delete the live bench's topics {', '.join(names)}: {exc}")
            continue
        for name, future in futures.items():
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001
                progress(f"could not delete the live bench's topic {name}: {exc}")


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
