"""`vigil retire`: say in the ledger that a canary topic ID goes away on purpose."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Optional

import typer

from invariants.errors import VigilError
from invariants.ledger_format import Retire
from monitor import client_config, clients
from monitor.cli.common import ConfigOption, console, load_config, print_json
from monitor.ledger import LedgerWriter


class RetireError(VigilError):
    pass


def retire(
    topic_id: str = typer.Option("", "--topic-id", help="The topic ID to retire (default: the canary topic's "
                                                         "ID now)."),
    reason: str = typer.Option("", help="Why, for the evidence and the next engineer."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written, as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Retire the canary topic's current ID before deleting or recreating the topic on purpose.

    Deleting a topic breaks no Kafka promise, but Vigil cannot tell an operator's deletion from a
    broker that forgot the topic: without this, every acknowledged write still in the topic is
    counted lost_write (cause topic_vanished) once the topic is gone. This appends a `retire`
    entry to the ledger (synchronously): the checker and the audit then count those writes as
    vigil_expired_unread_total{reason="retired"}, and read nothing more of that ID. Retire first,
    then delete; running writers create the topic again with its configured settings (a new ID,
    checked as usual).
    """
    cfg = load_config(config)
    name = cfg.canary.name
    if not topic_id:
        info = clients.describe_topic(clients.admin(cfg), name)
        if info is None:
            raise RetireError(f"canary topic {name!r} does not exist: name the ID to retire with --topic-id")
        topic_id = info.topic_id
    instance = f"{cfg.resolved_instance_id()}-retire-{secrets.token_hex(4)}"
    producer = clients.producer(client_config.ledger_producer(cfg, instance), "ledger", cfg, ledger=True)
    ledger = LedgerWriter(producer, cfg.ledger.topic, instance, secrets.randbits(63), 0)
    ledger.append(Retire(name, topic_id, reason), sync=True)
    if as_json:
        print_json({"topic": name, "topic_id": topic_id, "reason": reason, "instance": instance})
        return
    console.print(f"retired {name} topic ID {topic_id}: its writes are no longer expected. Delete or recreate "
                  f"the topic now; running writers create it again (a new ID, checked as usual).")
