"""`vigil eos`: the exactly-once pipeline canary (a consume-transform-produce worker on the Java client,
or its librdkafka twin) and its audit."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Optional

import typer

from monitor import clients
from monitor.cli.common import ConfigOption, console, load_config, print_json
from monitor.eos.audit import audit, ensure_output_topic
from monitor.eos.runner import EosPipeline
from monitor.eos.worker import worker_for

app = typer.Typer(help="The exactly-once pipeline canary: a consume-transform-produce worker on the Java client "
                  "(or, with eos.client librdkafka, its twin on confluent-kafka) that reads the canary topic and writes each record's source position to an output topic in "
                  "transactions carrying its group's offsets, aborting some on purpose; and its audit "
                  "(eos_loss, eos_duplicate).", no_args_is_help=True)

DRILLS = ("eos_loss", "eos_duplicate")


@app.command("run")
def run(
    duration: float = typer.Option(0.0, help="Stop after this many seconds (0 = until Ctrl-C / SIGTERM)."),
    client: Optional[str] = typer.Option(None, help="java or librdkafka (default: eos.client)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Run the worker against the canary topic until stopped, with progress every 5 s.

    Its output topic (`eos.output_topic`) is created with the canary topic's partitions. Every
    `eos.abort_every`-th transaction is aborted on purpose; the consumer's position after each
    abort is classified advance / rewind / rewind_further / other (KAFKA-17582) before the worker
    seeks back to its committed offsets. Stopping asks the worker to close; a close() that does
    not return within `eos.close_bound_s` is reported hung (KAFKA-17734). Judge the result with
    `vigil eos audit`.
    """
    cfg = load_config(config)
    if client is not None:
        if client not in ("java", "librdkafka"):
            raise typer.BadParameter(f"{client!r}: java or librdkafka", param_hint="--client")
        cfg = cfg.model_copy(update={"eos": cfg.eos.model_copy(update={"client": client})})
    admin = clients.admin(cfg)
    canary = clients.ensure_topic(admin, cfg.canary.name, cfg.canary.partitions, cfg.canary.replication_factor,
                                  cfg.canary.topic_configs())
    ensure_output_topic(cfg, canary.partitions)
    pipeline = EosPipeline(cfg, say=console.print)  # started again whenever it exits, with backoff
    worker = pipeline.worker
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_a: stop.set())
    if not pipeline.start():
        raise typer.Exit(2)
    started = time.monotonic()
    while not stop.wait(5.0):
        progress = worker.of_kind("progress")
        if progress and not as_json:
            last = progress[-1]
            console.print(f"committed {last['committed_txns']} transactions ({last['records']} records), aborted "
                          f"{last['aborted_txns']}, failed {last['failed_txns']}; after aborts {dict(worker.after_abort_classes())}")
        if duration and time.monotonic() - started >= duration:
            break
    pipeline.stop()
    closed = worker.of_kind("closed")
    summary = {"client": worker.client, "after_abort": dict(worker.after_abort_classes()), "aborts": len(worker.of_kind("abort")),
               "drills": worker.of_kind("drill"), "close_ms": closed[-1]["ms"] if closed else None,
               "close_hung": pipeline.close_hung > 0, "stuck_before_close": worker.stuck,
               "worker_exits": pipeline.exits}
    if as_json:
        print_json(summary)
    else:
        console.print(f"stopped: after aborts {summary['after_abort']}, close "
                      f"{'HUNG (killed)' if summary['close_hung'] else str(summary['close_ms']) + ' ms'}"
                      f"{' (it was stuck before closing: killed)' if worker.stuck else ''}")


@app.command("drill")
def drill(
    kind: str = typer.Argument(..., help=f"One of: {', '.join(DRILLS)}."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Ask the worker `vigil eos run` runs (same state directory) for a deliberate fault.

    eos_loss: its next transaction is aborted and the worker does not rewind: it commits its
    position past the aborted records (the records are lost to the output). eos_duplicate: its
    next committed transaction writes its first record twice.
    """
    if kind not in DRILLS:
        raise typer.BadParameter(f"{kind!r}: one of {', '.join(DRILLS)}", param_hint="KIND")
    cfg = load_config(config)
    worker = worker_for(cfg)
    worker.drill(kind)
    console.print(f"asked the EOS worker for {kind} ({worker.control}.{kind}); it applies it on its next transaction")


@app.command("audit")
def audit_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Judge the pipeline from the topics: exit 1 on any eos_loss or eos_duplicate.

    Reads the group's committed offsets, then the output topic (read_committed) to its end, then
    the canary topic (read_committed): a record below the committed offset without a copy in the
    output is eos_loss; a record with more than one copy is eos_duplicate (copies are matched to the
    record they name, so a rewritten source log's new record at an old offset is not the old one's
    copy: `reused_positions` counts the positions whose copies name more than one record).
    """
    cfg = load_config(config)
    result = audit(cfg, cfg.canary.name, cfg.eos.output_topic, cfg.eos.group)
    v = result.verdict
    out = {"eos_loss": len(v.losses), "eos_duplicate": len(v.duplicates),
           "losses": [list(x) for x in v.losses[:100]], "duplicates": [list(x) for x in v.duplicates[:100]],
           "committed": result.committed, "output_records": result.output_records,
           "malformed_output": result.malformed_output, "drill_copies": result.drill_copies,
           "source_records": result.source_records, "reused_positions": v.reused_positions,
           "not_consumed": {str(p): list(span) for p, span in sorted(v.not_consumed.items())},
           "judged_records": result.judged_records}
    if as_json:
        print_json(out)
    else:
        console.print(f"eos_loss {out['eos_loss']}, eos_duplicate {out['eos_duplicate']} over {result.judged_records} "
                      f"records below the committed offsets ({result.output_records} output records)")
    if v.losses or v.duplicates:
        raise typer.Exit(1)
