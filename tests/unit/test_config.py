import re
from pathlib import Path

import pytest

from monitor.config import ConfigError, load, parse
from monitor.config_reference import reference_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults_are_valid():
    cfg = parse({})
    assert cfg.embedded and cfg.metrics.port == 9464 and cfg.metrics.bind == "127.0.0.1"
    assert [w.name for w in cfg.writers] == ["idempotent", "txn"]
    assert cfg.writers[1].transactional and cfg.writers[1].transaction.abort_ratio == 0.3


@pytest.mark.parametrize("data, key, reason", [
    ({"canary": {"partitons": 3}}, "canary.partitons", "unknown key"),
    ({"writers": [{"name": "w", "acks": "2"}]}, "writers.0.acks", "'0', '1' or 'all'"),
    ({"writers": [{"name": "w", "acks": 1}]}, "writers.0", "idempotence requires acks=all"),
    ({"writers": [{"name": "w", "record_size": 10}]}, "writers.0.record_size", "greater than or equal to 48"),
    ({"writers": [{"name": "w"}, {"name": "w"}]}, "(top level)", "repeated: w"),
    ({"cluster": {"nodes": 0}}, "cluster.nodes", "greater than or equal to 1"),
    ({"kafka": {"security": {"protocol": "SASL_SSL"}}}, "kafka.security", "sasl_mechanism is required"),
    ({"metrics": {"port": "x"}}, "metrics.port", "valid integer"),
    ({"cluster": {"client_port_base": 40000}}, "cluster", "ephemeral range 32768-60999"),
])
def test_errors_name_the_key_and_reason(data, key, reason):
    with pytest.raises(ConfigError) as exc:
        parse(data, "t.yaml")
    msg = str(exc.value)
    assert f"{key}:" in msg and reason in msg and "t.yaml" in msg


def test_yaml_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("canary: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(bad)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "missing.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load(top)


def test_secrets_reach_the_client_but_are_never_printed():
    cfg = parse({"kafka": {"bootstrap_servers": "b:9092", "security": {
        "protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u", "sasl_password": "hunter2",
        "ssl_key_password": "k3y"}}})
    conf = cfg.kafka.librdkafka("b:9092")
    assert conf["sasl.password"] == "hunter2" and conf["ssl.key.password"] == "k3y"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    for text in (repr(cfg), str(cfg.model_dump()), cfg.model_dump_json()):
        assert "hunter2" not in text and "k3y" not in text


def test_ledger_is_always_strongly_durable():
    cfg = parse({"canary": {"unclean_leader_election": True, "min_insync_replicas": 1}})
    assert cfg.canary.topic_configs()["unclean.leader.election.enable"] == "true"
    assert cfg.ledger.topic_configs() == {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                                          "retention.ms": str(7 * 24 * 3600 * 1000),  # an explicit retention
                                          "message.timestamp.type": "LogAppendTime"}  # the brokers' clock


def test_readme_config_table_matches_the_code():
    text = README.read_text()
    table = reference_markdown()
    assert table in text, "README config table is stale: paste `vigil config reference`"
    keys = re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)
    assert "writers[].transaction.abort_ratio" in keys and "kafka.security.sasl_password" in keys


def test_invariants_doc_is_generated_from_the_module_docstrings():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", README.parent / "scripts" / "update_readme_tables.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.INVARIANTS_DOC.read_text() == gen.invariants_markdown(), \
        "docs/invariants.md is stale: run python scripts/update_readme_tables.py"


def test_env_references_are_expanded_and_a_missing_one_names_the_key(tmp_path, monkeypatch):
    from monitor.config import load

    path = tmp_path / "v.yaml"
    path.write_text("kafka:\n  security:\n    protocol: SASL_SSL\n    sasl_mechanism: PLAIN\n"
                    "    sasl_username: vigil\n    sasl_password: ${VIGIL_TEST_PW}\n")
    monkeypatch.setenv("VIGIL_TEST_PW", "s3cret")
    assert load(path).kafka.security.sasl_password.get_secret_value() == "s3cret"
    monkeypatch.delenv("VIGIL_TEST_PW")
    with pytest.raises(ConfigError, match=r"kafka.security.sasl_password: environment variable VIGIL_TEST_PW"):
        load(path)


def test_a_config_written_for_a_child_run_reads_back_the_same_secrets_included(tmp_path):
    """bench --live, soak and chaos write a config for the `vigil run` they start: model_dump masks
    secrets, so a secured cluster's password would be '**********' there."""
    import os
    import stat

    from monitor.config import to_document, write_document

    cfg = parse({"kafka": {"bootstrap_servers": "b:9093",
                           "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                        "sasl_username": "u", "sasl_password": "s3cret", "ssl_key_password": "k"}},
                 "ledger": {"kafka": {"bootstrap_servers": "l:9093",
                                      "security": {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                                   "sasl_username": "l", "sasl_password": "l3dger"}}}})
    assert parse(to_document(cfg)) == cfg
    path = tmp_path / "child.yaml"
    write_document(cfg, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load(path) == cfg
