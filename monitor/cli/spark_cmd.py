"""`vigil spark`: a Spark standalone cluster on this machine (a master and workers, each its own JVM)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from monitor.cli.common import ConfigOption, console, load_config, print_json, progress

app = typer.Typer(
    help="Run a Spark standalone cluster on loopback (master + workers from pyspark's bin/spark-class) "
         "to run `vigil watch` on executors in separate JVMs: set watch.spark_master to the URL it prints.",
    no_args_is_help=True,
)


def standalone(config: Optional[Path], workers: int = 2):
    from monitor.watch.standalone import StandaloneSpark

    cfg = load_config(config)
    return StandaloneSpark(Path(cfg.state_dir) / "spark-standalone", workers=workers, java_home=cfg.watch.java_home)


@app.command("up")
def up(config: Optional[Path] = ConfigOption,
       workers: int = typer.Option(2, min=1, help="Workers to start (1 core, 1 GiB each)."),
       as_json: bool = typer.Option(False, "--json", help="Print the master URL and process ids as JSON.")) -> None:
    """Start a master and WORKERS workers (if not up already); logs and work directories under the state dir."""
    spark = standalone(config, workers)
    spark.up(progress)
    if as_json:
        print_json({"master": spark.master_url, "ui": spark.ui_url, "pids": spark.pids()})
        return
    console.print(f"Spark master {spark.master_url} (UI {spark.ui_url}), {spark.alive_workers()} workers alive; "
                  f"set watch.spark_master: {spark.master_url}")


@app.command("status")
def status(config: Optional[Path] = ConfigOption,
           as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Whether the local standalone cluster is up, and how many workers are alive."""
    spark = standalone(config)
    info = {"master": spark.master_url, "alive_workers": spark.alive_workers(), "pids": spark.pids()}
    if as_json:
        print_json(info)
        return
    console.print(f"master {info['master']}: {info['alive_workers']} workers alive, processes {info['pids'] or '-'}")


@app.command("down")
def down(config: Optional[Path] = ConfigOption) -> None:
    """Stop the workers (with their executors) and the master."""
    standalone(config).down()
    console.print("Spark standalone cluster stopped")
