"""`vigil produce`: run one canary writer."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

import typer
from prometheus_client import CollectorRegistry, start_http_server

from monitor.canary.runner import WriterThread, open_writer, prepare_topics
from monitor.canary.writer import CanaryWriter
from monitor.credentials import CredentialWatch
from monitor.cli.common import ConfigOption, console, err_console, load_config, print_json
from monitor.config import Config, WriterConfig
from monitor.metrics import producer_metrics
from monitor.signals import install_stop_handlers


def writer_summary(writer: CanaryWriter) -> dict:
    summary = {
        "writer": writer.cfg.name,
        "instance_id": writer.identity.instance_id,
        "writer_id": writer.identity.writer_id,
        "incarnation": writer.identity.incarnation,
        "planned": writer.planned,
        "outcomes": {k.value: v for k, v in writer.counts.items()},
        "in_flight": writer.in_flight,
        "ledger_entries": writer.ledger.next_n,
    }
    txn_counts = getattr(writer, "txn_counts", None)
    if txn_counts is not None:
        summary["transactions"] = {k.value: v for k, v in txn_counts.items()}
    return summary


def status_line(writer: CanaryWriter) -> str:
    outcomes = "  ".join(f"{k.value} {v}" for k, v in writer.counts.items() if k.value != "pending")
    return (f"{writer.cfg.name} inc {writer.identity.incarnation}: planned {writer.planned}  {outcomes}  "
            f"in flight {writer.in_flight}")


def produce(
    config: Optional[Path] = ConfigOption,
    writer: Optional[str] = typer.Option(None, help="Writer from the config's `writers` list (default: the first)."),
    acks: Optional[str] = typer.Option(None, help="Override acks: 0, 1 or all."),
    idempotence: Optional[bool] = typer.Option(None, "--idempotence/--no-idempotence", help="Override idempotence."),
    transactional: Optional[bool] = typer.Option(None, "--transactional/--no-transactional",
                                                 help="Override transactional mode."),
    abort_ratio: Optional[float] = typer.Option(None, help="Share of transactions aborted on purpose."),
    txn_size: Optional[int] = typer.Option(None, help="Records per transaction."),
    rate: Optional[float] = typer.Option(None, help="Records per second (0 = as fast as possible)."),
    record_size: Optional[int] = typer.Option(None, help="Bytes per record value (>= 48)."),
    duration: Optional[float] = typer.Option(None, help="Stop after this many seconds (default: run until Ctrl-C)."),
    count: Optional[int] = typer.Option(None, help="Stop after this many records."),
    instance_id: Optional[str] = typer.Option(None, help="Instance id (default: <instance_id>-<writer name>)."),
    metrics_port: Optional[int] = typer.Option(None, help="Serve producer metrics here (default: metrics.port + 1; 0 = off)."),
    as_json: bool = typer.Option(False, "--json", help="Print the final summary as JSON."),
) -> None:
    """Run one canary writer: sequence-numbered records on every partition, every outcome in the ledger.

    Creates the canary and ledger topics when missing. Stops on Ctrl-C/SIGTERM, after
    --duration or --count, waiting for the last acknowledgements; the summary shows how many
    writes ended acked, failed, indeterminate or unconfirmed.
    """
    cfg = load_config(config)
    wcfg = _writer_config(cfg, writer, acks=acks, idempotence=idempotence, transactional=transactional,
                          abort_ratio=abort_ratio, txn_size=txn_size, rate=rate, record_size=record_size)
    registry = CollectorRegistry()
    metrics = producer_metrics(registry)
    port = cfg.metrics.port + 1 if metrics_port is None and cfg.metrics.port else (metrics_port or 0)
    if port:
        start_http_server(port, addr=cfg.metrics.bind, registry=registry)
    topics = prepare_topics(cfg)
    canary = open_writer(cfg, wcfg, topics, metrics, instance_id)
    stop = threading.Event()
    install_stop_handlers(stop)
    credentials = CredentialWatch(cfg, stop)  # a rotated sasl_password_file, without a restart
    registry.register(credentials)
    credentials.start()
    thread = WriterThread(canary, stop, duration, count)
    thread.start()
    err_console.print(f"writing to {topics.canary.name} ({topics.canary.partitions} partitions) as "
                      f"{canary.identity.instance_id} incarnation {canary.identity.incarnation}"
                      + (f"; metrics on http://{cfg.metrics.bind}:{port}/metrics" if port else ""))
    last = 0.0
    while thread.is_alive():
        thread.join(0.2)
        if not as_json and time.monotonic() - last >= 5:
            err_console.print(status_line(canary))
            last = time.monotonic()
    if thread.error is not None:
        raise thread.error
    summary = writer_summary(canary)
    if as_json:
        print_json(summary)
    else:
        console.print(status_line(canary))


def _writer_config(cfg: Config, name: str | None, **overrides: object) -> WriterConfig:
    base = cfg.writer(name) if name else cfg.writers[0]
    return base.with_overrides(**overrides)
