"""The outcome ledger's wire format: one frozen dataclass per entry kind, one encoder, one decoder.

Every writer appends entries to the ledger topic; everything that reads the ledger (the live
checker, the prober, the audit, the tests) decodes them here, and nothing builds or unpacks an
entry any other way. An entry is a :class:`LedgerEntry`: who wrote it (:class:`WriterRef`:
instance id, 64-bit writer id, incarnation), its number ``n`` (per writer, from 0, so a lost
entry is a detectable gap), the writer's clock ``ts_us``, and a body:

``Start``       the writer's topic (name, ID, partitions), its settings (acks, idempotence, ...)
                and the topic's durability settings as the writer read them
``Intent``      writes about to be sent (ranges of seqs per partition) and, for a transaction,
                its id, size and whether it is meant to be aborted — durable *before* the send
``Outcomes``    run-length encoded outcomes: seq ``first_seq + i`` got ``first_offset + i``
                (offset -1 unless acked), with the transaction id of the writes (0: none) and,
                for acks that went backwards or to 0, the log start offset listed after them
``TxnEnd``      a transaction's outcome (``committed``/``aborted`` only when that call returned)
``Checkpoint``  every few seconds: the topic and its settings as observed now (with each
                partition's log start offset), the writes still waiting for an outcome and the
                open transaction — so a reader that joins in the middle of the ledger
                (retention trimmed its head) knows where the writer stands
``Init``        the writer is about to initialise its producer (InitProducerId /
                ``init_transactions``): until its next intent it is stuck there if it stays
``Retire``      written by ``vigil retire``, not by a writer: the topic ID is retired on purpose;
                its writes are no longer expected anywhere
``Stop``        clean shutdown: every intent of this incarnation has an outcome

On the wire an entry is one JSON object (``{"v": 3, "instance", "writer_id", "inc", "n",
"ts_us", "kind", ...body}``; outcome runs are compact lists). Version 1 entries (Vigil 0.1:
no topic settings, no checkpoints, no transaction id on outcome runs) and version 2 entries (no
log starts, no ``init``/``retire``) are still read. JSON is not I/O: encoding and decoding are
pure.

``ts_us`` is the writer's clock. The time that counts for durations is the broker's: the ledger
topic is created with ``message.timestamp.type=LogAppendTime``, and whoever reads an entry passes
the record's timestamp to :func:`decode` as ``append_ts_us`` (not part of the encoded entry;
:attr:`LedgerEntry.time_us` falls back to the writer's clock where it is unknown). :func:`decode` returns a :class:`LedgerEntry` or raises
:class:`LedgerFormatError` saying what is wrong (an entry of an unknown version names it);
callers count those as malformed and carry on.
"""

from __future__ import annotations

import json
from typing import Any

from invariants.ledger_entries import (  # noqa: F401 - the entry types are part of this contract
    WriteOutcome, TxnOutcome, LedgerFormatError, WriterRef, WriterSettings, TopicSettings, Start, WriteRange,
    TxnInfo, Intent, OutcomeRun, Outcomes, TxnEnd, PendingWrites, OpenTxn, Checkpoint, Init, Retire, Stop,
    Body, KINDS, LedgerEntry,
)

LEDGER_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)


# -- encoding --------------------------------------------------------------------------------


def _settings_json(s: WriterSettings) -> dict[str, Any]:
    return {"name": s.name, "role": s.role, "acks": s.acks, "idempotence": s.idempotence,
            "transactional": s.transactional, "message_timeout_ms": s.message_timeout_ms,
            **({"outcome_within_ms": s.outcome_within_ms} if s.outcome_within_ms else {})}


def _topic_json(t: TopicSettings | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"replication_factor": t.replication_factor, "min_insync_replicas": t.min_insync_replicas,
            "unclean_leader_election": t.unclean_leader_election}


def _run_json(r: OutcomeRun) -> list[Any]:
    out = [r.partition, r.first_seq, r.count, r.outcome.value, r.first_offset, r.send_ts_us, r.done_ts_us, r.error,
           r.txn_id]
    return out + [r.log_start_after] if r.log_start_after >= 0 else out


def _ranges_json(writes: tuple[WriteRange, ...]) -> list[list[int]]:
    return [[w.partition, w.first_seq, w.count] for w in writes]


def _body_json(body: Body) -> dict[str, Any]:
    if isinstance(body, Start):
        out = {"topic": body.topic, "topic_id": body.topic_id, "partitions": body.partitions,
               "writer": _settings_json(body.settings), "topic_settings": _topic_json(body.topic_settings)}
        if body.replaces:
            out["replaces"] = body.replaces
        return out
    if isinstance(body, Intent):
        txn = None if body.txn is None else {"id": body.txn.id, "size": body.txn.size, "abort": body.txn.abort}
        return {"topic_id": body.topic_id, "writes": _ranges_json(body.writes), "txn": txn}
    if isinstance(body, Checkpoint):
        return {"topic": body.topic, "topic_id": body.topic_id, "partitions": body.partitions,
                "writer": _settings_json(body.settings), "topic_settings": _topic_json(body.topic_settings),
                "pending": [[w.partition, w.first_seq, w.count, w.txn_id, w.intent_ts_us] for w in body.pending],
                "open_txns": [{"id": t.id, "size": t.size, "abort": t.abort, "writes": _ranges_json(t.writes)}
                              for t in body.open_txns], "log_starts": list(body.log_starts)}
    if isinstance(body, Outcomes):
        return {"topic_id": body.topic_id, "runs": [_run_json(r) for r in body.runs]}
    if isinstance(body, TxnEnd):
        return {"id": body.id, "outcome": body.outcome.value, "error": body.error}
    if isinstance(body, Retire):
        return {"topic": body.topic, "topic_id": body.topic_id, "reason": body.reason}
    return {}


def encode(entry: LedgerEntry) -> bytes:
    """The wire form of one entry; anything but a :class:`LedgerEntry` is a programming error."""
    if not isinstance(entry, LedgerEntry) or type(entry.body) not in KINDS:
        raise TypeError(f"encode takes a LedgerEntry with a body of {sorted(k.__name__ for k in KINDS)}, "
                        f"not {type(entry).__name__}")
    w = entry.writer
    obj = {"v": LEDGER_VERSION, "instance": w.instance, "writer_id": w.writer_id, "inc": w.inc, "n": entry.n,
           "ts_us": entry.ts_us, "kind": entry.kind, **_body_json(entry.body)}
    return json.dumps(obj, separators=(",", ":")).encode()


# -- decoding --------------------------------------------------------------------------------


def _req(obj: dict[str, Any], key: str, typ: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise LedgerFormatError(f"field {key!r} missing or not {getattr(typ, '__name__', typ)}")
    return value


def _ints(values: Any, n: int, what: str) -> list[int]:
    if not isinstance(values, list) or len(values) != n or not all(isinstance(v, int) for v in values):
        raise LedgerFormatError(f"{what}: expected {n} integers, got {values!r}")
    return values


def _settings(raw: Any) -> WriterSettings:
    if not isinstance(raw, dict):
        return WriterSettings()
    if "drill" in raw:  # drills and the bench write their own role markers
        return WriterSettings(name=str(raw["drill"]), role="drill")
    if "bench" in raw:
        return WriterSettings(name="bench", role="bench")
    acks = str(raw.get("acks", "all"))
    return WriterSettings(name=str(raw.get("name", "")), role=str(raw.get("role", "canary")), acks=acks,
                          idempotence=bool(raw.get("idempotence", acks == "all")),
                          transactional=bool(raw.get("transactional", False)),
                          message_timeout_ms=int(raw.get("message_timeout_ms", 30000)),
                          outcome_within_ms=int(raw.get("outcome_within_ms", 0)))


def _topic_settings(raw: Any) -> TopicSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise LedgerFormatError(f"topic_settings: {raw!r} is not an object")
    return TopicSettings(_req(raw, "replication_factor", int), _req(raw, "min_insync_replicas", int),
                         _req(raw, "unclean_leader_election", bool))


def _ranges(raw: Any, what: str) -> tuple[WriteRange, ...]:
    if not isinstance(raw, list):
        raise LedgerFormatError(f"{what}: not a list")
    return tuple(WriteRange(*_ints(w, 3, what)) for w in raw)


def _run(raw: Any) -> OutcomeRun:
    # version 1 runs have no transaction id; only a listed ack carries the 10th field
    if not isinstance(raw, list) or len(raw) not in (8, 9, 10):
        raise LedgerFormatError(f"outcome run: expected 8 to 10 fields, got {raw!r}")
    p, first, count, outcome, offset, send, done, error, *txn = raw
    _ints([p, first, count, offset, send, done, *txn], 6 + len(txn), "outcome run")
    listed = txn[1] if len(txn) > 1 else -1
    if len(txn) > 1 and listed < 0:
        raise LedgerFormatError(f"outcome run: log start after {listed} is negative")
    try:
        out = WriteOutcome(outcome)
    except ValueError:
        raise LedgerFormatError(f"outcome run: unknown outcome {outcome!r}") from None
    if error is not None and not isinstance(error, str):
        raise LedgerFormatError(f"outcome run: error {error!r} is not text")
    return OutcomeRun(p, first, count, out, offset, send, done, error, txn[0] if txn else 0, listed)


def _body(kind: str, obj: dict[str, Any]) -> Body:
    if kind == "start":
        return Start(_req(obj, "topic", str), _req(obj, "topic_id", str), _req(obj, "partitions", int),
                     _settings(obj.get("writer")), _topic_settings(obj.get("topic_settings")),
                     str(obj.get("replaces") or ""))
    if kind == "checkpoint":
        pending = tuple(PendingWrites(*_ints(w, 5, "checkpoint pending")) for w in _req(obj, "pending", list))
        txns = []
        for t in _req(obj, "open_txns", list):
            if not isinstance(t, dict):
                raise LedgerFormatError(f"checkpoint open_txns: {t!r} is not an object")
            txns.append(OpenTxn(_req(t, "id", int), _req(t, "size", int), bool(t.get("abort")),
                                _ranges(t.get("writes"), "checkpoint open txn writes")))
        log_starts = obj.get("log_starts", [])
        return Checkpoint(_req(obj, "topic", str), _req(obj, "topic_id", str), _req(obj, "partitions", int),
                          _settings(obj.get("writer")), _topic_settings(obj.get("topic_settings")), pending,
                          tuple(txns), tuple(_ints(log_starts, len(log_starts) if isinstance(log_starts, list) else 0,
                                                   "checkpoint log_starts")))
    if kind == "intent":
        writes = _ranges(_req(obj, "writes", list), "intent write")
        raw_txn = obj.get("txn")
        txn = None
        if raw_txn is not None:
            if not isinstance(raw_txn, dict):
                raise LedgerFormatError(f"intent txn: {raw_txn!r} is not an object")
            txn = TxnInfo(int(_req(raw_txn, "id", int)), int(_req(raw_txn, "size", int)), bool(raw_txn.get("abort")))
        return Intent(_req(obj, "topic_id", str), writes, txn)
    if kind == "outcomes":
        return Outcomes(_req(obj, "topic_id", str), tuple(_run(r) for r in _req(obj, "runs", list)))
    if kind == "txn":
        try:
            outcome = TxnOutcome(obj.get("outcome"))
        except ValueError:
            raise LedgerFormatError(f"txn: unknown outcome {obj.get('outcome')!r}") from None
        error = obj.get("error")
        return TxnEnd(_req(obj, "id", int), outcome, error if isinstance(error, str) else None)
    if kind == "stop":
        return Stop()
    if kind == "init":
        return Init()
    if kind == "retire":
        return Retire(_req(obj, "topic", str), _req(obj, "topic_id", str), str(obj.get("reason") or ""))
    raise LedgerFormatError(f"unknown entry kind {kind!r}")


def decode(value: bytes | None, append_ts_us: int = 0) -> LedgerEntry:
    """The entry in ``value``; :class:`LedgerFormatError` says why it is not one. ``append_ts_us``:
    the ledger record's timestamp (the broker's append time on a ``LogAppendTime`` topic)."""
    if not value:
        raise LedgerFormatError("empty value")
    try:
        obj = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LedgerFormatError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise LedgerFormatError("not a JSON object")
    version = obj.get("v")
    if version not in READABLE_VERSIONS:
        raise LedgerFormatError(f"ledger entry version {version!r} is not readable by this Vigil "
                                f"(it reads versions {', '.join(map(str, READABLE_VERSIONS))})")
    writer = WriterRef(_req(obj, "instance", str), _req(obj, "writer_id", int), _req(obj, "inc", int))
    return LedgerEntry(writer, _req(obj, "n", int), _req(obj, "ts_us", int), _body(_req(obj, "kind", str), obj),
                       max(0, append_ts_us))
