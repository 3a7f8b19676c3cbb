"""Who may do what on the secured local cluster: the canary principal of a Vigil config (its
``kafka.security`` SCRAM user) is created or given its current password, and granted exactly what
Vigil's clients need — nothing on other topics, no cluster-wide rights.

- its canary, ledger and EOS output topics: create, write, read, describe, describe their
  configuration (the promise class of a write comes from the topic's settings);
- its transactional ids (prefixed ``vigil-``, and ``<eos.group>-``): write, describe;
- its groups (prefixed ``vigil-``, and the group and EOS canaries' groups; readers use ``assign()``
  and commit nothing, the group members and the EOS worker commit): read, describe.

Applied through the admin API as the cluster's super user, after the brokers are up; idempotent.
"""

from __future__ import annotations

from typing import Callable

from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
    ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)

from monitor.config import Config

PREFIX = "vigil-"
TOPIC_OPERATIONS = (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE,
                    AclOperation.DESCRIBE_CONFIGS)


def canary_acls(cfg: Config) -> list[AclBinding]:
    """The ACLs the canary principal of ``cfg`` needs."""
    principal = f"User:{cfg.kafka.security.sasl_username}"

    def allow(kind: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation) -> AclBinding:
        return AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)

    topics = sorted({cfg.canary.name, cfg.ledger.topic, cfg.eos.output_topic, cfg.groups.observation_topic})
    return ([allow(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, op) for t in topics for op in TOPIC_OPERATIONS]
            + [allow(ResourceType.TRANSACTIONAL_ID, prefix, ResourcePatternType.PREFIXED, op)
               for prefix in sorted({PREFIX, f"{cfg.eos.group}-"}) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
            + [allow(ResourceType.GROUP, PREFIX, ResourcePatternType.PREFIXED, op)
               for op in (AclOperation.READ, AclOperation.DESCRIBE)]
            + [allow(ResourceType.GROUP, group, ResourcePatternType.LITERAL, op)
               for group in sorted({cfg.groups.group, cfg.eos.group}) for op in (AclOperation.READ, AclOperation.DESCRIBE)])


def grant_canary(admin_conf: dict, cfg: Config, progress: Callable[[str], None] = lambda _m: None,
                 timeout: float = 30.0) -> None:
    """Create (or give its current password to) the config's SCRAM user and add its ACLs (the
    config's validation made sure a secured cluster's config names one)."""
    sec = cfg.kafka.security
    password = sec.password()
    assert sec.sasl_username and password is not None
    admin = AdminClient(admin_conf)
    upsert = UserScramCredentialUpsertion(sec.sasl_username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    for fut in admin.alter_user_scram_credentials([upsert], request_timeout=timeout).values():
        fut.result()
    for fut in admin.create_acls(canary_acls(cfg), request_timeout=timeout).values():
        fut.result()
    progress(f"secured cluster: user {sec.sasl_username} may use {cfg.canary.name} and {cfg.ledger.topic}")


def up_for(cfg: Config, progress: Callable[[str], None] = lambda _m: None, timeout: float | None = None):
    """The local cluster of ``cfg`` up (only what is not running is started); on a secured one,
    the config's canary principal is (re)created and granted its ACLs. Returns the status."""
    from monitor.cluster.local_cluster import LocalCluster

    cluster = LocalCluster(cfg.cluster, progress)
    status = cluster.up(timeout)
    if cluster.tls is not None:
        grant_canary(cluster.admin_conf(), cfg, progress)
    return status
