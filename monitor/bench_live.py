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
  every counter of the drill's row moved by what the drill table says, polled every 50 ms.

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


def run_live(cfg: Config, rate: float, drills: int, warmup_s: float, progress: Callable[[str], None]) -> dict[str, Any]:
    from monitor.canary.runner import prepare_topics
    from monitor.drills import run_drill

    tmp = Path(tempfile.mkdtemp(prefix="vigil-bench-live-"))
    port = free_port()
    scale = rate / max(sum(w.rate for w in cfg.writers), 1e-9)
    # its own topics: named after the time and its directory, so two runs never share (and delete) one
    name = f"vigil-bench-live-{int(time.time())}-{tmp.name.rsplit('-', 1)[-1].lower()}"
    live = cfg.model_copy(update={
        "state_dir": str(tmp / "state"),
        "canary": cfg.canary.model_copy(update={"name": name}),
        "metrics": cfg.metrics.model_copy(update={"port": port, "bind": "127.0.0.1"}),
        "writers": [w.model_copy(update={"rate": w.rate * scale}) for w in cfg.writers],
    })
    own = own_application_canaries(live.canary.name)
    live = live.model_copy(update={"ledger": cfg.ledger.model_copy(update={"topic": f"{live.canary.name}-ledger"}),
                                   "groups": cfg.groups.model_copy(update=own["groups"]),
                                   "eos": cfg.eos.model_copy(update=own["eos"])})
    result: dict[str, Any] = {"rate": rate, "writers": {w.name: round(w.rate, 1) for w in live.writers},
                              "topic": live.canary.name}
    proc: subprocess.Popen | None = None
    failed = True  # until the run is measured and vigil run stopped cleanly: then its topics and directory go
    try:
        path = tmp / "vigil.yaml"
        write_document(live, path)
        topics = prepare_topics(live)
        with (tmp / "run.out").open("w") as out_file, (tmp / "run.err").open("w") as err_file:
            proc = subprocess.Popen([sys.executable, "-m", "monitor", "run", "--json", "--config", str(path)],
                                    stdout=out_file, stderr=err_file)
        if not first_batch(port, proc, 180) and proc.poll() is not None:
            raise RuntimeError(f"vigil run exited: {(tmp / 'run.err').read_text()[-2000:]}")
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
            run_drill(live, topics, kind, 1, i % topics.canary.partitions)
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
        e2e = {}
        a, b = _e2e(first), _e2e(last)
        for iso in b:
            counts = [y - x for x, y in zip(a[iso], b[iso])]
            e2e[iso] = {"records": int(sum(counts)),
                        "p50_s": _round(percentile(E2E_BUCKETS, counts, 0.5)),
                        "p99_s": _round(percentile(E2E_BUCKETS, counts, 0.99))}
        result.update({"produce_to_checked": e2e, "time_split": _time_split(first, last),
                       "state_mb": round(last.get(("vigil_state_bytes", ()), 0.0) / 2**20, 3),
                       "detection": _summary(detections), "missed_drills": missed,
                       "detection_by_kind": {k: _summary(v) for k, v in by_kind.items()}})
        failed = missed > 0
    finally:
        if proc is not None:
            rc = child_run.stop(proc, 120, dump_to=tmp / "threads.txt")
            if rc == -9:
                progress(f"vigil run did not stop within 120 s: its threads are in {tmp / 'run.err'} and "
                         f"{tmp / 'threads.txt'}")
            failed = failed or rc != 0
        if failed:  # kept for a look: the run's config, state and output, and the topics they name
            progress(f"the live bench did not end cleanly: vigil run's config, state and output are kept in {tmp}, "
                     f"its topics ({live.canary.name}*) in the cluster")
        else:
            delete_run_topics(live, progress)
            shutil.rmtree(tmp, ignore_errors=True)
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
