import pytest

from monitor.client_config import spark_source
from monitor.config import ConfigError, parse


def test_security_settings_reach_the_java_client_in_its_own_terms():
    cfg = parse({"kafka": {"bootstrap_servers": "k:9093", "security": {
        "protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "vigil",
        "sasl_password": 'pa"ss', "ssl_ca_location": "/etc/vigil/tls/ca.crt"}}})
    opts = spark_source(cfg, ledger=False)
    assert opts["kafka.bootstrap.servers"] == "k:9093"
    assert opts["kafka.security.protocol"] == "SASL_SSL" and opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                              'username="vigil" password="pa\\"ss";')
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.ssl.truststore.location"] == "/etc/vigil/tls/ca.crt"
    assert not any(k.startswith("kafka.sasl.username") or k == "kafka.ssl.ca.location" for k in opts)


def test_plaintext_has_only_the_bootstrap():
    assert spark_source(parse({"kafka": {"bootstrap_servers": "k:9092"}}), ledger=True) == {
        "kafka.bootstrap.servers": "k:9092", "kafka.security.protocol": "PLAINTEXT"}


def test_the_drivers_java_options_follow_the_log_configuration(tmp_path):
    from monitor.watch.spark import driver_java_options

    log = tmp_path / "log4j2.properties"
    logs = f"-Dlog4j2.configurationFile={log.resolve()}"
    assert driver_java_options(parse({}), log) == f"{logs} -XX:GCTimeRatio=4"
    cfg = parse({"watch": {"driver_java_options": " -XX:TieredStopAtLevel=1 -Dx=y ", "driver_gc_time_ratio": 0}})
    assert driver_java_options(cfg, log) == f"{logs} -XX:TieredStopAtLevel=1 -Dx=y"
    cfg = parse({"watch": {"driver_java_options": "-XX:GCTimeRatio=9"}})  # (the JVM takes the last: the user's)
    assert driver_java_options(cfg, log) == f"{logs} -XX:GCTimeRatio=4 -XX:GCTimeRatio=9"
    for other in ("-XX:+UseParallelGC", "-Xmx1g -XX:+UseZGC"):  # (G1's setting: another collector reads it otherwise)
        assert driver_java_options(parse({"watch": {"driver_java_options": other}}), log) == f"{logs} {other}"
    g1 = "-XX:+UseG1GC -XX:+UseStringDeduplication"
    assert driver_java_options(parse({"watch": {"driver_java_options": g1}}), log) == f"{logs} -XX:GCTimeRatio=4 {g1}"


def test_the_driver_maps_the_class_data_archive_once_there_is_one(tmp_path, monkeypatch):
    from monitor.cluster.java import Java
    from monitor.watch import cds
    from monitor.watch.spark import driver_java_options

    monkeypatch.setattr(cds, "CDS_DIR", tmp_path / "cds")
    java = Java("/usr/lib/jvm/java-17/bin/java", 17, 'openjdk version "17.0.15"')
    log = tmp_path / "log4j2.properties"
    cfg = parse({"watch": {"driver_java_options": "-XX:TieredStopAtLevel=1", "driver_gc_time_ratio": 0}})
    plain = f"-Dlog4j2.configurationFile={log.resolve()} -XX:TieredStopAtLevel=1"
    assert driver_java_options(cfg, log, java) == plain  # no archive yet: started as before
    archive = cds.archive_path(java)
    assert archive.parent == tmp_path / "cds" and archive.suffix == ".jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"x")
    assert driver_java_options(cfg, log, java) == (
        f"-Dlog4j2.configurationFile={log.resolve()} -XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1")
    off = parse({"watch": {"driver_java_options": "-XX:TieredStopAtLevel=1", "class_data_sharing": False,
                           "driver_gc_time_ratio": 0}})
    assert driver_java_options(off, log, java) == plain
    submitted = parse({"watch": {"driver_java_options": "-XX:TieredStopAtLevel=1", "spark_master": "",
                                 "driver_gc_time_ratio": 0}})
    assert driver_java_options(submitted, log, java) == plain  # spark-submit started the driver
    monkeypatch.setattr(cds, "find_java", lambda *_a, **_k: java)
    monkeypatch.setattr(cds.subprocess, "run", lambda *a, **k: pytest.fail("made again"))
    assert cds.build() == archive  # there already: not made again (no Spark started)


def test_the_archive_is_named_by_the_java_build_and_the_spark_installation():
    from monitor.cluster.java import Java
    from monitor.watch import cds

    first = cds.archive_path(Java("/usr/bin/env", 17, 'version "17.0.15"'))
    assert cds.archive_path(Java("/usr/bin/env", 17, 'version "17.0.15"')) == first
    # another build of the same Java: its JVM would refuse the archive
    assert cds.archive_path(Java("/usr/bin/env", 17, 'version "17.0.16"')) != first
    assert cds.archive_path(Java("/bin/sh", 17, 'version "17.0.15"')) != first


def test_find_java_keeps_what_the_jvm_said_of_its_build():
    from monitor.cluster.java import find_java

    java = find_java("", max_major=21)
    assert str(java.major) in java.version and "version" in java.version


class _Reader:
    """Spark's DataStreamReader as far as monitor.watch.spark.source uses it: the options it is given."""

    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def format(self, _name):
        return self

    def option(self, key, value):
        self.options[key] = value
        return self

    def load(self):
        return self

    def select(self, *_columns):
        return self


class _Column:
    """A column expression, as far as source builds them (no Spark context needed)."""

    def __call__(self, *_a):
        return self

    def __getattr__(self, _name):
        return self


def test_each_kafka_source_reads_with_the_configured_isolation_and_fetch_wait(monkeypatch):
    """kafka.fetch.max.wait.ms comes from watch.fetch_max_wait_ms (50 by default: Kafka's 500 held a
    batch's task that long when read_committed found nothing new), beside the isolation level."""
    from types import SimpleNamespace

    from monitor.watch import spark

    monkeypatch.setattr(spark, "F", _Column())
    for watch, wait in (({}, "50"), ({"fetch_max_wait_ms": 10}, "10"), ({"fetch_max_wait_ms": 500}, "500")):
        reader = _Reader()
        spark.source(SimpleNamespace(readStream=reader), parse({"watch": watch}), "t", "read_committed", 0)
        assert reader.options["kafka.fetch.max.wait.ms"] == wait
        assert reader.options["kafka.isolation.level"] == "read_committed" and reader.options["subscribe"] == "t"
        assert "maxRecordsPerPartition" not in reader.options  # (a canary source: one offset range per task)
    for watch, split in (({}, "40000"), ({"ledger_records_per_task": 500}, "500"),
                         ({"ledger_records_per_task": 0}, None),
                         ({"spark_master": "spark://127.0.0.1:7077"}, None),  # (tasks keep their executors there)
                         ({"spark_master": "spark://127.0.0.1:7077", "ledger_records_per_task": 500}, "500")):
        reader = _Reader()
        spark.source(SimpleNamespace(readStream=reader), parse({"watch": watch}), "l", "read_committed", 2, ledger=True)
        assert reader.options.get("maxRecordsPerPartition") == split
    with pytest.raises(ConfigError, match="watch.fetch_max_wait_ms: Input should be less than or equal to 500"):
        parse({"watch": {"fetch_max_wait_ms": 501}})
    with pytest.raises(ConfigError, match="watch.fetch_max_wait_ms: Input should be greater than or equal to 10"):
        parse({"watch": {"fetch_max_wait_ms": 0}})
