"""Find a JDK to run the brokers with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from invariants.errors import VigilError

MIN_VERSION = 17  # Kafka 4.x brokers
HOSTS_FILE_VERSION = 18  # -Djdk.net.hosts.file, needed for the proxied network layout


class JavaError(VigilError):
    pass


@dataclass(frozen=True)
class Java:
    executable: str
    major: int
    version: str = ""  # what `java -version` printed (it names the build)


def _version(java: str) -> str | None:
    """What ``java -version`` prints, or None when it does not run."""
    try:
        return subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None


def _major(version: str) -> int | None:
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def candidates(configured: str) -> list[str]:
    found: list[str] = []
    if configured:
        return [str(Path(configured) / "bin" / "java")]
    if os.environ.get("JAVA_HOME"):
        found.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    jvm = Path("/usr/lib/jvm")
    if jvm.is_dir():
        found.extend(str(p / "bin" / "java") for p in sorted(jvm.iterdir()) if (p / "bin" / "java").exists())
    on_path = shutil.which("java")
    if on_path:
        found.append(on_path)
    return found


def find_java(configured: str = "", max_major: int | None = None) -> Java:
    """The newest JDK found (preferring one that supports the proxied layout).

    ``max_major`` caps the version (Spark 4 runs on Java 17 and 21).
    """
    best: Java | None = None
    for exe in candidates(configured):
        version = _version(exe)
        major = _major(version) if version is not None else None
        if major is None or major < MIN_VERSION or (max_major is not None and major > max_major):
            continue
        if best is None or major > best.major:
            best = Java(exe, major, version or "")
    if best is None:
        where = f"cluster.java_home={configured!r}" if configured else "JAVA_HOME, /usr/lib/jvm and PATH"
        raise JavaError(
            f"no Java {MIN_VERSION}+ found in {where}; install a JDK "
            "(scripts/bootstrap.sh installs openjdk-17-jre-headless) or set cluster.java_home")
    return best
