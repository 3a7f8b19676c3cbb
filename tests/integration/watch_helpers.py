"""Helpers for the live-checker tests: configs on the session cluster, background `vigil`
processes, scraping /metrics."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import psutil
import yaml

from invariants.catalog import Invariant, Isolation
from invariants.ledger_format import TxnOutcome, WriteOutcome
from invariants.model import TxnKey
from monitor import child_run, clients
from monitor.clients import watermarks
from monitor.audit.book import LedgerBook
from monitor.child_run import scrape  # noqa: F401 - the tests import it from here
from monitor.config import Config, parse
from tests.integration.helpers import SHORT_RUN_JVM, VIGIL, read_ledger

HISTORY = ("lost_write", "duplicate", "reorder", "zero_offset", "offset_mismatch", "inconsistent_offset",
           "aborted_read", "partial_txn", "outcome_gap", "g0_write_cycle", "eos_loss", "eos_duplicate", "group_skip",
           "group_rewind")


def watch_config(cluster_env: dict, tmp: Path, name: str, port: int, **extra: Any) -> tuple[Config, Path]:
    """A config for the session cluster with this test's own topics, state and metrics port."""
    data: dict[str, Any] = {
        "instance_id": f"it-{name}",
        "state_dir": str(tmp / "state"),
        "kafka": {"bootstrap_servers": cluster_env["bootstrap"]},
        "canary": {"name": f"it-{name}-canary"},
        "ledger": {"topic": f"it-{name}-ledger"},
        "metrics": {"port": port},
        "watch": {"stall_threshold_s": 8, "lso_stuck_threshold_s": 6, "poll_timeout_ms": 15000,
                  "restart_backoff_max_s": 4, "driver_java_options": SHORT_RUN_JVM},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp / "vigil.yaml"
    path.write_text(yaml.safe_dump(data))
    return parse(data, str(path)), path


class Background:
    """A `vigil` command running in the background, its output in files; :meth:`stop_leftovers`
    (after every integration test) ends it and whatever it started when the test did not.
    (Not in a session of its own: a `vigil run` started that way missed the paused-leader test's
    stalled_poll twice in two runs, and caught it in three without; why is not known.)"""

    started: list["Background"] = []

    def __init__(self, config_path: Path, *args: str, name: str = "bg") -> None:
        self.out = config_path.parent / f"{name}.out"
        self.err = config_path.parent / f"{name}.err"
        self.proc = subprocess.Popen(VIGIL + list(args) + ["--config", str(config_path)],
                                     stdout=self.out.open("w"), stderr=self.err.open("w"))
        Background.started.append(self)

    @classmethod
    def stop_leftovers(cls, grace_s: float = 60) -> list[str]:
        """End every background command started since the last call that is still running, and
        all it started: SIGTERM to it (its own orderly stop, as :meth:`stop`), then to what is
        left below it, SIGKILL after ``grace_s``. The commands that were running."""
        mine = list(cls.started)
        running = [bg for bg in mine if bg.proc.poll() is None]
        trees: list[psutil.Process] = []
        try:
            for bg in running:
                try:
                    root = psutil.Process(bg.proc.pid)
                    trees += [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
            deadline = time.monotonic() + grace_s
            for bg in running:
                if bg.proc.poll() is None:
                    bg.proc.send_signal(signal.SIGTERM)
            for bg in running:
                try:
                    bg.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            left = [p for p in trees if p.is_running()]  # (psutil: the same process, not a reused pid)
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.terminate()
            psutil.wait_procs(left, timeout=max(0.0, deadline - time.monotonic()))
        finally:  # also when interrupted: nothing of it may outlive the tests
            for p in trees:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            for bg in running:
                if bg.proc.poll() is None:
                    bg.proc.wait(30)
            cls.started = [bg for bg in cls.started if bg not in mine]
        return [" ".join(bg.proc.args[3:-2]) for bg in running]

    def stop(self, timeout: float = 180) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._hung()
            raise AssertionError(f"did not stop within {timeout} s (threads: {self.threads}):\n{self.tail()}")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._hung()
            raise AssertionError(f"did not finish within {timeout} s (threads: {self.threads}):\n{self.tail()}")

    @property
    def threads(self) -> Path:
        return self.out.with_suffix(".threads")

    def _hung(self) -> None:
        """What it was doing (Python stacks to its stderr, the JVM's to ``threads``), then kill -9."""
        if self.proc.poll() is None:
            child_run.dump_threads(self.proc.pid, self.threads)
        self.kill9()

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.err.read_text(errors="replace").splitlines()[-n:])

    def stdout_json(self) -> Any:
        return json.loads(self.out.read_text().strip().splitlines()[-1])


# a session interrupted before its teardown (a second Ctrl-C): what is still running is ended
atexit.register(lambda: Background.stop_leftovers(grace_s=5))


def mapped_class_archives(pid: int) -> set[str]:
    """The class-data archives (monitor/watch/cds.py) the JVMs below process ``pid`` have mapped."""
    found: set[str] = set()
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name() == "java":
                found |= {m.path for m in child.memory_maps() if m.path.endswith(".jsa")}
        except psutil.Error:
            continue
    return found


def signal_children(run: "Background", sig: int, picked: Callable[[list[str]], bool]) -> int:
    """Send ``sig`` to the processes below a background ``vigil`` whose command line ``picked``
    picks; how many."""
    sent = 0
    for child in psutil.Process(run.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if picked(child.cmdline()):
                child.send_signal(sig)
                sent += 1
    return sent


def signal_group_members(run: "Background", sig: int) -> int:
    """Send ``sig`` to the group canary's members a background ``vigil run`` started; how many."""
    return signal_children(run, sig, lambda cmd: "monitor.group.member" in cmd)


def high_watermark(cfg: Config, p: int) -> int:
    """The canary topic's partition ``p``'s high watermark now."""
    c = clients.consumer(cfg, "read_uncommitted", group="vigil-test-watermarks")
    try:
        return watermarks(c, cfg.canary.name, p)[1]
    finally:
        c.close()


def signal_spark(run: "Background", sig: int) -> int:
    """Send ``sig`` to the Spark driver JVM (local mode: the executors too) of a background ``vigil
    run`` or ``vigil watch``; how many processes."""
    return signal_children(run, sig, lambda cmd: "org.apache.spark.deploy.SparkSubmit" in cmd)


def signal_eos_worker(run: "Background", sig: int) -> int:
    """Send ``sig`` to the EOS pipeline's worker a background ``vigil run`` started (the Java one or
    its librdkafka twin); how many processes."""
    return signal_children(run, sig, lambda cmd: any("EosWorker" in arg or "monitor.eos.rdkafka_worker" in arg
                                                     for arg in cmd))


def violations(port: int) -> dict[tuple[str, str], int]:
    """(invariant, isolation) -> count, whatever the durability class."""
    out: dict[tuple[str, str], int] = {}
    for (name, labels), v in scrape(port).items():
        if name == "vigil_violations_total":
            key = (dict(labels)["invariant"], dict(labels)["isolation"])
            out[key] = out.get(key, 0) + int(v)
    return out


def final_counts(run: "Background") -> dict[tuple[str, str], int]:
    """(invariant, isolation) -> count, whatever the durability class, from the totals `vigil run
    --json` prints once stopped (the checker drained: more complete than any scrape before)."""
    return counts_of(run.stdout_json())


def counts_of(report: dict) -> dict[tuple[str, str], int]:
    """(invariant, isolation) -> count, whatever the durability class, of a `--json` report's checker."""
    out: dict[tuple[str, str], int] = {}
    for key, n in report["checker"]["violations"].items():
        inv, iso, _durability = key.split("/")
        out[(inv, iso)] = out.get((inv, iso), 0) + n
    return out


def violations_by_class(port: int) -> dict[tuple[str, str, str], int]:
    """(invariant, isolation, durability) -> count."""
    return {(dict(labels)["invariant"], dict(labels)["isolation"], dict(labels)["durability"]): int(v)
            for (name, labels), v in scrape(port).items() if name == "vigil_violations_total"}


def sample(port: int, name: str, **labels: str) -> float | None:
    return scrape(port).get((name, tuple(sorted(labels.items()))))


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.5,
             show: Callable[[], Any] | None = None) -> Any:
    """Polls ``pred`` until truthy; on timeout the error names ``what`` and shows ``show()``
    (or the predicate's last value)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except OSError:  # /metrics not up yet
            last = None
        if last:
            return last
        time.sleep(interval)
    if show is not None:
        last = show()
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last})")


def metrics_up(port: int) -> bool:
    return sample(port, "vigil_batches_total") is not None and (sample(port, "vigil_batches_total") or 0) > 0


def writers_writing(port: int, cfg: Config, acked: int = 300, committed: int = 5) -> bool:
    """Every writer of a `vigil run` has ``acked`` acknowledged writes, and every transactional one
    ``committed`` committed transactions: what a test that needs history before a fault waits for,
    rather than a fixed time after the first batch."""
    for w in cfg.writers:
        if (sample(port, "vigil_producer_writes_total", writer=w.name, outcome="acked") or 0) < acked:
            return False
        if w.transactional and (sample(port, "vigil_producer_transactions_total", writer=w.name,
                                       outcome="committed") or 0) < committed:
            return False
    return True


def expected_checked(cfg: Config) -> dict[str, int]:
    """From the ledger: what each reader must have checked (rc: not in aborted/undecided txns)."""
    book: LedgerBook = read_ledger(cfg.kafka.bootstrap_servers, cfg.ledger.topic)
    acked = [(k, st) for k, st in book.writes.items() if st.outcome is WriteOutcome.ACKED]
    committed = 0
    for k, st in acked:
        txn = book.txns.get(TxnKey(k.writer_id, k.inc, st.txn_id)) if st.txn_id else None
        committed += txn is None or txn.outcome is TxnOutcome.COMMITTED
    return {"read_uncommitted": len(acked), "read_committed": committed}


def nonzero(counts: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    return {k: v for k, v in counts.items() if v}


def audit_counts(report: dict) -> dict[tuple[str, str], int]:
    return {(inv, iso): n for iso in (i.value for i in Isolation) for inv, n in report.get(iso, {}).items()}


G0 = (Invariant.G0_WRITE_CYCLE.value, Isolation.READ_COMMITTED.value)


def safety(counts: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """The nonzero counts but write cycles (severity info: Kafka allows them, two transactional
    writers may show some on a healthy cluster)."""
    return {k: v for k, v in nonzero(counts).items() if k != G0}


def own_cycles(evidence: Path, writer_id: int, inc: int) -> int:
    """The write cycles in the evidence log between two transactions of one writer incarnation."""
    me = [f"{writer_id:016x}", inc]
    lines = [json.loads(line) for line in (evidence.read_text().splitlines() if evidence.exists() else ())]
    return sum(1 for e in lines if e["invariant"] == G0[0] and [e["writer_id"], e["incarnation"]] == me
               and (e.get("other_txn") or [None, None])[:2] == me)


def live_history(port: int) -> dict[tuple[str, str], int]:
    """The live counts of the invariants the audit recomputes."""
    audited = set(HISTORY) | {Invariant.LSO_STUCK.value}
    return {k: v for k, v in violations(port).items() if k[0] in audited}


# -- a real Prometheus -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "vigil-rules.yml"
DASHBOARD = ROOT / "grafana" / "vigil-dashboard.json"


class Prometheus:
    """The Debian package's Prometheus scraping one target every 2 s with the shipped rule file."""

    def __init__(self, tmp: Path, target_port: int, port: int) -> None:
        import shutil

        binary = shutil.which("prometheus")
        assert binary, "prometheus is missing: ./test.sh installs the Debian package"
        self.port = port
        (tmp / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "vigil", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
        }))
        self.proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=(tmp / "prometheus.log").open("w"),
            stderr=subprocess.STDOUT)

    def query(self, expr: str) -> dict:
        import urllib.parse

        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())

    def alerts(self) -> dict[str, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/alerts", timeout=10) as resp:
            return {a["labels"]["alertname"]: a["state"] for a in json.loads(resp.read())["data"]["alerts"]}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
