"""The chaos report: the field reports' row and report.md from a finished run."""

import json
from pathlib import Path

from monitor.chaos import report
from monitor.chaos.runner import RunResult
from monitor.chaos.scenario import builtin
from monitor.chaos.verdict import judge, live_counts
from monitor.config import parse


def test_a_run_becomes_a_row_and_a_report(tmp_path: Path):
    s4 = builtin()["S4"]
    cfg = parse({"state_dir": str(tmp_path / "state")}, "t")
    summary = {"writers": [{"outcomes": {"acked": 1000}}], "checker": {"violations": {
        "lost_write/read_committed/at_risk": 30, "lost_write/read_uncommitted/at_risk": 31}}}
    audit = {("lost_write", "read_committed", "at_risk"): 30, ("lost_write", "read_uncommitted", "at_risk"): 31}
    r = RunResult(s4, tmp_path, cfg, 0.0, steps=[{"at_s": 0.0, "fault": "isolate", "target": "leader", "nodes": [2]},
                                                 {"at_s": 30.0, "fault": "undo isolate 2"}],
                  summary=summary, verdict=judge(s4, live_counts(summary), audit))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "evidence.jsonl").write_text(
        "\n".join(json.dumps({"invariant": "lost_write", "seq": i}) for i in range(5)) + "\n")
    row = report.table_row(r)
    assert row == {"scenario": "S4", "acks": "1", "transactions": False, "min_isr": 1, "unclean": False,
                   "elr": "?", "fault": "isolate", "written": 1000, "acked": 1000, "lost": 31, "lost_pct": 3.1,
                   "duplicates": 0, "acks0_missing": 0, "promise": "kept", "passed": True}
    text = report.write(r).read_text()
    assert "**Verdict: PASSED**" in text and "| 30.0 | undo isolate 2 |  |  |" in text
    assert text.count('"invariant": "lost_write"') == report.EVIDENCE_LINES
    assert "Consumer-group canary" not in text and "groups" not in json.loads((tmp_path / "result.json").read_text())["audit"]
    assert json.loads((tmp_path / "result.json").read_text())["row"] == row
    # a matrix summarised again from the files: the same row, also for a scenario it does not know
    runs = tmp_path / "runs"
    (runs / "S4").mkdir(parents=True)
    (tmp_path / "result.json").rename(runs / "S4" / "result.json")
    assert report.rows_from(runs, {"S4": s4}) == [row] == report.rows_from(runs, {})


def test_the_matrix_is_one_table_over_every_run_and_names_those_that_could_not_run(tmp_path: Path):
    rows = [{"scenario": "S1", "acks": "0", "lost": 0, "passed": True},
            {"scenario": "S6", "error": "S6 needs Eligible Leader Replicas off, and this cluster has it on"},
            {"scenario": "S3", "acks": "all", "lost": 0, "passed": True}]
    text = report.write_matrix(rows, tmp_path / "m").read_text()
    assert "| scenario | acks | lost | passed |" in text and "| S1 | 0 | 0 | True |" in text
    assert "| S3 | all | 0 | True |" in text and "- **S6** could not run: S6 needs Eligible" in text
    assert json.loads((tmp_path / "m" / "matrix.json").read_text()) == rows


def test_a_run_with_the_group_canary_reports_what_the_faults_did_to_it(tmp_path: Path):
    s3 = builtin()["S3"]
    cfg = parse({"state_dir": str(tmp_path / "state")}, "t")
    group = {"group_skip": 0, "group_rewind": 0, "rebalance_stall": 1, "redeliveries": 4533, "observations": 900,
             "malformed_observations": 0, "reference_records": 31657, "judged_records": 31657, "offset_resets": 1,
             "observations_lost": 0, "rebalances": {"m0:session timed out": 1}, "drills": [], "findings": []}
    summary = {"writers": [{"outcomes": {"acked": 100}}], "checker": {"violations": {}}}
    r = RunResult(s3, tmp_path, cfg, 0.0, summary=summary, audit={"groups": group},
                  verdict=judge(s3, live_counts(summary), {}))
    text = report.write(r).read_text()
    assert "## Consumer-group canary" in text and "31657 of 31657 read_committed records" in text
    assert "4533 redeliveries" in text and "1 offset resets" in text and "m0:session timed out" in text
    assert json.loads((tmp_path / "result.json").read_text())["audit"]["groups"] == group
