"""The live checker on the real cluster with real Spark: clean runs, drills, restarts."""

from __future__ import annotations

import json
import time
from collections import Counter

import yaml

from monitor.chaos.heal import lift_file_size_limit, limit_file_size
from monitor.drill_table import DRILL_KINDS
from tests.drill_rows import drill_row
from tests.integration.helpers import read_all, vigil, vigil_json
from tests.integration.watch_helpers import (
    DASHBOARD, G0, RULES, Background, Prometheus, audit_counts, expected_checked, live_history, mapped_class_archives,
    metrics_up, nonzero,
    own_cycles, safety, sample, violations, wait_for, watch_config,
)


def test_clean_two_minute_run_has_no_violations_and_checks_every_acked_record_through_a_full_disk(
        cluster_ready, tmp_path):
    """A clean `vigil run` whose own volume fills up for a while (a file-size limit on the monitor's
    process: its state and evidence writes fail with EFBIG, as with ENOSPC): one clear error line,
    a metric, /metrics answering with what was saved, no crash; once space is back every batch is
    applied again — every acked record checked exactly once, nothing counted twice. Two
    transactional writers on the same partitions: whatever write cycles (G0, which Kafka allows)
    they show, live == audit; nothing else is counted. The EOS pipeline canary runs too (its Java
    worker aborting every 5th transaction): no eos_loss, no eos_duplicate, live or in its audit,
    over every record it judged; where it resumed after each abort is exported. So does the
    consumer-group canary (three member processes): no group_skip, group_rewind or rebalance_stall,
    live or in its audit, over every record read_committed holds."""
    writers = [{"name": "idempotent", "rate": 200}, {"name": "txn", "transactional": True, "rate": 40},
               {"name": "txn2", "transactional": True, "rate": 40}]
    cfg, path = watch_config(cluster_ready, tmp_path, "clean", 29471, writers=writers,
                             eos={"enabled": True, "output_topic": "it-clean-eos-out", "group": "vigil-it-clean-eos"},
                             groups={"enabled": True, "group": "vigil-it-clean-group",
                                     "observation_topic": "it-clean-group-obs"})
    run = Background(path, "run", "--duration", "120", "--json", name="run")
    port = cfg.metrics.port
    wait_for(lambda: metrics_up(port), 90, "the first batch")
    # Spark's driver JVM started from the class-data archive the test command's bootstrap made
    assert any("/spark-cds/" in a for a in mapped_class_archives(run.proc.pid)), mapped_class_archives(run.proc.pid)
    wait_for(lambda: (sample(port, "vigil_aborted_records_read_total", isolation="read_uncommitted") or 0) > 0,
             90, "aborted records seen by read_uncommitted")
    assert safety(violations(port)) == {}
    wait_for(lambda: (sample(port, "vigil_eos_after_abort_total", client="java", position="advance") or 0) > 0, 90,
             "the EOS worker's first abort")
    # the volume fills: any write past the run's log size + 512 KiB fails, so the state's save does
    # and the log stays writable (with room for the Spark JVM, not limited, to log each failed
    # query's stack trace into it). Not a multiple of the state: it levels off at about 1 MB.
    room = 2**19

    def limit_below_state() -> int | None:
        limit = run.err.stat().st_size + room
        return limit if (sample(port, "vigil_state_bytes") or 0) > limit + 2**17 else None

    limit = wait_for(limit_below_state, 60, "a state larger than the run's log and its room")
    limit_file_size(run.proc.pid, limit)
    failures = wait_for(lambda: sample(port, "vigil_state_save_failures_total", reason="EFBIG"), 30,
                        "a failed save on /metrics")
    frozen = sample(port, "vigil_records_checked_total", isolation="read_uncommitted")
    status = vigil(path, "status", "--json", check=False, timeout=60)  # what an operator asks first
    assert status.returncode == 1, status.stderr
    told = json.loads(status.stdout)
    assert told["answering"] and not told["ready"] and told["reason"] == "checker state not saved (EFBIG)"
    assert told["state_save_failures"]["EFBIG"] >= 1
    assert [k for k in told["violations"] if not k.startswith(G0[0] + "/")] == []
    time.sleep(10)
    assert sample(port, "vigil_records_checked_total", isolation="read_uncommitted") == frozen  # nothing unsaved shown
    assert (sample(port, "vigil_state_save_failures_total", reason="EFBIG") or 0) >= failures
    lift_file_size_limit(run.proc.pid)
    wait_for(lambda: (sample(port, "vigil_records_checked_total", isolation="read_uncommitted") or 0) > frozen, 90,
             "checking again once space is back")
    assert wait_for(lambda: vigil(path, "status", check=False, timeout=60).returncode == 0, 60, "ready again")
    assert safety(violations(port)) == {}
    assert run.wait(400) == 0, run.tail()
    err = run.err.read_text()
    assert "checker state not saved: cannot save" in err and "File too large (EFBIG)" in err, run.tail()
    summary = run.stdout_json()["checker"]
    expected = expected_checked(cfg)
    assert expected["read_committed"] < expected["read_uncommitted"]  # aborted transactions exist
    assert summary["records_checked"] == expected
    cycles = summary["violations"].pop(f"{G0[0]}/{G0[1]}/at_risk", 0)  # the only class a write cycle has
    assert summary["violations"] == {}
    assert summary["aborted_records_read"] == expected["read_uncommitted"] - expected["read_committed"]
    audit = vigil_json(path, "audit")
    assert nonzero(audit_counts(audit)) == nonzero({G0: cycles})  # whatever cycles occurred, the audit's too
    assert audit["records_checked"] == expected
    assert audit["read_committed"]["eos_loss"] == audit["read_committed"]["eos_duplicate"] == 0
    eos = json.loads(vigil(path, "eos", "audit", "--json", timeout=300).stdout.strip().splitlines()[-1])
    # the worker consumed everything read_committed holds before it stopped, and all was judged
    assert eos["judged_records"] == eos["source_records"] == expected["read_committed"], eos
    assert audit["read_committed"]["group_skip"] == audit["read_committed"]["group_rewind"] == 0
    assert audit["read_committed"]["rebalance_stall"] == 0
    group = json.loads(vigil(path, "group", "audit", "--json", timeout=300).stdout.strip().splitlines()[-1])
    # the members consumed everything read_committed holds before they stopped, and all was judged
    assert group["judged_records"] == group["reference_records"] == expected["read_committed"], group
    assert group["malformed_observations"] == 0 and group["drills"] == []
    print(f"write cycles between the two transactional writers in 120 s: {cycles}; EOS records judged "
          f"{eos['judged_records']}; group canary records judged {group['judged_records']}, redeliveries "
          f"{group['redeliveries']}, rebalances {group['rebalances']}")


def test_every_drill_moves_exactly_its_row_alerts_fire_and_audit_agrees(cluster_ready, tmp_path):
    """Also the Prometheus acceptance: a real Prometheus scrapes this run with the shipped rules;
    every dashboard panel query returns data on the clean run, and the drills fire their alerts."""
    cfg, path = watch_config(cluster_ready, tmp_path, "drills", 29472)
    port = cfg.metrics.port
    run = Background(path, "run", name="run")
    prom = Prometheus(tmp_path, port, 29490)
    try:
        wait_for(lambda: metrics_up(port), 90, "the first batch")
        wait_for(lambda: prom.query("vigil_up == 1")["data"]["result"], 60, "Prometheus scraping vigil_up")
        dash = json.loads(DASHBOARD.read_text())

        def panels_without_data() -> list[tuple[str, str]]:
            empty = []
            for panel in dash["panels"]:
                for target in panel["targets"]:
                    answer = prom.query(target["expr"])
                    assert answer["status"] == "success", (panel["title"], answer)
                    if not answer["data"]["result"]:
                        empty.append((panel["title"], target["expr"]))
            return empty

        # (a rate() needs two scrapes in its window: asked until every panel has data, at most 60 s)
        wait_for(lambda: not panels_without_data(), 60, "data in every dashboard panel", interval=2,
                 show=panels_without_data)
        for annotation in dash["annotations"]["list"]:
            assert prom.query(annotation["expr"])["status"] == "success"
        assert not {a for a, state in prom.alerts().items() if state == "firing"}, prom.alerts()
        rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
        alert_for = {r["labels"]["invariant"]: r["alert"] for r in rules if "invariant" in r["labels"]}
        total: Counter = Counter()
        for kind in DRILL_KINDS:
            count = 2
            before = violations(port)
            args = ["drill", kind, "--count", str(count), "--partition", "1"]
            if kind == "lso_stuck":
                # held well past the 6 s threshold: the prober lists the LSO once per round, and a
                # round took 2-3.7 s here under the suite's load (held 12 s, the count was missed once in CI, once here)
                args += ["--hold", "16"]
            report = vigil_json(path, *args)
            want = drill_row(kind, count)
            assert {(e["invariant"], e["isolation"]): e["count"] for e in report["expected"]} == want
            done = time.monotonic()

            def moved():
                now = violations(port)
                return nonzero({k: now[k] - before.get(k, 0) for k in now})

            def found() -> bool:
                if kind != "g0_write_cycle":
                    return moved() == want
                # the drill's own cycles exactly; a canary transaction written during its four round
                # trips may be ordered both ways against its transactions too (real cycles, counted)
                m = moved()
                return (m.pop(G0, 0) >= count and m == {}
                        and own_cycles(cfg.evidence_path(), report["writer_id"], report["incarnation"]) == count)

            wait_for(found, 10, f"{kind}: {want}", show=moved)
            assert time.monotonic() - done <= 10.5
            time.sleep(2)  # nothing else moves afterwards either
            assert found(), kind
            total.update(moved())
        live = live_history(port)
        assert nonzero(live) == dict(total)
        evidence = [json.loads(line) for line in cfg.evidence_path().read_text().splitlines()]
        assert len(evidence) == sum(violations(port).values())
        for record in evidence:
            assert {"invariant", "isolation", "topic", "topic_id", "partition", "offsets", "writer_id", "seq",
                    "txn_id", "leader", "detected_at", "incident", "batch_id"} <= set(record)
        assert {r["topic"] for r in evidence if r["partition"] >= 0} == {cfg.canary.name}
        want_alerts = {alert_for[inv] for inv, _iso in total}
        wait_for(lambda: all(prom.alerts().get(a) == "firing" for a in want_alerts), 60,
                 f"alerts {sorted(want_alerts)} firing")
    finally:
        prom.stop()
        run.stop()
    audit = audit_counts(vigil_json(path, "audit"))
    assert nonzero(audit) == nonzero(live)


def test_counts_survive_kill9_and_drills_during_downtime_are_found(cluster_ready, tmp_path):
    """Counts restored across a kill -9 of the watch, drills made while it was down found once; the
    EOS pipeline canary (`vigil eos run` beside it) judged live through the restart: its drills'
    eos_loss and eos_duplicate exactly as injected and as `vigil audit` finds them; so is the
    consumer-group canary (`vigil group run` beside it): its group_skip and group_rewind drills."""
    cfg, path = watch_config(cluster_ready, tmp_path, "restart", 29473,
                             writers=[{"name": "idempotent", "rate": 200}],
                             watch={"evidence": {"topic": "it-restart-evidence"}},
                             eos={"enabled": True, "output_topic": "it-restart-eos-out",
                                  "group": "vigil-it-restart-eos"},
                             groups={"enabled": True, "group": "vigil-it-restart-group",
                                     "observation_topic": "it-restart-group-obs"})
    port = cfg.metrics.port
    # written until the drills of the EOS pipeline and the group canary were found (each needs
    # records still being written): a fixed 90 s ran out in CI, where the first batch came 55 s after
    # the watch's start and the restarted watch's only after the writer had stopped
    writer = Background(path, "produce", "--duration", "600", name="produce")
    watch = Background(path, "watch", name="watch1")
    pipeline = group = None
    try:
        wait_for(lambda: metrics_up(port), 90, "the first batch")
        pipeline = Background(path, "eos", "run", "--json", name="eos")
        group = Background(path, "group", "run", name="group")
        vigil_json(path, "drill", "duplicate", "--count", "2")
        # both isolations: the read_committed source may reach the drill a batch later, and a
        # snapshot taken between the two would expect the late ones among the downtime's drills
        both = [("duplicate", "read_committed"), ("duplicate", "read_uncommitted")]
        wait_for(lambda: all(violations(port)[k] == 2 for k in both), 60, "both duplicates")
        before = violations(port)
        checked_before = sample(port, "vigil_records_checked_total", isolation="read_committed")
        watch.kill9()
        vigil_json(path, "drill", "reorder", "--count", "2")
        vigil_json(path, "drill", "lost_write", "--count", "1")
        watch = Background(path, "watch", name="watch2")
        first = wait_for(lambda: violations(port), 60, "/metrics after the restart")
        assert first == before  # restored before /metrics answered: never reset, never doubled
        assert sample(port, "vigil_records_checked_total", isolation="read_committed") >= checked_before
        # the EOS pipeline's and the group canary's drills, judged live by the restarted watch (asked
        # at once: each needs records still being written)
        vigil(path, "eos", "drill", "eos_duplicate")
        vigil(path, "eos", "drill", "eos_loss")
        vigil(path, "group", "drill", "group_skip", "--member", "m0")
        vigil(path, "group", "drill", "group_rewind", "--member", "m1")
        want = dict(before)
        for k in [("reorder", "read_committed"), ("reorder", "read_uncommitted")]:
            want[k] += 2
        for k in [("lost_write", "read_committed"), ("lost_write", "read_uncommitted")]:
            want[k] += 1
        # (the restarted watch's first new batch: measured 60 s after its start on this machine alone,
        # 116 s beside the writer, the EOS pipeline and the group canary's members)
        canaries = ("eos_duplicate", "eos_loss", "group_skip", "group_rewind")
        wait_for(lambda: {k: n for k, n in violations(port).items() if k[0] not in canaries}
                 == {k: n for k, n in want.items() if k[0] not in canaries}, 180,
                 "the drills made during the downtime", show=lambda: violations(port))
        wait_for(lambda: violations(port)[("eos_duplicate", "read_committed")] == 1
                 and violations(port)[("eos_loss", "read_committed")] > 0, 90, "the EOS drills found live",
                 show=lambda: violations(port))
        wait_for(lambda: violations(port)[("group_skip", "read_committed")] > 0
                 and violations(port)[("group_rewind", "read_committed")] > 0, 90, "the group drills found live",
                 show=lambda: violations(port))
        assert writer.stop() == 0, writer.tail()  # (SIGTERM: it ends cleanly, every write decided)
        assert pipeline.stop() == 0, pipeline.tail()
        assert group.stop() == 0, group.tail()
        told = vigil(path, "group", "audit", "--json", check=False)  # (exit 1: it found the drills)
        group_drills = {d["d"]: d for d in json.loads(told.stdout.strip().splitlines()[-1])["drills"]}
        want[("group_skip", "read_committed")] = len(group_drills["group_skip"]["offsets"])
        want[("group_rewind", "read_committed")] = len(group_drills["group_rewind"]["offsets"])
        drills = pipeline.stdout_json()["drills"]
        assert [d["offset"] for d in drills if d["kind"] == "eos_duplicate"], drills
        want[("eos_duplicate", "read_committed")] = 1
        want[("eos_loss", "read_committed")] = sum(d["records"] for d in drills if d["kind"] == "eos_loss")
        wait_for(lambda: violations(port) == want, 60, "the EOS pipeline judged to its end", show=lambda: violations(port))
        time.sleep(5)
        assert violations(port) == want
        live = live_history(port)
        checked = {iso: sample(port, "vigil_records_checked_total", isolation=iso)
                   for iso in ("read_committed", "read_uncommitted")}
    finally:
        for side in (pipeline, group):
            if side is not None:
                side.stop()
        watch.stop()
        writer.stop()
    assert nonzero(audit_counts(vigil_json(path, "audit"))) == nonzero(live)
    # the evidence topic holds one record per evidence line: a replayed batch overwrote its own keys
    lines = cfg.evidence_path().read_text().splitlines()
    records = read_all(cfg.kafka.bootstrap_servers, "it-restart-evidence", "read_committed")
    def ident(text):
        r = json.loads(text)
        return r["batch_id"], r["index"], r["invariant"], r["isolation"], r["partition"], r["seq"]

    assert len(lines) == sum(want.values())
    ends = [r for r in records if r.key and r.key.endswith(b":end")]  # one per write: how many lines
    assert ends and sum(int(r.value) for r in ends) >= len(lines)
    assert {ident(r.value) for r in records if r not in ends} == {ident(line) for line in lines}

    # the state torn (a crash on a failing disk) and the evidence file gone with it: a clear refusal
    # naming the recovery command; `vigil state rebuild --from topic` counts the evidence topic's
    # violations, and the watch reads the retained logs again from their start without counting twice
    state_file = cfg.checkpoint_dir() / "vigil-state.json"
    state_file.write_bytes(state_file.read_bytes()[:200])
    refused = vigil(path, "watch", check=False, timeout=180)
    assert refused.returncode == 2 and "vigil state rebuild" in refused.stderr, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    cfg.evidence_path().unlink()
    report = vigil_json(path, "state", "rebuild", "--from", "topic")
    assert sum(report["violations"].values()) == sum(want.values()) and report["starting_offsets"] == "earliest"
    watch = Background(path, "watch", name="watch3")
    try:
        assert wait_for(lambda: violations(port), 90, "/metrics after the rebuild") == want
        wait_for(lambda: all(sample(port, "vigil_records_checked_total", isolation=iso) == n
                             for iso, n in checked.items()), 180, "the retained logs read again",
                 show=lambda: [sample(port, "vigil_records_checked_total", isolation=iso) for iso in checked])
        time.sleep(3)
        assert violations(port) == want  # every violation found again, none counted twice
    finally:
        watch.stop()
    assert len(cfg.evidence_path().read_text().splitlines()) == sum(want.values())
