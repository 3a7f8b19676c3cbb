"""A chaos scenario, as data: writers, topic settings, a timeline of faults and what to expect.

Scenarios ship as YAML in ``monitor/chaos/scenarios/`` (S1–S10 of the chaos matrix and a few
more); a user adds their own with ``--scenario FILE``. A scenario names no node: targets are
resolved when a step runs (``leader``: the leader of canary partition 0 then; ``leader:P``;
``leader_off_ledger``: the leader of a canary partition that leads none of the ledger partitions
holding the run's entries (a preferred leader first), so that cutting it off stalls the canary,
not the record of its outcomes; ``followers``: the other replicas of partition 0; ``coordinator``: the transaction coordinator
of the first transactional writer; ``controller``: the active controller; ``node:N``; ``all``),
and a step may bind what it resolved to a name (``as: victim``) for later steps (``target:
victim``) — the node killed is the node started again, wherever leadership went meanwhile.

Expectations are about Kafka's promise as Vigil classes it (:mod:`invariants.promises`), never a
second, hand-written copy of it: ``promise_kept: true`` means no violation in the ``guaranteed``
class (losses a configuration allows are ``at_risk`` and keep the promise); ``zero`` and
``nonzero`` list invariants that must (not) be counted. A bad scenario is refused with the key
and the reason.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from invariants.catalog import Invariant
from invariants.errors import VigilError
from monitor.config import TopicConfig, WriterConfig
from monitor.model_input import read_yaml, validated

FAULTS: dict[str, str] = {
    "kill": "SIGKILL the target node(s): no controlled shutdown",
    "stop": "controlled shutdown (SIGTERM) of the target node(s)",
    "start": "start the target node(s) again and wait until each is back in the cluster's metadata "
             "(args: ready_s, 120)",
    "restart": "controlled restart of the target node(s)",
    "pause": "SIGSTOP the target node(s) (SIGCONT after duration_s)",
    "resume": "SIGCONT the target node(s)",
    "isolate": "cut the target from its peers and the controllers; clients still reach it",
    "isolate_controller": "cut the target from the controller quorum only",
    "isolate_replication": "cut the target's replication links only",
    "cut_link": "cut one directed link (args: src, dst, kind replication|controller)",
    "heal": "heal every cut link",
    "rolling_restart": "restart every node in turn, waiting for the cluster to be ready between",
    "full_disk": "make the target's log appends fail as on a full disk (prlimit --fsize)",
    "wait_isr_shrunk": "wait until the ISR of canary partition 0 — or with a target, of every canary partition "
                       "the target leads — is its leader alone (args: timeout_s)",
    "wait": "do nothing for a while (args: seconds): time a step from the end of the one before",
}
UNDOABLE = {"pause", "isolate", "isolate_controller", "isolate_replication", "cut_link", "full_disk"}
NEEDS_TARGET = set(FAULTS) - {"heal", "rolling_restart", "cut_link", "wait_isr_shrunk", "wait"}
BUILTIN_TARGETS = re.compile(r"^(leader(:\d+)?|leader_off_ledger|followers|coordinator|controller|node:\d+|all)$")
NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"


class ScenarioError(VigilError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, populate_by_name=True)


class Step(_Model):
    at_s: float = Field(..., ge=0, description="seconds after the fault phase began")
    fault: Literal[tuple(FAULTS)] = Field(..., description="what to do (see FAULTS)")  # type: ignore[valid-type]
    target: str = Field("", description="leader[:P], leader_off_ledger, followers, coordinator, controller, node:N, all, or a bound name")
    bind: str = Field("", alias="as", pattern=r"^$|" + NAME, description="name the resolved node(s) for later steps")
    duration_s: float | None = Field(None, gt=0, description="undo after this long (pause, isolate*, cut_link, full_disk)")
    args: dict[str, Any] = Field(default_factory=dict, description="fault-specific arguments")

    @model_validator(mode="after")
    def _consistent(self) -> "Step":
        if self.fault in NEEDS_TARGET and not self.target:
            raise ValueError(f"{self.fault} needs a target")
        if self.duration_s is not None and self.fault not in UNDOABLE:
            raise ValueError(f"{self.fault} cannot be undone after duration_s")
        if self.fault == "cut_link" and not {"src", "dst"} <= set(self.args):
            raise ValueError("cut_link needs args src and dst")
        if self.fault == "wait" and not isinstance(self.args.get("seconds"), (int, float)):
            raise ValueError("wait needs args seconds (a number)")
        return self


class Expect(_Model):
    promise_kept: bool | None = Field(None, description="Kafka's promise kept (no guaranteed-class violation); "
                                                         "null: whatever happens")
    zero: list[str] = Field(default_factory=list, description="invariants that must not be counted")
    nonzero: list[str] = Field(default_factory=list, description="invariants that must be counted")

    @model_validator(mode="after")
    def _known(self) -> "Expect":
        known = {i.value for i in Invariant}
        for name in self.zero + self.nonzero:
            if name not in known:
                raise ValueError(f"unknown invariant {name!r}")
        return self


class Scenario(_Model):
    name: str = Field(..., pattern=NAME)
    title: str = Field(..., min_length=1)
    field_report: str = Field("", description="what the field reports measured for this scenario")
    writers: list[WriterConfig] = Field(..., min_length=1)
    topic: TopicConfig = Field(default_factory=TopicConfig, description="canary topic settings (as `canary:`; "
                                                                         "each run names its own topic)")
    elr: Literal["on", "off", "any"] = Field("any", description="Eligible Leader Replicas must be on/off")
    watch: dict[str, Any] = Field(default_factory=dict, description="watch settings for the run (as `watch:`)")
    warmup_s: float = Field(20.0, ge=0)
    recovery_s: float = Field(30.0, ge=0)
    timeline: list[Step] = Field(..., min_length=1)
    expect: Expect = Field(default_factory=Expect)

    @model_validator(mode="after")
    def _timeline(self) -> "Scenario":
        bound: set[str] = set()
        last = 0.0
        for i, step in enumerate(self.timeline):
            if step.at_s < last:
                raise ValueError(f"timeline[{i}]: at_s {step.at_s:g} is before the step above it ({last:g})")
            last = step.at_s
            if step.target and not BUILTIN_TARGETS.match(step.target) and step.target not in bound:
                raise ValueError(f"timeline[{i}]: target {step.target!r} is neither built in nor bound by an "
                                 "earlier step")
            if step.target == "coordinator" and not any(w.transactional for w in self.writers):
                raise ValueError(f"timeline[{i}]: target coordinator needs a transactional writer")
            if step.bind:
                bound.add(step.bind)
        return self

    @property
    def fault_s(self) -> float:
        """How long the fault timeline runs (its last step, plus that step's duration)."""
        return max(s.at_s + (s.duration_s or 0) for s in self.timeline)


def parse(data: Any, source: str) -> Scenario:
    return validated(Scenario, data, "scenario", source, ScenarioError)


def load_file(path: str | Path) -> Scenario:
    p = Path(path)
    return parse(read_yaml(p, "scenario", ScenarioError), str(p))


def builtin() -> dict[str, Scenario]:
    """The shipped scenarios by name, in file order (S1..S10, then the others)."""
    out: dict[str, Scenario] = {}
    for entry in sorted(resources.files("monitor.chaos").joinpath("scenarios").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            s = parse(yaml.safe_load(entry.read_text()), f"scenarios/{entry.name}")
            out[s.name] = s
    return out


def select(names: list[str], files: list[Path] | None = None) -> list[Scenario]:
    """Built-in scenarios by name plus scenario files; an unknown name lists the known ones."""
    known = builtin()
    extra = [load_file(f) for f in files or []]
    known.update({s.name: s for s in extra})
    missing = [n for n in names if n not in known]
    if missing:
        raise ScenarioError(f"unknown scenario {', '.join(missing)} (have {', '.join(known)})")
    return [known[n] for n in names] + [s for s in extra if s.name not in names]
