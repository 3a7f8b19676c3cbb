"""Vigil's executor-side code as a zip for ``SparkContext.addPyFile``.

Spark's executors run :mod:`monitor.watch.executor` in their own Python workers. On a cluster
those workers do not see the driver's checkout or virtualenv's editable install, so the driver
ships the two packages the code comes from (``monitor`` and ``invariants``, Python sources only)
in one zip, written once per content under the state directory.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import invariants
import monitor

PACKAGES = (monitor, invariants)


def sources() -> list[tuple[str, Path]]:
    """(name inside the zip, file) for every Python source of the shipped packages."""
    out = []
    for package in PACKAGES:
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            out.append((f"{root.name}/{path.relative_to(root).as_posix()}", path))
    return out


def executor_zip(state_dir: str | Path) -> Path:
    """The zip of the current sources (named by their digest, so a changed checkout ships anew)."""
    files = sources()
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    target = Path(state_dir) / "spark" / f"vigil-executor-{digest.hexdigest()[:12]}.zip"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for name, path in files:
                z.write(path, name)
        tmp.replace(target)
    return target
