"""Compile the Java EOS worker once, against the Kafka client jars Vigil resolves for its brokers.

The class lands in ``<jar cache>/eos-worker-<hash>/`` (the hash covers the source and the client
jars), so an edit or a Kafka version change compiles again and nothing else does. Its class path
is the client and what the client needs at run time (compression codecs, slf4j's API without a
binding: the worker's own stdout carries its JSON events, nothing may log there).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from invariants.errors import VigilError
from monitor.cluster import jars
from monitor.cluster.java import find_java

SOURCE = Path(__file__).with_name("EosWorker.java")
MAIN_CLASS = "EosWorker"
# Jar name prefixes the worker needs from the broker's resolved set.
CLIENT_JARS = ("kafka-clients-", "slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-")


class BuildError(VigilError):
    pass


def client_jars(kafka_version: str, progress: Callable[[str], None] = lambda _m: None) -> list[Path]:
    lib = jars.kafka_broker_jars(kafka_version, progress)
    found = sorted(p for p in lib.glob("*.jar") if p.name.startswith(CLIENT_JARS))
    missing = [prefix for prefix in CLIENT_JARS if not any(p.name.startswith(prefix) for p in found)]
    if missing:
        raise BuildError(f"the resolved Kafka {kafka_version} jars lack {', '.join(missing)} ({lib})")
    return found


def javac_for(java_home: str = "") -> str:
    java = find_java(java_home)
    javac = Path(java.executable).resolve().with_name("javac")
    if not javac.exists():
        raise BuildError(f"no javac next to {java.executable}: the EOS worker needs a JDK, not only a JRE "
                         "(scripts/bootstrap.sh installs openjdk-17-jdk-headless)")
    return str(javac)


def worker_classpath(kafka_version: str, java_home: str = "",
                     progress: Callable[[str], None] = lambda _m: None) -> str:
    """The class path that runs ``EosWorker`` (compiling it first when needed)."""
    deps = client_jars(kafka_version, progress)
    digest = hashlib.sha256(SOURCE.read_bytes())
    for jar in deps:
        digest.update(jar.name.encode())
    target = jars.cache_root() / f"eos-worker-{digest.hexdigest()[:12]}"
    if not (target / f"{MAIN_CLASS}.class").exists():
        progress("compiling the EOS worker (javac)")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".eos-worker-", dir=target.parent)
        try:
            proc = subprocess.run([javac_for(java_home), "-nowarn", "-d", tmp, "-cp", os.pathsep.join(map(str, deps)),
                                   str(SOURCE)], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise BuildError(f"javac failed on {SOURCE.name}:\n{(proc.stdout + proc.stderr).strip()[-2000:]}")
            try:
                os.rename(tmp, target)  # whole or not at all; a concurrent build that won is as good
            except OSError:
                if not (target / f"{MAIN_CLASS}.class").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return os.pathsep.join([str(target), *map(str, deps)])
