"""`vigil config`: show the effective configuration and the reference table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
import yaml

from monitor.cli.common import ConfigOption, console, load_config
from monitor.config_reference import reference_markdown

app = typer.Typer(help="Inspect configuration.", no_args_is_help=True)


@app.command("show")
def show(config: Optional[Path] = ConfigOption) -> None:
    """Print the effective configuration (secrets masked)."""
    cfg = load_config(config)
    data = cfg.model_dump(mode="json")
    sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


@app.command("reference")
def reference() -> None:
    """Print every config key with its type, default and meaning (Markdown)."""
    sys.stdout.write(reference_markdown() + "\n")


@app.command("check")
def check(config: Optional[Path] = ConfigOption) -> None:
    """Validate a config file; errors name the key and the reason."""
    load_config(config)
    console.print("config OK")
