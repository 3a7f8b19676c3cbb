"""`vigil cluster`: the embedded local Kafka cluster."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from monitor.cli.common import ConfigOption, console, load_config, print_json, progress
from monitor.cluster.access import up_for
from monitor.cluster.local_cluster import ClusterStatus, LocalCluster

app = typer.Typer(
    help="Run a real 3-node Apache Kafka cluster (KRaft) on loopback for canaries, tests and demos.",
    no_args_is_help=True,
)


def _cluster(config: Optional[Path]) -> LocalCluster:
    return LocalCluster(load_config(config).cluster, progress)


def print_status(status: ClusterStatus) -> None:
    table = Table(title=f"Kafka cluster in {status.state_dir}", title_justify="left")
    for col in ("node", "pid", "state", "client", "replication", "controller", "listening", "role"):
        table.add_column(col)
    for n in status.nodes:
        table.add_row(
            str(n.node_id), str(n.pid or "-"), n.state, str(n.client_port), str(n.replication_port),
            str(n.controller_port), "yes" if n.listening else "no",
            "active controller" if n.active_controller else "",
        )
    console.print(table)
    console.print(f"bootstrap: {status.bootstrap_servers}   network: {status.network}"
                  + (f" (proxy pid {status.proxy_pid})" if status.proxy_pid else ""))
    if status.blocked_links:
        console.print(f"blocked links: {status.blocked_links}")


@app.command()
def up(config: Optional[Path] = ConfigOption,
       timeout: Optional[float] = typer.Option(None, help="Seconds to wait for readiness.")) -> None:
    """Start the cluster (idempotent: only what is not running is started)."""
    started = time.monotonic()
    status = up_for(load_config(config), progress, timeout)
    print_status(status)
    console.print(f"ready in {time.monotonic() - started:.1f} s")


@app.command()
def down(config: Optional[Path] = ConfigOption,
         purge: bool = typer.Option(False, help="Also delete data and logs.")) -> None:
    """Stop every node and the link proxy."""
    _cluster(config).down(purge=purge)
    console.print("cluster stopped" + (" and purged" if purge else ""))


@app.command()
def status(config: Optional[Path] = ConfigOption,
           as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show each node's pid, ports, liveness, and the active controller."""
    st = _cluster(config).status()
    if as_json:
        print_json(st.to_json(), indent=2)
    else:
        print_status(st)


@app.command()
def logs(node: int = typer.Option(1, help="Node id."), lines: int = typer.Option(50, help="Lines to show."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
         config: Optional[Path] = ConfigOption) -> None:
    """Show a node's broker log."""
    path = _cluster(config).log_path(node)
    if not path.exists():
        console.print(f"no log yet at {path}")
        raise typer.Exit(1)
    subprocess.run(["tail", f"-n{lines}"] + (["-F"] if follow else []) + [str(path)])


def _node_action(action: str):
    def command(node: int = typer.Argument(..., help="Node id (1..nodes)."),
                config: Optional[Path] = ConfigOption) -> None:
        cluster = _cluster(config)
        getattr(cluster, action)(node)
        console.print(f"node {node}: {action} done")

    command.__doc__ = {
        "kill": "SIGKILL one node (no controlled shutdown).",
        "pause": "SIGSTOP one node (it stays in memory, frozen).",
        "resume": "SIGCONT a paused node.",
        "restart": "Controlled restart of one node.",
        "start_node": "Start one stopped node.",
    }[action]
    return command


for _name, _action in (("kill", "kill"), ("pause", "pause"), ("resume", "resume"),
                       ("restart", "restart"), ("start", "start_node")):
    app.command(_name)(_node_action(_action))


@app.command("renew-certificate")
def renew_certificate(days: int = typer.Option(365, min=1, help="Days the new certificate is valid."),
                      config: Optional[Path] = ConfigOption) -> None:
    """Give the brokers of a secured local cluster a new certificate (same CA), without a restart."""
    import datetime as dt

    expires = _cluster(config).renew_certificate(days)
    console.print(f"brokers present a new certificate, valid until "
                  f"{dt.datetime.fromtimestamp(expires, dt.timezone.utc):%Y-%m-%d %H:%M} UTC")


@app.command()
def isolate(node: int = typer.Argument(..., help="Node id."),
            controller_only: bool = typer.Option(False, help="Cut only the controller links."),
            config: Optional[Path] = ConfigOption) -> None:
    """Cut a node off from its peers (clients still reach it)."""
    kinds = ("controller",) if controller_only else ("replication", "controller")
    reply = _cluster(config).isolate(node, kinds)
    console.print(f"blocked links: {reply.get('blocked')}")


@app.command()
def heal(config: Optional[Path] = ConfigOption) -> None:
    """Restore every cut link."""
    _cluster(config).heal()
    console.print("all links healed")
