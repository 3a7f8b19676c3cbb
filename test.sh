#!/usr/bin/env bash
# Command 2 of the README: set everything up and run the whole test suite
# (unit and property tests, then integration tests against a real local Kafka cluster).
# Extra arguments go to pytest (e.g. -m "not integration" for the fast layer only).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --test
exec .venv/bin/python -m pytest --durations=0 --durations-min=15 "$@"
