"""`vigil chaos` on the session cluster: `heal` undoes every fault a run can leave behind; S3 runs."""

from __future__ import annotations

import json
import resource

from monitor.chaos.heal import limit_file_size
from tests.integration.watch_helpers import HISTORY
from tests.integration.helpers import vigil


def test_chaos_heal_undoes_every_fault_a_run_can_leave_behind(cluster_ready):
    cluster = cluster_ready["cluster"]
    cluster.pause(1)
    limit_file_size(cluster.node_pid(2), 1 << 40)  # far above anything written: nothing fails meanwhile
    cluster.block_link(2, 3, "replication")
    cluster.stop_node(3)
    status = cluster.status()
    assert [n.state for n in status.nodes] == ["paused", "running", "stopped"] and status.blocked_links
    out = vigil(cluster_ready["config_path"], "chaos", "heal", timeout=180).stdout
    assert "node 1 resumed" in out and "node 2 file-size limit lifted" in out
    assert "1 cut link(s) healed" in out and "node(s) 3 started" in out, out
    status = cluster.status()
    assert [n.state for n in status.nodes] == ["running"] * 3 and not status.blocked_links
    assert all(n.listening for n in status.nodes)
    assert resource.prlimit(cluster.node_pid(2), resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY
    again = vigil(cluster_ready["config_path"], "chaos", "heal", timeout=60).stdout
    assert "nothing to undo" in again


def test_s3_acks_all_with_the_leader_killed_keeps_the_promise_and_writes_its_report(cluster_ready, tmp_path):
    """S3 through `vigil chaos run`: kill -9 the leader under an acks=all idempotent writer, start
    it again; zero violations, live == audit, the report's files written (about 2.5 min)."""
    out = vigil(cluster_ready["config_path"], "chaos", "run", "S3", "--report", str(tmp_path), "--json",
                "--metrics-port", "29480", timeout=600)
    (result,) = json.loads(out.stdout.strip().splitlines()[-1])
    verdict = result["verdict"]
    assert verdict["passed"] and verdict["promise_kept"] and verdict["live_equals_audit"], verdict
    assert result["live"]["violations"] == {}
    assert [s["fault"] for s in result["steps"]] == ["kill", "start"]
    assert result["steps"][0]["nodes"] == result["steps"][1]["nodes"]  # the node killed is the one started
    assert sum(w["outcomes"]["acked"] for w in result["writers"]) > 5000
    report = (tmp_path / "S3" / "report.md").read_text()
    assert report.startswith("# S3: ") and "**Verdict: PASSED**" in report
    row = json.loads((tmp_path / "S3" / "result.json").read_text())["row"]
    assert row["lost"] == 0 and row["promise"] == "kept" and row["acks"] == "all"
    assert cluster_ready["cluster"].status().blocked_links == []


def test_s4_acks1_with_the_leader_cut_off_keeps_the_promise_whatever_it_loses_and_live_equals_audit(cluster_ready, tmp_path):
    """S4 through `vigil chaos run`: the field reports' acks=1 case on KRaft — the leader cut off from
    its peers and the controllers for 30 s while clients still reach it. Whatever it loses (measured:
    2,978 of 23,626 acked writes in one run, none in another, depending on when the writers learn of
    the new leader) is classed at_risk (the promise kept), and live == audit (about 2 min)."""
    out = vigil(cluster_ready["config_path"], "chaos", "run", "S4", "--report", str(tmp_path), "--json",
                "--metrics-port", "29481", timeout=600)
    (result,) = json.loads(out.stdout.strip().splitlines()[-1])
    verdict = result["verdict"]
    assert verdict["passed"] and verdict["promise_kept"] and verdict["live_equals_audit"], verdict
    # history invariants: only losses the configuration allowed; liveness (a cut-off leader may stall
    # its readers, as S5's row says) is a signal, not a promise
    live = {k: n for k, n in result["live"]["violations"].items() if k.split("/")[0] in HISTORY}
    assert set(live) <= {"lost_write/read_committed/at_risk", "lost_write/read_uncommitted/at_risk"}, live
    assert [s["fault"] for s in result["steps"]] == ["isolate", f"undo isolate {result['steps'][0]['nodes'][0]}"]
    row = json.loads((tmp_path / "S4" / "result.json").read_text())["row"]
    assert row["lost"] == max(live.values(), default=0) and row["promise"] == "kept" and row["acks"] == "1"
    assert "| undo isolate" in (tmp_path / "S4" / "report.md").read_text()
