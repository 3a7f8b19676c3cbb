"""`vigil status`: ask the running monitor (its /ready and /metrics) how it is doing."""

from __future__ import annotations

import http.client
from pathlib import Path
from typing import Optional

import typer

from monitor import status as monitor_status
from monitor.child_run import scrape, url_host
from monitor.cli.common import ConfigOption, console, load_config, print_json


def status(
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    address: str = typer.Option("", help="host:port of the monitor's metrics endpoint (default: metrics.bind "
                                         "and metrics.port of the config)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Ask the running monitor how it is doing: ready or not (and why), how fresh its last batch is,
    records checked, violations counted, and what keeps it from working (clients refused by the
    cluster, a checker state it cannot save, the earliest certificate expiry). Exit 0 when it answers
    and is ready, 1 otherwise."""
    cfg = load_config(config)
    if not address and not cfg.metrics.port:
        raise typer.BadParameter("metrics.port is 0 in this config: the monitor serves no /metrics to ask; "
                                 "give --address host:port", param_hint="--address")
    if not address:
        host = "127.0.0.1" if cfg.metrics.bind in ("0.0.0.0", "::", "") else cfg.metrics.bind
        address = f"{url_host(host)}:{cfg.metrics.port}"
    host, _, port = address.rpartition(":")
    try:
        ready = monitor_status.ask_ready(f"http://{address}")
        st = monitor_status.summarize(address, ready, scrape(int(port), host))
    except (OSError, ValueError, http.client.HTTPException) as exc:  # not a monitor's endpoint, or none
        st = monitor_status.Status(address, reason=f"{type(exc).__name__}: {exc}")
    if as_json:
        print_json(st.to_json())
    else:
        for line in monitor_status.lines(st):
            console.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if st.healthy else 1)
