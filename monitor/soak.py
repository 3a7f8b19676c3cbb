"""`vigil soak`: a long `vigil run` that must stay flat — what a canary that runs for weeks
without a restart has to show in an hour.

The run gets its own canary and ledger topics with short retention and small segments, so that
several retention cycles (segments rolled and deleted, log starts moving under the readers and the
ledger) happen within the run. Every ``interval`` it samples the `vigil run` process and its
children (the Spark JVM included): resident memory, open file descriptors and threads, the
checker's state file, the Spark checkpoint directory, records checked and violations from
``/metrics``.

**Verdict.** Failed on any violation; on a monitor that stopped checking (records checked did not
grow after the warm-up); and on growth: after the warm-up, the slope of each figure checked,
times the span it was measured over, must stay within a tolerance of its median —
:data:`TOLERANCE` (relative) or :data:`SLACK` (absolute, whichever is larger). The slope is the
Theil–Sen estimate (the median of the slopes between every two samples), not least squares: a
leak is a ramp, and both find it, but least squares also turns a spike near the end into growth —
CI's 5-minute soak failed on open file descriptors at 522 in 11 of 13 samples after the warm-up
and 874 in two (a burst that was gone 15 s later), fitted growth 69 against a limit of 26. A figure that
fills up to a bound (the checker's horizon, Spark's retained batches, the JVM's heap) must reach
it within the warm-up; pick ``warmup`` accordingly (``watch.horizon_offsets`` at the writers'
rate, 100 Spark batches at ``watch.trigger_ms``).

**Memory, by process.** Where PySpark runs Python workers (Python code on the executors: a
Spark cluster, or checking done there), the total resident memory (``rss``) steps up and down by
hundreds of MiB with how many it keeps — it starts them as tasks need them and ends idle ones —
and a slope through steps says nothing about a leak. So memory is judged on what lives for the
whole run — the monitor's own Python and the Spark JVM (``rss_steady``) — and on the largest Python
worker (``worker_rss``: a worker that leaks grows; reused workers live long enough to show it).
How many workers there are (``workers``) is bounded by Spark's task slots, and workers that were
never ended would show in fds and threads. ``rss`` and ``workers`` stay in the report and the
chart, and can still be checked (``--checks rss,workers``). The default `vigil run` judges in the
driver (``foreachBatch``) and has no Python workers: there ``rss_steady`` is ``rss``.

**Threads, but not Spark's bounded pools.** Spark's block manager runs two thread pools
(``block-manager-ask-thread-pool``, ``block-manager-storage-async-thread-pool``) that start a new
thread for every task until they hold 100 each, and end a thread after 60 s idle: with a batch a
second, the cleaning of each batch's broadcasts keeps them filling for minutes, to 100 each, and
no further. Measured with `vigil run` on the local cluster (thread names from
``/proc/<pid>/task/*/comm`` every 15 s): the Spark JVM went from 52 threads at 45 s to 262 at
165 s, all of the growth in those two pools, which then stayed at 94-100 and 74-80. Counted in
``threads`` they made CI's 5-minute soak fail (fitted growth 23, limit 18) while nothing leaked; so
``threads`` counts every thread but those two pools' and ``pool_threads`` counts theirs —
reported and charted, checked only when asked (``--checks pool_threads``), as ``workers`` is.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from invariants.catalog import CATALOG, Invariant, Severity
from monitor import child_run
from monitor.child_run import first_batch, free_port, scrape
from monitor.config import Config, own_application_canaries, parse, to_document, write_document
from monitor.watch.state import STATE_FILE

FIGURES = ("rss", "rss_steady", "worker_rss", "workers", "state", "checkpoint", "fds", "threads", "pool_threads")
CHECKED_BY_DEFAULT = ("rss_steady", "worker_rss", "state", "checkpoint", "fds", "threads")
TOLERANCE = {"rss": 0.15, "rss_steady": 0.15, "worker_rss": 0.15, "workers": 0.0, "state": 0.10,
             "checkpoint": 0.10, "fds": 0.05, "threads": 0.05, "pool_threads": 0.05}
SLACK = {"rss": 64 * 2**20, "rss_steady": 64 * 2**20, "worker_rss": 64 * 2**20, "workers": 2,
         "state": 256 * 2**10, "checkpoint": 256 * 2**10, "fds": 8, "threads": 8, "pool_threads": 8}
UNITS = {"rss": "bytes", "rss_steady": "bytes", "worker_rss": "bytes", "workers": "", "state": "bytes",
         "checkpoint": "bytes", "fds": "", "threads": "", "pool_threads": ""}
# Spark's block manager's thread pools, each bounded at 100 threads by Spark (see the module's doc);
# the names as Linux shows a JVM thread's (its first 15 characters)
BOUNDED_POOLS = ("block-manager-a", "block-manager-s")


@dataclass
class Sample:
    t_s: float  # since the first batch
    rss: int  # bytes, `vigil run` and its children
    state: int  # bytes of the checker's state file
    checkpoint: int  # bytes under the Spark checkpoint directory
    fds: int
    threads: int  # all but those of Spark's bounded pools
    records_checked: float
    violations: float
    # resident bytes by kind of process — the monitor's own Python (``driver``), the Spark JVM
    # (``jvm``), PySpark's Python workers (``python_workers``, which Spark starts and ends as it
    # needs them) — and how many workers: a step in ``rss`` is one of them, a ramp a leak
    rss_by: dict = field(default_factory=dict)
    python_workers: int = 0
    largest_worker: int = 0  # resident bytes of the largest Python worker
    pool_threads: int = 0  # threads of Spark's bounded pools (BOUNDED_POOLS)

    @property
    def rss_steady(self) -> int:
        """Resident bytes of what lives for the whole run: all but the Python workers (all, when
        the split is unknown)."""
        return self.rss - self.rss_by.get("python_workers", 0) if self.rss_by else self.rss

    @property
    def worker_rss(self) -> int:
        return self.largest_worker

    @property
    def workers(self) -> int:
        return self.python_workers


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``5m``, ``1h``, ``1h30m``."""
    text, total, number = text.strip().lower(), 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in "hms" and number:
            total += float(number) * {"h": 3600, "m": 60, "s": 1}[ch]
            number = ""
        else:
            raise ValueError(f"{text!r}: not a duration (e.g. 90s, 5m, 1h)")
    if number:
        total += float(number)
    if total <= 0:
        raise ValueError(f"{text!r}: not a positive duration")
    return total


def _total(samples: dict, name: str) -> float:
    return sum(v for (n, _labels), v in samples.items() if n == name)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def process_kind(root_pid: int, proc: Any) -> str:
    """``driver`` (the `vigil run` process), ``jvm`` (Spark's), ``python_workers`` or ``other``."""
    if proc.pid == root_pid:
        return "driver"
    name = proc.name()
    if name == "java":
        return "jvm"
    return "python_workers" if name.startswith("python") else "other"


def bounded_pool_threads(pid: int) -> int:
    """Threads of process ``pid`` in Spark's bounded pools (:data:`BOUNDED_POOLS`), by name."""
    n = 0
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        try:
            n += comm.read_text().startswith(BOUNDED_POOLS)
        except OSError:  # the thread ended
            continue
    return n


def process_tree(pid: int, by_kind: dict[str, int] | None = None, counts: dict[str, int] | None = None,
                 largest: dict[str, int] | None = None, pooled: dict[str, int] | None = None) -> tuple[int, int, int]:
    """(resident bytes, open fds, threads) of ``pid`` and all its descendants, threads not counting
    those of Spark's bounded pools (``pooled["threads"]`` gets those, when given); ``by_kind``,
    ``counts`` and ``largest``, when given, get the resident bytes, the number of processes and the
    resident bytes of the largest process, per kind."""
    rss = fds = threads = 0
    for p in child_run.own_processes(pid):
        try:
            resident = p.memory_info().rss
            fds += p.num_fds()
            kind = process_kind(pid, p)
            in_pools = bounded_pool_threads(p.pid) if kind == "jvm" else 0
            threads += p.num_threads() - in_pools
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if pooled is not None:
            pooled["threads"] = pooled.get("threads", 0) + in_pools
        rss += resident
        if by_kind is not None:
            by_kind[kind] = by_kind.get(kind, 0) + resident
        if counts is not None:
            counts[kind] = counts.get(kind, 0) + 1
        if largest is not None:
            largest[kind] = max(largest.get(kind, 0), resident)
    return rss, fds, threads


def theil_sen(xs: list[float], ys: list[float]) -> float:
    """The median of the slopes between every two points (0 without two distinct xs)."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0


def growth(samples: list[Sample], figure: str, warmup_s: float) -> dict[str, Any]:
    """The fitted growth of ``figure`` after the warm-up, against its tolerance."""
    pts = [(s.t_s, float(getattr(s, figure))) for s in samples if s.t_s >= warmup_s]
    if len(pts) < 3:
        return {"figure": figure, "ok": False, "reason": f"only {len(pts)} samples after the warm-up"}
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    slope = theil_sen(xs, ys)
    grown = slope * (xs[-1] - xs[0])
    median = statistics.median(ys)
    limit = max(TOLERANCE[figure] * median, SLACK[figure])
    return {"figure": figure, "ok": grown <= limit, "start": ys[0], "end": ys[-1], "median": median,
            "slope_per_hour": slope * 3600, "fitted_growth": grown, "limit": limit}


def soak_config(base: Config, run_dir: Path, retention_s: float, port: int) -> tuple[Config, Path]:
    """The run's config: the base config's cluster, clients, writers and watch settings; its own
    topics with short retention and small segments, state under ``run_dir``, metrics on ``port``."""
    doc = to_document(base)
    stamp = time.strftime("%Y%m%d%H%M%S")
    retention_ms = max(60_000, int(retention_s * 1000))
    segments = {"retention.ms": str(retention_ms), "segment.ms": str(max(10_000, retention_ms // 4)),
                "segment.bytes": str(1 << 20)}
    canary = doc.get("canary", {})
    ledger = doc.get("ledger", {})
    doc.update({
        "instance_id": f"soak-{stamp}",
        "state_dir": str(run_dir / "state"),
        "canary": {**canary, "name": f"vigil-soak-{stamp}",
                   "extra_config": {**canary.get("extra_config", {}), **segments}},
        "ledger": {**ledger, "topic": f"vigil-soak-{stamp}-ledger", "retention_ms": retention_ms,
                   "extra_config": {**ledger.get("extra_config", {}), "segment.ms": segments["segment.ms"],
                                    "segment.bytes": segments["segment.bytes"]}},
        "metrics": {**doc.get("metrics", {}), "port": port, "bind": "127.0.0.1"},
        "watch": {**doc.get("watch", {}), "checkpoint_dir": ""},
        **{name: {**doc.get(name, {}), **names}
           for name, names in own_application_canaries(f"vigil-soak-{stamp}").items()},
    })
    path = run_dir / "vigil.yaml"
    write_document(doc, path)
    return parse(doc, str(path)), path


def _line(s: Sample) -> str:
    mib = 2**20
    return (f"{s.t_s / 60:5.1f} min  RSS {s.rss / mib:7.0f} MiB  state {s.state / mib:6.2f} MiB  "
            f"checkpoint {s.checkpoint / mib:6.2f} MiB  fds {s.fds:4d}  threads {s.threads:4d} "
            f"(+{s.pool_threads} in Spark's pools)  "
            f"checked {s.records_checked:12,.0f}  violations {s.violations:.0f}"
            + (f"  (steady {s.rss_steady / mib:.0f} of which JVM {s.rss_by.get('jvm', 0) / mib:.0f}; "
               f"Python workers {s.python_workers}: {s.rss_by.get('python_workers', 0) / mib:.0f} MiB, "
               f"largest {s.largest_worker / mib:.0f})" if s.rss_by else ""))


def run_soak(base: Config, duration_s: float, interval_s: float, warmup_s: float, retention_s: float,
             checks: tuple[str, ...], report_dir: Path | None, progress: Callable[[str], None]) -> dict[str, Any]:
    """Runs the soak; returns its report (also written as ``soak.json`` and ``soak.png``)."""
    run_dir = report_dir or Path(tempfile.mkdtemp(prefix="vigil-soak-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cfg, path = soak_config(base, run_dir, retention_s, port)
    out, err = (run_dir / "run.out").open("w"), (run_dir / "run.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "run", "--json", "--config", str(path)],
                            stdout=out, stderr=err)
    state_file = cfg.checkpoint_dir() / STATE_FILE
    samples: list[Sample] = []
    final: dict = {}
    try:
        if not first_batch(port, proc, 240):
            raise RuntimeError(f"vigil run did not start: {(run_dir / 'run.err').read_text()[-2000:]}")
        progress(f"vigil run is checking (topic {cfg.canary.name}, retention {retention_s:.0f} s); "
                 f"sampling every {interval_s:.0f} s for {duration_s / 60:.1f} min, warm-up {warmup_s / 60:.1f} min")
        t0 = time.monotonic()
        while True:
            t = time.monotonic() - t0
            if proc.poll() is not None:
                raise RuntimeError(f"vigil run exited during the soak: {(run_dir / 'run.err').read_text()[-2000:]}")
            metrics = scrape(port)
            by_kind: dict[str, int] = {}
            counts: dict[str, int] = {}
            largest: dict[str, int] = {}
            pooled: dict[str, int] = {}
            rss, fds, threads = process_tree(proc.pid, by_kind, counts, largest, pooled)
            s = Sample(round(t, 1), rss, state_file.stat().st_size if state_file.exists() else 0,
                       _dir_bytes(cfg.spark_checkpoint_dir()), fds, threads,
                       _total(metrics, "vigil_records_checked_total"), _total(metrics, "vigil_violations_total"),
                       by_kind, counts.get("python_workers", 0), largest.get("python_workers", 0),
                       pooled.get("threads", 0))
            samples.append(s)
            progress(_line(s))
            if t >= duration_s:
                final = metrics
                break
            time.sleep(max(0.0, min(interval_s * len(samples), duration_s) - (time.monotonic() - t0)))
    finally:
        child_run.stop(proc, 120, dump_to=run_dir / "threads.txt")
        out.close()
        err.close()
    drained = _drained_violations(run_dir / "run.out")
    report = judge(samples, warmup_s, checks, final, drained, proc.returncode)
    report.update({"topic": cfg.canary.name, "retention_s": retention_s, "interval_s": interval_s,
                   "duration_s": duration_s, "report_dir": str(run_dir), "exit_code": proc.returncode,
                   "samples": [asdict(s) for s in samples]})
    (run_dir / "soak.json").write_text(json.dumps(report, indent=1))
    report["chart"] = str(chart(samples, warmup_s, run_dir / "soak.png"))
    return report


def _drained_violations(out: Path) -> dict[str, float]:
    """The totals `vigil run --json` printed once stopped (the checker drained: later than any
    scrape), as invariant/isolation -> count; empty when it printed none."""
    try:
        summary = json.loads(out.read_text().strip().splitlines()[-1])
    except (OSError, IndexError, ValueError):
        return {}
    found: dict[str, float] = {}
    for key, n in summary.get("checker", {}).get("violations", {}).items():
        inv, iso, _durability = key.split("/")
        found[f"{inv}/{iso}"] = found.get(f"{inv}/{iso}", 0) + n
    return found


def judge(samples: list[Sample], warmup_s: float, checks: tuple[str, ...], final: dict,
          drained: dict[str, float] | None = None, exit_code: int | None = 0) -> dict[str, Any]:
    """The soak's verdict: no violation (in the last scrape, or in the totals printed once the run
    drained; write cycles, which Kafka allows, are reported only), a clean exit, records checked between every two samples after the warm-up, no
    checked figure growing."""
    failures: list[str] = []
    by_kind = {f"{dict(labels).get('invariant')}/{dict(labels).get('isolation')}": v
               for (name, labels), v in final.items() if name == "vigil_violations_total" and v}
    for kind, n in (drained or {}).items():
        by_kind[kind] = max(by_kind.get(kind, 0), n)
    failing = {k: n for k, n in by_kind.items() if CATALOG[Invariant(k.split("/")[0])].severity is not Severity.INFO}
    if failing:  # what Kafka allows (write cycles, severity info) is reported, never a failure
        failures.append(f"violations: {failing}")
    if exit_code != 0:
        failures.append(f"vigil run exited with {exit_code}")
    after = [s for s in samples if s.t_s >= warmup_s]
    idle = [f"{b.t_s / 60:.1f}" for a, b in zip(after, after[1:]) if b.records_checked <= a.records_checked]
    if len(after) < 2 or idle:
        failures.append("records checked did not grow after the warm-up (at minute "
                        + (", ".join(idle) or "-") + "): the monitor stopped checking")
    grew = {f: growth(samples, f, warmup_s) for f in FIGURES}
    for f in checks:
        g = grew[f]
        if not g["ok"]:
            failures.append(f"{f} grew: " + (g.get("reason") or f"fitted {g['fitted_growth']:,.0f} "
                                              f"{UNITS[f]} after the warm-up, limit {g['limit']:,.0f}"))
    return {"ok": not failures, "failures": failures, "checked_figures": list(checks), "growth": grew,
            "violations": by_kind, "warmup_s": warmup_s}


def chart(samples: list[Sample], warmup_s: float, path: Path) -> Path:
    """Four panels over time: memory, state and checkpoint, fds and threads, records checked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t_s / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    panels = [
        ("resident memory (MiB), vigil run + Spark JVM + Python workers",
         [("RSS, all", [s.rss / 2**20 for s in samples])]
         + [(label, [s.rss_by.get(kind, 0) / 2**20 for s in samples])
            for kind, label in (("driver", "the monitor (Python)"), ("jvm", "Spark JVM"),
                                ("python_workers", "PySpark Python workers"))
            if any(kind in s.rss_by for s in samples)]
         + ([("all but the workers (rss_steady)", [s.rss_steady / 2**20 for s in samples]),
             ("largest worker (worker_rss)", [s.largest_worker / 2**20 for s in samples])]
            if any(s.rss_by for s in samples) else [])
         + ([("Python workers x100", [100 * s.python_workers for s in samples])]
            if any(s.python_workers for s in samples) else [])),
        ("on disk (MiB)", [("checker state", [s.state / 2**20 for s in samples]),
                           ("Spark checkpoint", [s.checkpoint / 2**20 for s in samples])]),
        ("open", [("file descriptors", [s.fds for s in samples]), ("threads", [s.threads for s in samples]),
                  ("threads of Spark's bounded pools", [s.pool_threads for s in samples])]),
        ("records checked (millions)", [("both readers", [s.records_checked / 1e6 for s in samples])]),
    ]
    for ax, (title, series) in zip(axes, panels):
        for label, ys in series:
            ax.plot(t, ys, marker=".", label=label)
        ax.axvspan(0, warmup_s / 60, color="0.9", label="warm-up")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="best")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes since the first batch")
    fig.suptitle("vigil soak: what must stay flat", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
