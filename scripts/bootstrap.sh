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
# javac too: the EOS pipeline canary (monitor/eos/EosWorker.java) is compiled on first use
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# The tests run a real Prometheus and promtool (alert rule tests).
if [ "$want_test" = 1 ]; then
  command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    say "missing: ${need_apt[*]}; install them (apt-get) or run as root"; exit 1
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  say "installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  # --no-install-recommends: only the binaries; policy-rc.d keeps services from starting.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends \
    "${need_apt[@]}" >/dev/null
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

say "resolving the Kafka broker and Spark connector jars (cached after the first run)"
.venv/bin/python - <<'PY'
from monitor.cluster import jars
from monitor.config import load
cfg = load(None)
print(jars.kafka_broker_jars(cfg.cluster.kafka_version, lambda m: print("  " + m)))
print(jars.spark_kafka_connector_jars(lambda m: print("  " + m))[0].rsplit("/", 1)[0])
PY

# Spark's driver JVM starts in about 40 % less time with its classes in a class-data archive
# (watch.class_data_sharing, monitor/watch/cds.py), made here once per .venv, Java and Spark.
.venv/bin/python -c 'from monitor.watch import cds; cds.build(lambda m: print("  " + m))' || say "no class-data archive (the watch starts without one)"

# The deploy tests render the kustomize overlays: with `kubectl kustomize` when kubectl has a
# v5 kustomize built in, else with kustomize itself, built from the Go module proxy once.
if [ "$want_test" = 1 ] && ! kubectl version --client 2>/dev/null | grep -q "Kustomize Version: v5"; then
  if [ ! -x "$HOME/.cache/vigil/bin/kustomize" ]; then
    command -v go >/dev/null 2>&1 || { say "kustomize needs Go (or kubectl with kustomize v5)"; exit 1; }
    say "building kustomize v5.5.0 from the Go module proxy (once)"
    GOBIN="$HOME/.cache/vigil/bin" go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0
  fi
fi
