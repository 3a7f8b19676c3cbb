from monitor.client_config import spark_source
from monitor.config import parse


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
    assert driver_java_options(parse({}), log) == f"-Dlog4j2.configurationFile={log.resolve()}"
    cfg = parse({"watch": {"driver_java_options": " -XX:TieredStopAtLevel=1 -Dx=y "}})
    assert driver_java_options(cfg, log) == f"-Dlog4j2.configurationFile={log.resolve()} -XX:TieredStopAtLevel=1 -Dx=y"
