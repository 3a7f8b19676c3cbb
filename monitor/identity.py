"""Writer identity: a Vigil instance id plus an incarnation number persisted across restarts.

``claim(state_dir, instance_id)`` takes an exclusive lock on the instance's state file (so two
processes can never write as the same instance on one host), bumps the incarnation, and makes
the new number durable (write to a temporary file, fsync, rename, fsync the directory) before
returning it. A writer that is ``kill -9``-ed and restarted therefore always gets a new
incarnation, and since sequence numbers are per incarnation, no sequence number is ever
reused — not even after an ambiguous failure.

The first incarnation of an instance is the current Unix time in seconds, not 1: a state
directory that is lost (a pod without its volume, a wiped disk) must not make a writer reuse an
incarnation — its seqs would start again at 0 under the same (writer, incarnation), and every
one of them would read as a duplicate of the earlier writes. Each restart bumps the number by
one, so an instance would have to restart more than once a second, for its whole life, before a
fresh start could meet a number it already used. Keep the state directory on a volume that
survives pod restarts anyway (the StatefulSet's volume claim).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from invariants.errors import VigilError
from monitor.durable import replace_durably
from monitor.record_format import writer_id_for


class IdentityError(VigilError):
    pass


@dataclass
class WriterIdentity:
    instance_id: str
    incarnation: int
    writer_id: int
    _lock: IO[str] | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _safe(instance_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", instance_id)


def claim(state_dir: str | os.PathLike[str], instance_id: str) -> WriterIdentity:
    """Lock the instance, bump and persist its incarnation, and return the identity."""
    directory = Path(state_dir) / "writers"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_safe(instance_id)}.json"
    lock = open(directory / f"{_safe(instance_id)}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise IdentityError(
            f"instance {instance_id!r} is already running on this host (lock {lock.name}); "
            "give each writer process its own instance_id") from None
    previous = int(time.time()) - 1  # a fresh (or lost) state directory: see the module docstring
    if path.exists():
        try:
            previous = int(json.loads(path.read_text())["incarnation"])
        except (ValueError, KeyError, TypeError) as exc:
            lock.close()
            raise IdentityError(f"corrupt incarnation file {path}: {exc}") from None
    incarnation = previous + 1
    doc = json.dumps({"instance_id": instance_id, "incarnation": incarnation}).encode()
    replace_durably(path, lambda f: f.write(doc), tmp=path.with_suffix(".tmp"))
    return WriterIdentity(instance_id, incarnation, writer_id_for(instance_id), lock)
