#!/usr/bin/env bash
# Command 1 of the README: set everything up and run the embedded default
# (local 3-node Kafka cluster + canary writers, metrics on 127.0.0.1:9464).
# Extra arguments go to `vigil run` (e.g. --duration 120).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh
exec .venv/bin/vigil run "$@"
