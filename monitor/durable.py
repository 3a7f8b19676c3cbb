"""Replacing a file durably: write a temporary beside it, fsync it, rename it over the file, fsync
the directory — so that after a crash the name holds either the old content or the whole new one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable


def replace_durably(path: Path, write: Callable[[BinaryIO], None], tmp: Path | None = None) -> None:
    """Make ``path`` hold what ``write`` writes to the open file, durably (``tmp``: the temporary's
    name, default ``path`` + ``.tmp``). Raises the :class:`OSError` of a step that failed; the
    temporary is removed then (a failure of the directory's sync alone leaves the new file in place)."""
    tmp = tmp or path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        tmp.unlink(missing_ok=True)  # what was written of it only takes space
        raise
