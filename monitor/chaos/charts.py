"""The chart of a chaos run (``timeline.png``): per second, canary writes by outcome and the
violations counted, ack and end-to-end latency, and who led each canary partition — with the
fault windows shaded and every step marked. Rendered with matplotlib's Agg backend (no display)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

OUTCOME_COLOURS = {"acked": "tab:green", "failed": "tab:red", "indeterminate": "tab:orange",
                   "unconfirmed": "tab:gray"}
# what ends a fault's window: an undo of it, or the step that reverses it on the same nodes
ENDED_BY = {"kill": ("start", "restart"), "stop": ("start", "restart"), "pause": ("resume",),
            "isolate": ("heal",), "isolate_controller": ("heal",), "isolate_replication": ("heal",),
            "cut_link": ("heal",), "full_disk": ("restart",)}


GAP_S = 3.0  # samples further apart than this: the line is broken, not drawn across


def per_second(samples: list[dict[str, Any]], section: str) -> tuple[list[float], dict[str, list[float]]]:
    """Rates per second of the cumulative totals under ``samples[i][section]`` (after a gap in the
    samples, the mean rate over it, with the line broken before)."""
    have = [s for s in samples if section in s]
    keys = sorted({k for s in have for k in s[section]})
    times, rates = [], {k: [] for k in keys}
    for a, b in zip(have, have[1:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        if dt > GAP_S and times:
            times.append(a["t"] + GAP_S / 2)
            for k in keys:
                rates[k].append(math.nan)
        times.append(b["t"])
        for k in keys:
            rates[k].append(max(0.0, (b[section].get(k, 0.0) - a[section].get(k, 0.0)) / dt))
    return times, rates


def latency(samples: list[dict[str, Any]], which: str, q: float = 0.99) -> tuple[list[float], list[float], list[float]]:
    """Per interval: the mean and the ``q`` quantile (the upper bound of the bucket that reaches
    it) of the observations made in that interval; intervals without any are left out."""
    have = [s for s in samples if which in s]
    times, means, quantiles = [], [], []
    for a, b in zip(have, have[1:]):
        n = b[which]["count"] - a[which]["count"]
        if n <= 0:
            continue
        times.append(b["t"])
        means.append((b[which]["sum"] - a[which]["sum"]) / n)
        bounds = sorted(((math.inf if le == "+Inf" else float(le)), c - a[which]["buckets"].get(le, 0.0))
                        for le, c in b[which]["buckets"].items())
        quantiles.append(next((le for le, c in bounds if c >= q * n), math.inf))
    return times, means, quantiles


def leader_series(samples: list[dict[str, Any]], partition: int, gap_s: float = GAP_S) -> tuple[list[float], list[float]]:
    """Who led ``partition`` at each sample (0: no leader), broken (NaN) where no answer came for
    more than ``gap_s``: a held line would claim a leader nobody reported."""
    xs: list[float] = []
    ys: list[float] = []
    for s in samples:
        if str(partition) not in s.get("leaders", {}):
            continue
        if xs and s["t"] - xs[-1] > gap_s:
            xs.append(xs[-1] + gap_s / 2)
            ys.append(math.nan)
        leader = s["leaders"][str(partition)]
        xs.append(s["t"])
        ys.append(float(leader) if leader >= 0 else 0.0)
    return xs, ys


def fault_windows(steps: list[dict[str, Any]], offset: float) -> tuple[list[tuple[float, float, str]],
                                                                         list[tuple[float, str]]]:
    """Windows (start, end, label) from a fault to what ends it — its undo, or the step reversing it
    on the same nodes (a start after a kill, a heal after a cut) — and the moments of the other
    steps (waits, restarts, undos)."""
    windows, marks = [], []
    for i, st in enumerate(steps):
        name, nodes = st["fault"], st.get("nodes") or []
        label = f"{name} {','.join(map(str, nodes))}".strip()
        if name not in ENDED_BY:
            if not name.startswith("undo ") and name not in ("start", "resume", "heal"):
                marks.append((offset + st["at_s"], label))
            continue
        end = None
        for later in steps[i + 1:]:
            f = later["fault"]
            if f == f"undo {label}" or (f in ENDED_BY[name] and (f == "heal" or later.get("nodes") == nodes)):
                end = later["at_s"]
                break
        if end is None:
            marks.append((offset + st["at_s"], label))
        else:
            windows.append((offset + st["at_s"], offset + end, label))
    return windows, marks


def render(samples: list[dict[str, Any]], steps: list[dict[str, Any]], phases: dict[str, float], title: str,
           out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2, 1.5]})
    windows, marks = fault_windows(steps, phases.get("faults", 0.0))
    for ax in axes:
        for start, end, _label in windows:
            ax.axvspan(start, end, color="tab:red", alpha=0.12, lw=0)
        for at, _label in marks:
            ax.axvline(at, color="tab:red", lw=1, ls="--", alpha=0.7)
        ax.grid(alpha=0.3)
    top = axes[0]
    for start, end, label in windows:
        top.annotate(label, (start, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="bottom", color="tab:red")
    for at, label in marks:
        top.annotate(label, (at, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="bottom", color="tab:red",
                     rotation=20)

    t, writes = per_second(samples, "writes")
    for outcome, ys in writes.items():
        if any(ys):
            top.plot(t, ys, label=outcome, color=OUTCOME_COLOURS.get(outcome), lw=1.2)
    top.set_ylabel("canary writes / s")
    top.legend(loc="upper right", fontsize=8)

    t, violations = per_second(samples, "violations")
    ax = axes[1]
    drawn = False
    for inv, ys in violations.items():
        if any(ys):
            ax.step(t, ys, where="post", label=inv, lw=1.2)
            drawn = True
    ax.set_ylabel("violations / s")
    if drawn:
        ax.legend(loc="upper right", fontsize=8, ncol=2)
    else:
        ax.text(0.5, 0.5, "no violation counted", transform=ax.transAxes, ha="center", va="center", color="gray")

    ax = axes[2]
    for which, colour, label in (("ack", "tab:blue", "ack"), ("e2e", "tab:purple", "produce→checked")):
        lt, means, p99 = latency(samples, which)
        if lt:
            ax.plot(lt, means, color=colour, lw=1, label=f"{label} mean")
            ax.plot(lt, [min(v, 120.0) for v in p99], color=colour, lw=1, ls=":", label=f"{label} p99 (bucket)")
    ax.set_yscale("log")
    ax.set_ylabel("latency (s)")
    ax.legend(loc="upper right", fontsize=8, ncol=2)

    ax = axes[3]
    parts = sorted({int(p) for s in samples for p in s.get("leaders", {})})
    for p in parts:
        xs, ys = leader_series(samples, p)
        ax.plot(xs, [y + 0.08 * p if y == y else y for y in ys], marker=".", ms=3, lw=1.2, label=f"partition {p}")
    ax.set_ylabel("leader node")
    nodes = sorted({int(v) for s in samples for v in s.get("leaders", {}).values() if v >= 0})
    ax.set_yticks([0, *nodes], ["none", *map(str, nodes)])
    if parts:
        ax.legend(loc="upper right", fontsize=8, ncol=len(parts))
    ax.set_xlabel("seconds since the run began (shaded: faults in force; dashed: one-off steps; "
                  "gaps: no answer)")
    for name, at in phases.items():
        axes[0].annotate(name, (at, 0.0), xycoords=("data", "axes fraction"), fontsize=7, color="gray",
                         va="bottom")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
