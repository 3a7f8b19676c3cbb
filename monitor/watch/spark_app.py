"""Entry point for spark-submit / the Spark operator (Spark on Kubernetes): `vigil watch` with
the arguments given, e.g. ``spark_app.py --config /etc/vigil/vigil.yaml``."""

import sys

from monitor.cli import app

if __name__ == "__main__":
    app(["watch", *sys.argv[1:]])
