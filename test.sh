#!/usr/bin/env bash
# Command 2 of the README: set everything up and run the whole test suite: the unit and
# property layer first, on both cores (pytest-xdist, 2 workers: it is pure CPU), then the
# integration tests, one at a time, against a real local Kafka cluster (they share it, and
# each saturates the cores by itself). Both layers run; the exit status is the first failure's.
# Extra arguments replace that: one pytest run with them (e.g. -m "not integration" for the
# fast layers only, or a test's path).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --test
pytest=(.venv/bin/python -m pytest --durations=0 --durations-min=15)
if [ "$#" -gt 0 ]; then
  exec "${pytest[@]}" "$@"
fi
status=0
"${pytest[@]}" -m "not integration" -n 2 || status=$?
"${pytest[@]}" -m integration || { s=$?; [ "$status" = 0 ] && status=$s; }
exit "$status"
