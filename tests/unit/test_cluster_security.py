"""The secured local cluster's pure parts: server properties, key material, the canary's ACLs."""

import ipaddress
import stat

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12

from invariants.errors import VigilError
from monitor.cluster.access import canary_acls
from monitor.cluster.layout import ClusterLayout
from monitor.cluster.tls import ensure_tls
from monitor.config import ClusterConfig, parse


def test_a_secured_cluster_puts_scram_over_tls_on_the_client_listener_only():
    props = ClusterLayout(ClusterConfig(security="sasl_ssl"), proxied=False).server_properties(1, "/d")
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_SSL,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["listener.name.client.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert "User:ANONYMOUS" in props["super.users"].split(";")  # the internal listeners: brokers must register
    plain = ClusterLayout(ClusterConfig(), proxied=False).server_properties(1, "/d")
    assert plain["listener.security.protocol.map"].startswith("CLIENT:PLAINTEXT") and "authorizer.class.name" not in plain


def test_key_material_is_made_once_owner_only_and_valid_for_loopback(tmp_path):
    tls = ensure_tls(tmp_path / "tls", ["vigil-node-1"])
    again = ensure_tls(tmp_path / "tls", ["vigil-node-1"])
    assert again == tls and tls.admin_password != tls.keystore_password
    for f in (tls.broker_p12, tmp_path / "tls" / "secrets.json"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    key, cert, chain = pkcs12.load_key_and_certificates(tls.broker_p12.read_bytes(), tls.keystore_password.encode())
    ca = x509.load_pem_x509_certificate(tls.ca_pem.read_bytes())
    assert key is not None and [c.subject for c in chain] == [ca.subject] and cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert {"localhost", "vigil-node-1"} <= set(sans.get_values_for_type(x509.DNSName))
    assert (tls.expires_at() - cert.not_valid_before_utc).days >= 364
    assert tls.admin_password not in tls.ca_pem.read_text()


def test_the_canary_principal_gets_its_own_topics_ids_and_groups_and_nothing_cluster_wide():
    cfg = parse({"kafka": {"security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                        "sasl_username": "canary", "sasl_password": "x"}},
                 "canary": {"name": "c1"}, "ledger": {"topic": "l1"}, "eos": {"output_topic": "e1"},
                 "groups": {"observation_topic": "g1"}}, "t.yaml")
    acls = canary_acls(cfg)
    assert {a.principal for a in acls} == {"User:canary"}
    topics = {(a.name, a.operation) for a in acls if a.restype == ResourceType.TOPIC}
    assert {n for n, _ in topics} == {"c1", "l1", "e1", "g1"}
    assert all(a.resource_pattern_type == ResourcePatternType.LITERAL for a in acls if a.restype == ResourceType.TOPIC)
    assert AclOperation.ALL not in {a.operation for a in acls} and AclOperation.DELETE not in {op for _, op in topics}
    assert not any(a.restype == ResourceType.BROKER for a in acls)  # the cluster resource
    # the application canaries' groups default to the canary topic's names (c1-group, c1-eos), granted
    # literally; the EOS worker's transactional id is <eos.group>-<instance id>
    assert {(a.restype, a.name, a.resource_pattern_type) for a in acls if a.restype != ResourceType.TOPIC} == {
        (ResourceType.TRANSACTIONAL_ID, "vigil-", ResourcePatternType.PREFIXED),
        (ResourceType.TRANSACTIONAL_ID, "c1-eos-", ResourcePatternType.PREFIXED),
        (ResourceType.GROUP, "vigil-", ResourcePatternType.PREFIXED),
        (ResourceType.GROUP, "c1-group", ResourcePatternType.LITERAL),
        (ResourceType.GROUP, "c1-eos", ResourcePatternType.LITERAL)}


def test_a_secured_cluster_without_a_scram_canary_principal_is_a_config_error_naming_the_keys():
    with pytest.raises(VigilError, match="kafka.security.protocol SASL_SSL and sasl_mechanism SCRAM-SHA-512"):
        parse({"cluster": {"security": "sasl_ssl"}}, "t.yaml")
    with pytest.raises(VigilError, match="SCRAM-SHA-512"):
        parse({"cluster": {"security": "sasl_ssl"}, "kafka": {"security": {
            "protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p"}}}, "t.yaml")
