"""`vigil status`: what a running monitor says about itself, from its own ``/ready`` and
``/metrics`` — whether it checks, how fresh it is, what it found, and what keeps it from working
(refused clients, a state it cannot save, certificates about to expire)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

Samples = dict[tuple[str, tuple], float]


@dataclass
class Status:
    address: str
    answering: bool = False
    ready: bool = False
    reason: str = ""  # /ready's words, or why the monitor could not be asked
    last_batch_age_s: float | None = None
    batches: int = 0
    query_restarts: int = 0
    records_checked: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)  # "invariant/isolation/durability" -> count (nonzero)
    state_bytes: int = 0
    ledger_held_rows: int = 0  # ledger entries held ahead of the readers (a catch-up)
    state_save_failures: dict[str, int] = field(default_factory=dict)
    client_refusals: dict[str, int] = field(default_factory=dict)  # "client/kind" -> count
    certificate_expires_in_days: float | None = None
    ledger_reachable: bool | None = None  # the prober's last look at the ledger (None: not exported)
    ledger_waits_s: dict[str, float] = field(default_factory=dict)  # writer -> its wait for the ledger, if any

    @property
    def healthy(self) -> bool:
        return self.answering and self.ready and self.ledger_reachable is not False

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "healthy": self.healthy}


def ask_ready(base: str) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(f"{base}/ready", timeout=5) as resp:
            return True, resp.read().decode().strip()
    except urllib.error.HTTPError as exc:  # 503: answering, not ready
        return False, exc.read().decode().strip()


def summarize(address: str, ready: tuple[bool, str], samples: Samples, now: float | None = None) -> Status:
    """A monitor's status from its /ready answer and its scraped /metrics."""
    now = time.time() if now is None else now
    st = Status(address, True, ready[0], ready[1])
    refusals: dict[str, int] = defaultdict(int)
    expiries = []
    for (name, labels), value in samples.items():
        lab = dict(labels)
        if name == "vigil_last_batch_timestamp_seconds" and value > 0:
            st.last_batch_age_s = round(now - value, 1)
        elif name == "vigil_batches_total":
            st.batches = int(value)
        elif name == "vigil_query_restarts_total":
            st.query_restarts = int(value)
        elif name == "vigil_records_checked_total":
            st.records_checked[lab["isolation"]] = int(value)
        elif name == "vigil_violations_total" and value:
            st.violations[f"{lab['invariant']}/{lab['isolation']}/{lab['durability']}"] = int(value)
        elif name == "vigil_state_bytes":
            st.state_bytes = int(value)
        elif name == "vigil_ledger_held_rows":
            st.ledger_held_rows = int(value)
        elif name == "vigil_state_save_failures_total" and value:
            st.state_save_failures[lab["reason"]] = int(value)
        elif name == "vigil_client_errors_total" and value and lab.get("kind") in ("authentication", "authorization",
                                                                                   "tls"):
            refusals[f"{lab['client']}/{lab['kind']}"] += int(value)
        elif name == "vigil_tls_certificate_expiry_timestamp_seconds":
            expiries.append(value)
        elif name == "vigil_ledger_reachable":
            st.ledger_reachable = bool(value)
        elif name == "vigil_ledger_wait_seconds" and value:
            st.ledger_waits_s[lab["writer"]] = round(value, 1)
    st.client_refusals = dict(refusals)
    if expiries:
        st.certificate_expires_in_days = round((min(expiries) - now) / 86400, 1)
    return st


def lines(st: Status) -> list[str]:
    """The status for a person: one line per subject, the problem first."""
    if not st.answering:
        return [f"monitor at {st.address}: not answering ({st.reason})"]
    out = [f"monitor at {st.address}: " + ("ready" if st.ready else f"NOT READY ({st.reason})")]
    age = "no batch yet" if st.last_batch_age_s is None else f"last batch {st.last_batch_age_s:.0f} s ago"
    checked = ", ".join(f"{iso} {n:,}" for iso, n in sorted(st.records_checked.items())) or "none"
    out.append(f"checking: {age}, {st.batches} batches, {st.query_restarts} query restart(s); records checked: "
               f"{checked}; state {st.state_bytes / 2**20:.2f} MiB"
               + (f"; catching up: {st.ledger_held_rows:,} ledger entries held ahead of the readers"
                  if st.ledger_held_rows else ""))
    out.append("violations: " + (", ".join(f"{k} {n}" for k, n in sorted(st.violations.items())) or "none"))
    if st.ledger_reachable is False or st.ledger_waits_s:
        waiting = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(st.ledger_waits_s.items())) or "none"
        out.append(("ledger UNREACHABLE: the canary is paused, nothing is judged" if st.ledger_reachable is False
                    else "ledger answering") + f"; writers waiting for it: {waiting} "
                   "(see docs/runbooks.md#vigilledgerunavailable)")
    if st.state_save_failures:  # counted since the monitor started: now, or before a save that worked
        failed = ", ".join(f"{r} x{n}" for r, n in st.state_save_failures.items())
        out.append(f"state NOT SAVED: {failed} (see docs/runbooks.md#vigilstatenotsaved)"
                   if "not saved" in st.reason and not st.ready else f"state saves that failed since the start: "
                   f"{failed} (saved since)")
    if st.client_refusals:
        out.append("refused by the cluster since the start: "
                   + ", ".join(f"{k} x{n}" for k, n in sorted(st.client_refusals.items())))
    if st.certificate_expires_in_days is not None:
        out.append(f"earliest TLS certificate expiry: in {st.certificate_expires_in_days} days")
    return out
