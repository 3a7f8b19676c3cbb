"""`vigil status`: a running monitor's /ready and /metrics summed up; exit 1 when it cannot help."""

from __future__ import annotations

import subprocess
import sys

from monitor.status import Status, lines, summarize


def test_a_monitor_that_cannot_save_its_state_is_shown_not_ready_with_what_it_found():
    samples = {
        ("vigil_last_batch_timestamp_seconds", ()): 990.0, ("vigil_batches_total", ()): 12,
        ("vigil_query_restarts_total", ()): 3, ("vigil_state_bytes", ()): 3 * 2**20,
        ("vigil_records_checked_total", (("isolation", "read_committed"),)): 900,
        ("vigil_records_checked_total", (("isolation", "read_uncommitted"),)): 1000,
        ("vigil_violations_total", (("durability", "guaranteed"), ("invariant", "lost_write"),
                                    ("isolation", "read_committed"))): 2,
        ("vigil_violations_total", (("durability", "guaranteed"), ("invariant", "duplicate"),
                                    ("isolation", "read_committed"))): 0,
        ("vigil_state_save_failures_total", (("reason", "ENOSPC"),)): 4,
        ("vigil_client_errors_total", (("client", "spark"), ("kind", "authentication"))): 1,
        ("vigil_client_errors_total", (("client", "prober"), ("kind", "transport"))): 7,
        ("vigil_tls_certificate_expiry_timestamp_seconds", (("certificate", "ca"),)): 1000 + 3 * 86400,
    }
    st = summarize("127.0.0.1:9464", (False, "checker state not saved (ENOSPC)"), samples, now=1000.0)
    assert not st.healthy and st.last_batch_age_s == 10.0 and st.query_restarts == 3
    assert st.records_checked == {"read_committed": 900, "read_uncommitted": 1000}
    assert st.violations == {"lost_write/read_committed/guaranteed": 2}  # zero series left out
    assert st.state_save_failures == {"ENOSPC": 4} and st.client_refusals == {"spark/authentication": 1}
    assert st.certificate_expires_in_days == 3.0
    text = "\n".join(lines(st))
    assert text.splitlines()[0] == "monitor at 127.0.0.1:9464: NOT READY (checker state not saved (ENOSPC))"
    assert "state NOT SAVED: ENOSPC x4" in text and "spark/authentication x1" in text
    assert "lost_write/read_committed/guaranteed 2" in text


def test_a_monitor_that_does_not_answer_exits_1_naming_where_it_was_asked():
    assert lines(Status("127.0.0.1:1", reason="refused")) == ["monitor at 127.0.0.1:1: not answering (refused)"]
    proc = subprocess.run([sys.executable, "-m", "monitor", "status", "--address", "127.0.0.1:1", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and '"answering": false' in proc.stdout and "Traceback" not in proc.stderr


def test_failures_of_the_past_are_said_as_such_once_the_monitor_is_ready_again():
    samples = {("vigil_state_save_failures_total", (("reason", "EFBIG"),)): 3,
               ("vigil_client_errors_total", (("client", "admin"), ("kind", "authorization"))): 2}
    text = "\n".join(lines(summarize("h:1", (True, "ready"), samples, now=0.0)))
    assert "NOT SAVED" not in text and "state saves that failed since the start: EFBIG x3 (saved since)" in text
    assert "refused by the cluster since the start: admin/authorization x2" in text


def test_a_ledger_that_does_not_answer_is_said_with_the_writers_waiting_for_it():
    samples = {("vigil_ledger_reachable", ()): 0.0,
               ("vigil_ledger_wait_seconds", (("writer", "idempotent"),)): 42.4,
               ("vigil_ledger_wait_seconds", (("writer", "txn"),)): 0.0}
    st = summarize("127.0.0.1:9464", (True, "ok"), samples, now=1000.0)
    assert not st.healthy and st.ledger_waits_s == {"idempotent": 42.4}
    said = [line for line in lines(st) if line.startswith("ledger")]
    assert said == ["ledger UNREACHABLE: the canary is paused, nothing is judged; writers waiting for it: "
                    "idempotent 42 s (see docs/runbooks.md#vigilledgerunavailable)"]
    back = summarize("127.0.0.1:9464", (True, "ok"), {("vigil_ledger_reachable", ()): 1.0}, now=1000.0)
    assert back.healthy and not [line for line in lines(back) if line.startswith("ledger")]


def test_a_monitor_bound_to_an_ipv6_address_is_asked_there(tmp_path):
    from prometheus_client import CollectorRegistry, Counter

    from monitor.watch import http

    registry = CollectorRegistry()
    Counter("vigil_batches", "batches", registry=registry).inc(3)
    server = http.serve("::1", 0, registry, lambda: (True, "ready"))
    try:
        port = server.server_address[1]
        config = tmp_path / "vigil.yaml"
        config.write_text(f"metrics: {{bind: '::1', port: {port}}}\nstate_dir: {tmp_path / 'state'}\n")
        proc = subprocess.run([sys.executable, "-m", "monitor", "status", "--json", "--config", str(config)],
                              capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert '"answering": true' in proc.stdout and f'"[::1]:{port}"' in proc.stdout, (proc.stdout, proc.stderr)
