"""`vigil bench`: catch-up throughput of the checker next to its ceilings, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from monitor.cli.common import ConfigOption, console, err_console, load_config, print_json, progress


def bench(
    config: Optional[Path] = ConfigOption,
    records: int = typer.Option(5_000_000, min=1000, help="Canary records to pre-fill (once; reused later)."),
    only: Optional[str] = typer.Option(None, help="Comma list of bare,spark,checker,tws,live (default: the first "
                                       "three; tws: per-partition state in transformWithStateInPandas, compared)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    live: bool = typer.Option(False, "--live", help="Also measure live: produce-to-checked and detection "
                              "latency under load (`vigil run` plus drills; about 5 minutes)."),
    rate: float = typer.Option(2000.0, min=1, help="--live: writes/s of all canary writers together."),
    drills: int = typer.Option(50, min=1, help="--live: drills whose detection latency is measured."),
    warmup: float = typer.Option(20.0, min=0, help="--live: seconds of load before measuring."),
    floor: float = typer.Option(60.0, min=0, help="--live: then seconds of the pipeline's own floor measured: the "
                                "same writers at the same rate under `vigil run --no-check` (every batch fetched, "
                                "decoded and handed over, nothing judged; after its own --warmup), its produce → "
                                "read latency beside the checker's; 0 = none."),
    warm: bool = typer.Option(True, "--jvm-warmup/--no-jvm-warmup", help="An untimed pass over the topic before (b) "
                              "and (c), so neither pays alone for the JVM's class loading and JIT."),
    standalone: int = typer.Option(0, min=0, help="Run (b) and (c) on a Spark standalone cluster of this many "
                                   "workers (1 core each) started for the bench; 0 = watch.spark_master."),
    keep_cluster: bool = typer.Option(False, "--keep-cluster", help="Leave the local cluster running when the "
                                      "bench started it (it is stopped by default; its pre-filled topics stay "
                                      "on disk either way and are reused by the next run)."),
) -> None:
    """Measure catch-up throughput: bare consumer vs Spark no-op vs the full checker.

    Over a pre-filled topic: (a) a bare confluent-kafka consumer, (b) a Spark no-op query,
    (c) the full checker — each reading both isolation levels; prints records/s, the ratios
    c/b and c/a, peak RSS and CPU seconds per million reads. `--live` also runs `vigil run` at
    `--rate` writes/s and reports produce-to-checked latency and, over `--drills` drills, the
    detection latency (drill written to counter moved on /metrics), p50 and p99; then, for
    `--floor` seconds, the same load under `vigil run --no-check`: the pipeline's own produce → read
    latency, what any checker's figures stand on.

    The topic is `vigil-bench-<records>-paced` (replication factor 1, its own ledger), filled once
    on the configured cluster or the local one (started if needed) by three idempotent writers and
    a transactional one side by side, as fast as they go. Machines are noisy: compare the ratios of
    one run, and repeat for medians. A local cluster the bench started is stopped at the end.
    """
    from monitor.config import own_application_canaries
    from monitor.cluster.access import up_for

    cfg = load_config(config)
    # (a new name whenever the pre-fill changes shape: one writer at first, then unpaced writers: -mixed)
    topic = f"vigil-bench-{records}-paced"
    names = own_application_canaries(topic)  # (the copy keeps the derived ones)
    cfg = cfg.model_copy(update={
        "canary": cfg.canary.model_copy(update={"name": topic, "replication_factor": 1, "min_insync_replicas": 1}),
        "ledger": cfg.ledger.model_copy(update={"topic": f"{topic}-ledger"}),
        "groups": cfg.groups.model_copy(update=names["groups"]),
        "eos": cfg.eos.model_copy(update=names["eos"]),
    })
    started = cfg.embedded and not _local_cluster_running(cfg)  # (a cluster partly up is left as it was found)
    if cfg.embedded:
        up_for(cfg, progress)
    try:
        _bench(cfg, config, records, only, as_json, live, rate, drills, warmup, warm, standalone, floor)
    finally:
        if started and not keep_cluster:
            from monitor.cluster.local_cluster import LocalCluster

            progress("stopping the local cluster the bench started (--keep-cluster leaves it running)")
            LocalCluster(cfg.cluster, progress).down()


def _local_cluster_running(cfg) -> bool:
    """Whether any node of the config's local cluster runs now (or is paused)."""
    from monitor.cluster.local_cluster import LocalCluster

    try:
        return any(n.state != "stopped" for n in LocalCluster(cfg.cluster).status().nodes)
    except Exception:  # noqa: BLE001 - never started here: no layout yet
        return False


def _bench(cfg, config, records, only, as_json, live, rate, drills, warmup, warm, standalone, floor) -> None:
    from monitor.bench import run_bench

    which = tuple((only or "bare,spark,checker").split(",")) + (("live",) if live else ())
    unknown = set(which) - {"bare", "spark", "checker", "tws", "live"}
    if unknown:
        raise typer.BadParameter(f"unknown: {', '.join(sorted(unknown))}", param_hint="--only")
    result = run_bench(cfg, records, which, progress, standalone, warm).to_json() if set(which) - {"live"} else {}
    if "live" in which:
        from monitor.bench_live import run_floor, run_live

        given = load_config(config)  # (the config as given: the pre-filled topic's names are the bench's)
        result["live"] = run_live(given, rate, drills, warmup, progress)
        if floor:
            try:
                result["live"]["floor"] = run_floor(given, rate, warmup, floor, progress)
            except Exception as exc:  # noqa: BLE001 - the checker's figures stand; the floor's failure is said
                progress(f"the floor (vigil run --no-check) was not measured: {type(exc).__name__}: {exc}")
                result["live"]["floor"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if as_json:
        print_json(result)
        return
    if "warmup" in result:
        w = result["warmup"]
        console.print(f"warm-up        {w['rows']:,} Kafka rows fetched untimed in {w['seconds']} s "
                      f"({w['driver_rows']:,} rows reached the driver)")
    for name in ("bare_consumer", "spark_noop", "fetch_only", "checker", "per_partition_state"):
        if name in result:
            f = result[name]
            kinds = ", ".join(f"{k} {v}" for k, v in f.get("peak_rss_mb_by_kind", {}).items())
            console.print(f"{name:14} {f['records_per_s']:>12,} records/s  ({f['reads']:,} reads in "
                          f"{f['seconds']} s, peak RSS {f['peak_rss_mb']} MB ({kinds}), "
                          f"{f['cpu_s_per_m_reads']} CPU s per million reads)")
    if "checker" in result:
        f = result["checker"]
        console.print(f"checker state  {f['state_mb']} MB at the end, {f['state_mb_peak']} MB at most "
                      f"({f['batches']} batches); ledger rows held ahead of the readers: "
                      f"{f.get('ledger_held_peak', 0):,} at most")
    for key in ("ratio_checker_to_spark", "ratio_fetch_to_spark", "ratio_checker_to_bare",
                "ratio_per_partition_state_to_spark"):
        if key in result:
            console.print(f"{key}: {result[key]}")
    if "live" in result:
        lv = result["live"]
        for iso, f in lv["produce_to_checked"].items():
            console.print(f"produce→checked {iso}: p50 {f['p50_s']} s, p99 {f['p99_s']} s ({f['records']:,} records)")
        console.print(f"detection: {lv['detection']} (missed {lv['missed_drills']})")
        console.print(f"checker state at the end: {lv['state_mb']} MB")
        fl = lv.get("floor", {})
        for iso, f in fl.get("produce_to_read", {}).items():
            console.print(f"floor (--no-check) produce→read {iso}: p50 {f['p50_s']} s, p99 {f['p99_s']} s "
                          f"({f['records']:,} records)")
        if "produce_to_read" in fl:
            console.print(f"floor: {fl['records_checked']} records checked, {fl['violations']} violations (both 0 "
                          f"when nothing is judged)")
        elif "error" in fl:
            console.print(f"floor not measured: {fl['error']}")
    err_console.print("reads count both isolation levels (2 × records)")
