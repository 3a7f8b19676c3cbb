"""A SASL password read from a file, and given again to every open client when the file changes."""

from __future__ import annotations

import threading

import pytest

from monitor import clients
from monitor.client_config import spark_source
from monitor.config import ConfigError, parse
from monitor.credentials import CredentialWatch


def secured(tmp_path, ledger_file: bool = False) -> dict:
    (tmp_path / "pw").write_text("first\n")
    doc = {"kafka": {"bootstrap_servers": "b:9093",
                     "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u",
                                  "sasl_password_file": str(tmp_path / "pw")}}}
    if ledger_file:
        (tmp_path / "lpw").write_text("ledger-first")
        doc["ledger"] = {"kafka": {"bootstrap_servers": "l:9093",
                                   "security": {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                                "sasl_username": "l", "sasl_password_file": str(tmp_path / "lpw")}}}
    return doc


class Client:
    """Stands for a librdkafka client in monitor.clients.OPEN."""

    def __init__(self) -> None:
        self.given: list[tuple[str, str]] = []

    def set_sasl_credentials(self, user: str, password: str) -> None:
        self.given.append((user, password))


def test_one_of_password_and_password_file(tmp_path):
    doc = secured(tmp_path)
    with pytest.raises(ConfigError, match="one of sasl_password and sasl_password_file"):
        parse({**doc, "kafka": {**doc["kafka"], "security": {**doc["kafka"]["security"], "sasl_password": "x"}}})
    sec = doc["kafka"]["security"]
    del sec["sasl_password_file"]
    with pytest.raises(ConfigError, match="one of sasl_password and sasl_password_file"):
        parse(doc)


def test_the_file_is_read_when_a_client_or_the_spark_source_is_configured(tmp_path):
    cfg = parse(secured(tmp_path))
    assert cfg.kafka.librdkafka("b:9093")["sasl.password"] == "first"
    (tmp_path / "pw").write_text("second")
    assert 'password="second"' in spark_source(cfg, ledger=False)["kafka.sasl.jaas.config"]
    (tmp_path / "pw").unlink()
    with pytest.raises(ConfigError, match=r"sasl_password_file .*pw: No such file"):
        cfg.kafka.librdkafka("b:9093")


def test_a_changed_file_is_given_to_every_open_client_of_its_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(clients, "OPEN", {False: clients.weakref.WeakSet(), True: clients.weakref.WeakSet()})
    canary, ledger = Client(), Client()
    clients.OPEN[False].add(canary)
    clients.OPEN[True].add(ledger)
    said: list[str] = []
    cfg = parse(secured(tmp_path, ledger_file=True))
    watch = CredentialWatch(cfg, threading.Event(), said.append)
    watch.look()
    assert canary.given == ledger.given == [] and said == []  # nothing changed yet
    (tmp_path / "pw").write_text("second\n")
    watch.look()
    watch.look()
    assert canary.given == [("u", "second")] and ledger.given == []  # the ledger has a cluster of its own
    (tmp_path / "lpw").write_text("ledger-second")
    watch.look()
    assert ledger.given == [("l", "ledger-second")]
    (tmp_path / "pw").unlink()
    watch.look()
    assert canary.given == [("u", "second")]  # an unreadable file keeps the password read before
    assert "kafka.security.sasl_password_file changed: 1 open client(s)" in said[0]
    assert "No such file" in said[-1] and "keeping the password read before" in said[-1]
    assert not any("second" in line for line in said)  # never the password itself
    samples = {s.labels["cluster"]: s.value for fam in watch.collect() for s in fam.samples}
    assert samples == {"canary": 1, "ledger": 1}


def test_without_a_ledger_cluster_of_its_own_the_ledger_clients_get_the_canary_password(tmp_path, monkeypatch):
    monkeypatch.setattr(clients, "OPEN", {False: clients.weakref.WeakSet(), True: clients.weakref.WeakSet()})
    ledger = Client()
    clients.OPEN[True].add(ledger)
    watch = CredentialWatch(parse(secured(tmp_path)), threading.Event(), lambda _line: None)
    (tmp_path / "pw").write_text("second")
    watch.look()
    assert ledger.given == [("u", "second")]
    assert CredentialWatch(parse({}), threading.Event()).start() is None  # no file, no thread


def test_an_empty_file_being_rewritten_is_read_again_later_and_a_closed_client_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setattr(clients, "OPEN", {False: clients.weakref.WeakSet(), True: clients.weakref.WeakSet()})

    class Closed(Client):
        def set_sasl_credentials(self, user: str, password: str) -> None:
            raise RuntimeError("Handle has been closed")

    closed, open_ = Closed(), Client()
    clients.OPEN[False].update((closed, open_))
    watch = CredentialWatch(parse(secured(tmp_path)), threading.Event(), lambda _line: None)
    (tmp_path / "pw").write_text("")
    watch.look()
    assert open_.given == []
    (tmp_path / "pw").write_text("second")
    watch.look()
    assert open_.given == [("u", "second")] and watch.reloads == {"canary": 1}


def test_the_spark_source_quotes_backslashes_and_quotes_of_the_password(tmp_path):
    doc = secured(tmp_path)
    (tmp_path / "pw").write_text('a\\b"c')
    jaas = spark_source(parse(doc), ledger=False)["kafka.sasl.jaas.config"]
    assert 'password="a\\\\b\\"c";' in jaas
