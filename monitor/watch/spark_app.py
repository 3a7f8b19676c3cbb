"""Entry point for spark-submit / the Spark operator (Spark on Kubernetes): the `vigil watch` job,
e.g. ``spark_app.py --config /etc/vigil/vigil.yaml``."""

import argparse

from monitor.config import load
from monitor.watch.main import watch

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Vigil's live checker (vigil watch) under spark-submit.")
    parser.add_argument("--config", "-c", default=None, help="YAML config file (default: $VIGIL_CONFIG)")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args()
    watch(load(args.config), args.duration, progress=print)
