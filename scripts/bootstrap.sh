#!/usr/bin/env bash
# Set up everything Vigil needs on a fresh machine, idempotently:
#   - Debian packages: a JDK for the brokers and Spark, Maven to fetch the official jars
#   - the virtualenv at .venv/ with Vigil and its pinned dependencies (plus test extras
#     when called with --test)
#   - the Kafka broker jars, resolved from Maven Central once into ~/.cache/vigil/jars
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    say "missing: ${need_apt[*]}; install them (apt-get) or run as root"; exit 1
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  say "installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { say "Python 3.11 is required (set PYTHON=/path/to/python3.11)"; exit 1; }

stamp=.venv/.vigil-installed
extras=""; [ "$want_test" = 1 ] && extras="[test]"
want="$(sha256sum pyproject.toml | cut -c1-16)$extras"
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $PY"
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || ! grep -qxF -- "$want" "$stamp"; then
  say "installing Vigil and pinned dependencies into .venv (first run takes about a minute)"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e ".$extras"
  echo "$want" >> "$stamp"
fi

say "resolving the Kafka broker jars (cached after the first run)"
.venv/bin/python - <<'PY'
from monitor.cluster import jars
from monitor.config import load
cfg = load(None)
print(jars.kafka_broker_jars(cfg.cluster.kafka_version, lambda m: print("  " + m)))
print(jars.spark_kafka_connector_jars(lambda m: print("  " + m))[0].rsplit("/", 1)[0])
PY
