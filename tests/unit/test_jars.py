import os

import pytest

from monitor.cluster import jars


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("VIGIL_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(jars.ResolveError, match="Maven \\(mvn\\) is not installed"):
        jars.kafka_broker_jars("4.1.1")


def test_failed_resolve_shows_mavens_output(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text("#!/bin/sh\necho 'Could not resolve org.apache.kafka:kafka_2.13:9.9.9'\nexit 1\n")
    mvn.chmod(0o755)
    monkeypatch.setenv("VIGIL_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(jars.ResolveError) as exc:
        jars.kafka_broker_jars("9.9.9")
    assert "resolving kafka-9.9.9 with Maven failed (exit 1)" in str(exc.value)
    assert "Could not resolve" in str(exc.value)
    assert not (tmp_path / "cache" / "kafka-9.9.9" / ".complete").exists()


def test_a_complete_cache_is_used_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("VIGIL_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no mvn: must not be needed
    done = tmp_path / "cache" / "kafka-1.0"
    done.mkdir(parents=True)
    (done / ".complete").write_text("x.jar\n")
    assert jars.kafka_broker_jars("1.0") == done
