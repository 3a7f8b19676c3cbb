"""One chaos run: fresh topics, writers and the checker (`vigil run`), a warm-up, the fault
timeline, a recovery period, writers stopped and the checker drained, `vigil audit`, the verdict
and the report. Whatever happens — an error, Ctrl-C — the cluster is healed before it returns."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from monitor import child_run, client_config, clients
from monitor.canary.runner import writer_instance_id
from monitor.chaos import faults
from monitor.chaos.heal import heal_cluster
from monitor.chaos.sampler import Sampler
from monitor.chaos.scenario import Scenario, ScenarioError
from monitor.chaos.targets import Resolver
from monitor.chaos.verdict import Verdict, audit_counts, judge, live_counts, vanished_beyond_audit
from monitor.cluster import features
from monitor.cluster.local_cluster import LocalCluster
from monitor.config import Config, own_application_canaries, parse, to_document, write_document
from monitor.child_run import first_batch

VIGIL = [sys.executable, "-m", "monitor"]
STOP_TIMEOUT_S = 240.0  # writers wait for their last outcomes, then the checker drains
FIRST_BATCH_TIMEOUT_S = 240.0  # Spark starting on a loaded machine


@dataclass
class RunResult:
    scenario: Scenario
    run_dir: Path
    config: Config
    started_at: float
    steps: list[dict[str, Any]] = field(default_factory=list)  # what was done, when (s after the faults began)
    summary: dict[str, Any] = field(default_factory=dict)  # `vigil run --json`
    audit: dict[str, Any] = field(default_factory=dict)  # `vigil audit --json`
    verdict: Verdict | None = None
    phases: dict[str, float] = field(default_factory=dict)  # phase -> start, s after the run began
    elr: str = ""  # Eligible Leader Replicas as the cluster had it: on | off

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario.name, "title": self.scenario.title, "run_dir": str(self.run_dir),
                "spec": self.scenario.model_dump(mode="json", by_alias=True),
                "canary_topic": self.config.canary.name, "elr": self.elr, "phases": self.phases, "steps": self.steps,
                "writers": self.summary.get("writers", []), "live": self.summary.get("checker", {}),
                "audit": {k: self.audit.get(k) for k in ("by_durability", "lost_writes_by_cause", "lost_writes_by_writer",
                                                         "unconfirmed_missing", "undecided",
                                                         "records_checked", "expired_unread")}
                | ({"groups": self.audit["groups"]} if "groups" in self.audit else {}),
                "verdict": self.verdict.to_json() if self.verdict else None}


def run_config(base: Config, scenario: Scenario, run_dir: Path, stamp: str, metrics_port: int) -> Config:
    """The run's own config: the base config's cluster and clients, the scenario's writers, topic
    settings and watch settings, fresh topic names and state under ``run_dir``. The application
    canaries (``groups``, ``eos``) run when the base config enables them, with fresh groups and
    topics of their own."""
    data = to_document(base)
    slug = scenario.name.lower()
    prefix = f"vigil-chaos-{slug}-{stamp}"
    data.update({
        "instance_id": f"chaos-{slug}-{stamp}",
        "state_dir": str(run_dir / "state"),
        "canary": {**scenario.topic.model_dump(mode="json"), "name": prefix},
        "ledger": {**data.get("ledger", {}), "topic": f"{prefix}-ledger"},
        "writers": [w.model_dump(mode="json") for w in scenario.writers],
        "watch": {**data.get("watch", {}), **scenario.watch, "evidence": {}},
        "metrics": {**data.get("metrics", {}), "port": metrics_port},
        **{name: {**data.get(name, {}), **names} for name, names in own_application_canaries(prefix).items()},
    })
    path = run_dir / "vigil.yaml"
    write_document(data, path)
    return parse(data, str(path))


def quiet_admin(cfg: Config) -> AdminClient:
    """A fresh admin client, for one question: a long-lived one keeps asking the node its metadata
    named controller, which may be the broker just killed, and a call stuck on a dead broker is left
    behind with it. Quiet: brokers going away is the point here, and librdkafka would say so on
    stderr each time."""
    return AdminClient({**client_config.admin(cfg), "log_level": 2})


def resolver(cfg: Config, cluster: LocalCluster) -> Resolver:
    def admin() -> AdminClient:
        return quiet_admin(cfg)

    def describe(topic: str) -> dict[int, clients.PartitionView]:
        return clients.describe_partitions(admin(), topic, within_s=60.0)

    def ledger_leaders() -> frozenset[int]:  # the run's ledger is fresh: its entries are where the log grew
        desc = describe(cfg.ledger.topic)
        ends = clients.log_ends(admin(), cfg.ledger.topic, len(desc))
        return frozenset(desc[p].leader for p, end in ends.items() if end > 0)

    txn = next((w for w in cfg.writers if w.transactional), None)
    return Resolver(describe, cluster.active_controller,
                    tuple(n.node_id for n in cluster.layout.nodes), cfg.canary.name,
                    f"vigil-{writer_instance_id(cfg, txn)}" if txn else "", ledger_leaders)


def eligible_leader_replicas(cluster: LocalCluster) -> str:
    """"on" or "off", as the running cluster has the feature finalized (asked of a running node)."""
    for node in cluster.layout.nodes:
        try:
            levels = features.finalized_features(cluster.config.host, node.client_port)
        except (OSError, ValueError):  # not up, or no metadata loaded yet: ask the next one
            continue
        return "on" if levels.get(features.ELR_FEATURE, 0) >= 1 else "off"
    raise ScenarioError("no node of the local cluster answered ApiVersions: is it up? (`vigil cluster up`)")


class Runner:
    def __init__(self, base: Config, cluster: LocalCluster, say: Callable[[str], None],
                 metrics_port: int = 9470) -> None:
        self.base, self.cluster, self.say, self.metrics_port = base, cluster, say, metrics_port
        self.sampler: Sampler | None = None

    def run(self, scenario: Scenario, out_dir: Path) -> RunResult:
        stamp = time.strftime("%Y%m%d%H%M%S")
        run_dir = out_dir / scenario.name
        if run_dir.exists():  # an earlier run's checkpoint and checker state would be resumed
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        cfg = run_config(self.base, scenario, run_dir, stamp, self.metrics_port)
        result = RunResult(scenario, run_dir, cfg, time.time())
        healed = heal_cluster(self.cluster)
        if healed:
            self.say(f"{scenario.name}: healed what an earlier run left: {'; '.join(healed)}")
        result.elr = eligible_leader_replicas(self.cluster)
        if scenario.elr != "any" and scenario.elr != result.elr:
            raise ScenarioError(
                f"{scenario.name} needs Eligible Leader Replicas {scenario.elr}, and this cluster has it {result.elr} "
                f"(KIP-966 changes which replica an election may pick); format a cluster with "
                f"cluster.eligible_leader_replicas: {str(scenario.elr == 'on').lower()}")
        def leaders() -> dict[int, int]:
            return {p: v.leader for p, v in clients.describe_partitions(quiet_admin(cfg), cfg.canary.name, 3.0).items()}

        sampler = Sampler(f"http://127.0.0.1:{self.metrics_port}/metrics", leaders, run_dir / "timeline.jsonl")
        sampler.started = result.started_at
        self.sampler = sampler
        # its own session: a Ctrl-C at the terminal reaches only this runner, which heals the
        # cluster and then stops the run the way it stops cleanly (SIGTERM)
        proc = subprocess.Popen(VIGIL + ["run", "--json", "--config", str(run_dir / "vigil.yaml")],
                                stdout=(run_dir / "run.out").open("w"), stderr=(run_dir / "run.err").open("w"),
                                start_new_session=True)
        unhealed: Exception | None = None
        try:
            sampler.start()
            self._first_batch(result, proc)
            self._phase(result, "warm-up", scenario.warmup_s)
            self._timeline(result, cfg)
            heal_cluster(self.cluster)
            self._phase(result, "recovery", scenario.recovery_s)
        finally:
            # the run is stopped whatever happens here, and an error already on its way keeps its
            # own message (a failed heal once hid why a node had not come back)
            try:
                heal_cluster(self.cluster)
            except Exception as exc:  # noqa: BLE001 - said, and raised below if nothing else was
                unhealed = exc
                self.say(f"{scenario.name}: could not heal the cluster: {exc}")
            result.phases["stop"] = round(time.time() - result.started_at, 1)
            self.say(f"{scenario.name}: stopping the writers, then the checker drains")
            child_run.stop(proc, STOP_TIMEOUT_S, dump_to=run_dir / "threads.txt")
            sampler.finish()
        if unhealed is not None:
            raise ScenarioError(f"{scenario.name}: the cluster could not be healed after the faults: {unhealed}")
        if proc.returncode != 0:
            dumped = run_dir / "threads.txt"
            raise ScenarioError(f"{scenario.name}: `vigil run` exited with {proc.returncode}; see {run_dir / 'run.err'}"
                                + (f" and {dumped} (it did not stop within {STOP_TIMEOUT_S:.0f} s)" if dumped.exists() else ""))
        result.summary = json.loads((run_dir / "run.out").read_text().strip().splitlines()[-1])
        self.say(f"{scenario.name}: auditing the whole history")
        audit = subprocess.run(VIGIL + ["audit", "--json", "--config", str(run_dir / "vigil.yaml")],
                               capture_output=True, text=True, timeout=900)
        if audit.returncode != 0:
            raise ScenarioError(f"{scenario.name}: `vigil audit` failed: {audit.stderr.strip()[-2000:]}")
        result.audit = json.loads(audit.stdout.strip().splitlines()[-1])
        evidence = cfg.evidence_path()
        beyond = vanished_beyond_audit(
            (json.loads(line) for line in evidence.read_text().splitlines()) if evidence.exists() else (),
            result.audit.get("undecided_writes", []))
        result.verdict = judge(scenario, live_counts(result.summary), audit_counts(result.audit), beyond)
        return result

    def _first_batch(self, result: RunResult, proc: subprocess.Popen, timeout_s: float = FIRST_BATCH_TIMEOUT_S) -> None:
        """Wait until the checker completed its first micro-batch: the warm-up counts from a monitor
        that runs, not from one still starting Spark. (A fault that hit Spark's first batch in
        flight held it for the whole poll timeout: measured in CI, S3's leader kill then gave a
        30 s stalled_poll that a started monitor does not show.)"""
        if first_batch(self.metrics_port, proc, timeout_s):
            self.say(f"{result.scenario.name}: the checker runs ({time.time() - result.started_at:.0f} s after the start)")
            return
        raise ScenarioError(f"{result.scenario.name}: `vigil run` completed no micro-batch within {timeout_s:.0f} s; "
                            f"see {result.run_dir / 'run.err'}")

    def _phase(self, result: RunResult, name: str, seconds: float) -> None:
        result.phases[name] = round(time.time() - result.started_at, 1)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.say(f"{result.scenario.name}: {name}, {left:.0f} s left{self._live()}")
            time.sleep(min(10.0, left))

    def _live(self) -> str:
        """The live counts so far, for the progress line."""
        latest = self.sampler.latest if self.sampler else {}
        if not latest:
            return ""
        writes = ", ".join(f"{outcome} {int(n)}" for outcome, n in sorted(latest.get("writes", {}).items()) if n)
        v = {k: int(n) for k, n in latest.get("violations", {}).items() if n}
        return f" — writes: {writes or 'none yet'}; violations: {v or 'none'}"

    def _timeline(self, result: RunResult, cfg: Config) -> None:
        scenario = result.scenario
        result.phases["faults"] = round(time.time() - result.started_at, 1)
        begun = time.monotonic()
        res = resolver(cfg, self.cluster)
        bound: dict[str, tuple[int, ...]] = {}
        undos: list[tuple[float, str, Callable[[], None]]] = []

        def due_undos(until: float) -> None:
            for when, what, undo in sorted(u for u in undos if u[0] <= until):
                time.sleep(max(0.0, when - (time.monotonic() - begun)))
                undo()
                undos.remove((when, what, undo))
                result.steps.append({"at_s": round(time.monotonic() - begun, 1), "fault": f"undo {what}"})
                self.say(f"{scenario.name}: undo {what}")

        for i, step in enumerate(scenario.timeline):
            due_undos(step.at_s)
            time.sleep(max(0.0, step.at_s - (time.monotonic() - begun)))
            at = round(time.monotonic() - begun, 1)
            try:
                nodes, undo = faults.apply(
                    step, self.cluster, res, bound,
                    lambda m: self.say(f"{scenario.name}: step {i + 1}/{len(scenario.timeline)}: {m}"))
            except KafkaException as exc:  # asked for a minute: the cluster is not answering
                raise ScenarioError(f"{scenario.name}: step {i + 1} ({step.fault} {step.target or ''}): the cluster "
                                    f"did not answer: {exc.args[0].str()}") from exc
            result.steps.append({"at_s": at, "fault": step.fault, "target": step.target, "nodes": list(nodes),
                                 "took_s": round(time.monotonic() - begun - at, 1)})
            if undo is not None:
                undos.append((at + (step.duration_s or 0), f"{step.fault} {','.join(map(str, nodes))}", undo))
        due_undos(float("inf"))
