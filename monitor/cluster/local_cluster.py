"""The embedded local cluster: real Apache Kafka brokers (KRaft, combined nodes) on loopback.

Everything lives under one state directory::

    <state_dir>/cluster.json        cluster id, network mode, Java used
    <state_dir>/proxy.json|pid|log   the link proxy (proxied mode only)
    <state_dir>/node-<i>/            server.properties, hosts, log4j2.properties,
                                     data/, server.log, stdout.log, pid

Nodes run detached (their own session), so the CLI can exit and come back: ``up`` is
idempotent and starts only what is not running. Every node can be killed, paused, resumed
and restarted on its own; :meth:`LocalCluster.isolate` cuts links through the proxy (see
:mod:`monitor.cluster.layout`). Pids are checked against the process command line before
any signal is sent, so a recycled pid is never touched.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable

import psutil

from monitor import client_config
from monitor.cluster import jars
from monitor.cluster.java import HOSTS_FILE_VERSION, find_java
from monitor.cluster.errors import ClusterError  # noqa: F401 - raised here, imported from here by callers
from monitor.cluster.layout import ClusterLayout, NodeLayout, render_properties
from monitor.cluster.links import LinkControl
from monitor.cluster.netproxy import send_command
from monitor.cluster.processes import accepts, exited, port_in_use, port_owner, terminate, wait_gone
from monitor.cluster.status import ClusterStatus, NodeStatus
from monitor.cluster.tls import ADMIN_USER, TlsFiles, ensure_tls, renew_broker
from monitor.config import ClusterConfig

LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:vigil.log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _new_cluster_id() -> str:
    """A random cluster id in Kafka's form; never starting with "-" (Kafka's own tool avoids that
    too: an id like "-Ab..." reads as an option on a command line)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class LocalCluster(LinkControl):
    def __init__(self, config: ClusterConfig, progress: Callable[[str], None] = lambda _m: None) -> None:
        self.config = config
        self.progress = progress
        self.state_dir = Path(config.state_dir).resolve()
        self._meta_path = self.state_dir / "cluster.json"

    # -- persistent metadata ---------------------------------------------------------------

    def _meta(self) -> dict:
        if self._meta_path.exists():
            return json.loads(self._meta_path.read_text())
        return {}

    def _ensure_meta(self) -> dict:
        meta = self._meta()
        if meta:
            return meta
        java = find_java(self.config.java_home)
        meta = {
            "cluster_id": _new_cluster_id(),
            "java": java.executable,
            "java_major": java.major,
            "network": "proxied" if java.major >= HOSTS_FILE_VERSION else "direct",
            "kafka_version": self.config.kafka_version,
            "nodes": self.config.nodes,
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._meta_path.write_text(json.dumps(meta, indent=2))
        return meta

    @property
    def layout(self) -> ClusterLayout:
        meta = self._meta()
        return ClusterLayout(self.config, proxied=meta.get("network", "proxied") == "proxied")

    @property
    def bootstrap_servers(self) -> str:
        return self.layout.bootstrap_servers

    def node_dir(self, node_id: int) -> Path:
        return self.state_dir / f"node-{node_id}"

    # -- processes -------------------------------------------------------------------------

    def _read_pid(self, pidfile: Path, marker: str) -> int | None:
        try:
            pid = int(pidfile.read_text().strip())
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            if marker not in " ".join(proc.cmdline()):
                return None
            return pid
        except (OSError, ValueError, psutil.Error):
            return None

    def node_pid(self, node_id: int) -> int | None:
        return self._read_pid(self.node_dir(node_id) / "pid", str(self.node_dir(node_id) / "server.properties"))

    def proxy_pid(self) -> int | None:
        return self._read_pid(self.state_dir / "proxy.pid", str(self.state_dir / "proxy.json"))

    def _node_state(self, pid: int | None) -> str:
        if pid is None:
            return "stopped"
        try:
            return "paused" if psutil.Process(pid).status() == psutil.STATUS_STOPPED else "running"
        except psutil.Error:
            return "stopped"

    def _check_ports(self, ports: Iterable[tuple[str, int]]) -> None:
        for host, port in ports:
            if port_in_use(host, port):
                raise ClusterError(f"port {host}:{port} is already in use by {port_owner(host, port)}; "
                                   "free it or change cluster.*_port_base in the config")

    @property
    def tls(self) -> TlsFiles | None:
        """The secured cluster's CA, key store and secrets (made on first use); None: plaintext."""
        if self.config.security != "sasl_ssl":
            return None
        return ensure_tls(self.state_dir / "tls", [n.hostname for n in self.layout.nodes])

    def renew_certificate(self, days: int) -> float:
        """A new broker certificate valid ``days`` (same CA and names), loaded by every running
        broker without a restart (their client listener's ``ssl.keystore.location`` altered);
        returns when it expires (Unix time). Clients notice nothing: new connections get it."""
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        if self.tls is None:
            raise ClusterError("only a secured cluster (cluster.security: sasl_ssl) has certificates to renew")
        store, pem = renew_broker(self.state_dir / "tls", [n.hostname for n in self.layout.nodes], days)
        entry = ConfigEntry("listener.name.client.ssl.keystore.location", str(store),
                            incremental_operation=AlterConfigOpType.SET)
        admin = AdminClient(self.admin_conf())
        for n in self.layout.nodes:  # one broker per call (librdkafka allows no more)
            resource = ConfigResource(ResourceType.BROKER, str(n.node_id), incremental_configs=[entry])
            for future in admin.incremental_alter_configs([resource]).values():
                future.result()
        (self.state_dir / "tls" / "broker.pem").write_bytes(pem)  # every broker presents it now
        return self.tls.expires_at().timestamp()

    def admin_conf(self) -> dict:
        """librdkafka settings of the cluster's own admin client (vigil-admin on a secured one)."""
        conf = client_config.local_admin(self.bootstrap_servers)
        tls = self.tls
        if tls is not None:
            conf.update({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": ADMIN_USER, "sasl.password": tls.admin_password,
                         "ssl.ca.location": str(tls.ca_pem)})
        return conf

    def _write_node_files(self, node: NodeLayout, meta: dict) -> None:
        d = self.node_dir(node.node_id)
        (d / "data").mkdir(parents=True, exist_ok=True)
        props = self.layout.server_properties(node.node_id, str(d / "data"))
        tls = self.tls
        if tls is not None:
            props.update({"listener.name.client.ssl.keystore.location": str(tls.broker_p12),
                          "listener.name.client.ssl.keystore.password": tls.keystore_password,
                          "listener.name.client.ssl.key.password": tls.keystore_password})
            (d / "server.properties").touch(mode=0o600)
            os.chmod(d / "server.properties", 0o600)  # it holds the key store's password
        (d / "server.properties").write_text(render_properties(props))
        (d / "hosts").write_text(self.layout.hosts_file(node.node_id))
        (d / "log4j2.properties").write_text(LOG4J2)

    def _format(self, node: NodeLayout, meta: dict, lib: Path) -> None:
        d = self.node_dir(node.node_id)
        if (d / "data" / "meta.properties").exists():
            return
        elr = "1" if self.config.eligible_leader_replicas else "0"
        cmd = [meta["java"], "-cp", f"{lib}/*", "kafka.tools.StorageTool", "format",
               f"--cluster-id={meta['cluster_id']}", "-c", str(d / "server.properties"),
               "--feature", f"eligible.leader.replicas.version={elr}"]
        tls = self.tls
        if tls is not None:  # the super user exists before any broker listens
            cmd += ["--add-scram", f"SCRAM-SHA-512=[name={ADMIN_USER},password={tls.admin_password}]"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClusterError(f"formatting node {node.node_id} failed:\n{proc.stdout}{proc.stderr}")

    def _start_proxy(self) -> None:
        if not self.layout.proxied or self.proxy_pid() is not None:
            return
        links = self.layout.proxy_links()
        self._check_ports([(l.listen_host, l.listen_port) for l in links]
                          + [("127.0.0.1", self.config.proxy_control_port)])
        spec = {"control_port": self.config.proxy_control_port, "links": [asdict(l) for l in links]}
        spec_path = self.state_dir / "proxy.json"
        spec_path.write_text(json.dumps(spec))
        with open(self.state_dir / "proxy.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "monitor.cluster.netproxy", str(spec_path)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        (self.state_dir / "proxy.pid").write_text(str(proc.pid))
        deadline = time.monotonic() + 15
        while not accepts("127.0.0.1", self.config.proxy_control_port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"link proxy did not start; see {self.state_dir / 'proxy.log'}")
            time.sleep(0.1)

    def start_node(self, node_id: int) -> int:
        """Start one node if it is not running (formatting it on first start); returns its pid."""
        meta = self._ensure_meta()
        pid = self.node_pid(node_id)
        if pid is not None:
            return pid
        node = self.layout.node(node_id)
        lib = jars.kafka_broker_jars(self.config.kafka_version, self.progress)
        self._await_exit(node_id)
        self._check_ports([(self.config.host, node.client_port), ("127.0.0.1", node.replication_port),
                           ("127.0.0.1", node.controller_port)])
        self._write_node_files(node, meta)
        self._format(node, meta, lib)
        d = self.node_dir(node_id)
        cmd = [meta["java"], f"-Xms{self.config.heap_mb}m", f"-Xmx{self.config.heap_mb}m",
               "-XX:+UseG1GC", "-Djava.awt.headless=true",
               f"-Dvigil.log.file={d / 'server.log'}",
               f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}"]
        if self.layout.proxied:
            cmd.append(f"-Djdk.net.hosts.file={d / 'hosts'}")
        cmd += ["-cp", f"{lib}/*", "kafka.Kafka", str(d / "server.properties")]
        with open(d / "stdout.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=d)
        (d / "pid").write_text(str(proc.pid))
        # Popen returns once exec has begun, a moment before the kernel shows the new command
        # line; until then node_pid() cannot recognise the node and status() would call it
        # stopped (seen as "node exited during start-up" right after a start).
        deadline = time.monotonic() + 10
        while self.node_pid(node_id) != proc.pid:
            if proc.poll() is not None:
                raise ClusterError(f"node {node_id} exited at once (exit {proc.returncode}); see {d / 'stdout.log'}")
            if time.monotonic() > deadline:
                raise ClusterError(f"node {node_id} (pid {proc.pid}) did not show its command line within 10 s")
            time.sleep(0.01)
        return proc.pid

    def _await_exit(self, node_id: int, timeout: float = 60.0) -> None:
        """The node's last process, if it is still exiting (:func:`exited`), ended first: until
        then it holds the node's ports and its log directory's lock."""
        try:
            proc = psutil.Process(int((self.node_dir(node_id) / "pid").read_text().strip()))
            exiting = proc.status() == psutil.STATUS_ZOMBIE and not exited(proc)
        except (OSError, ValueError, psutil.Error):  # (gone meanwhile, or never started)
            return
        if exiting:
            self.progress(f"node {node_id}: its last process (pid {proc.pid}) is still exiting; waiting for it")
            if not wait_gone(proc.pid, timeout):
                raise ClusterError(f"node {node_id}: its last process (pid {proc.pid}) did not finish exiting "
                                   f"within {timeout:.0f} s")

    def exit_report(self, node_id: int, lines: int = 6) -> str:
        """Why a node exited, as far as its logs say: their last errors (else their last lines)."""
        d = self.node_dir(node_id)
        tails = []
        for path in (d / "server.log", d / "stdout.log"):
            try:
                text = path.read_text(errors="replace").splitlines()[-2000:]
            except OSError:
                continue
            errors = [line for line in text if " ERROR " in line or " FATAL " in line]
            if errors:
                return f"its last errors ({path}):\n" + "\n".join(line[:300] for line in errors[-lines:])
            if text:
                tails.append(f"{path} ends:\n" + "\n".join(text[-lines:]))
        if not tails:
            return f"nothing in {d / 'server.log'} or stdout.log"
        return "no error logged; " + "; ".join(tails)

    def _signal(self, node_id: int, sig: signal.Signals) -> int:
        pid = self.node_pid(node_id)
        if pid is None:
            raise ClusterError(f"node {node_id} is not running")
        os.kill(pid, sig)
        return pid

    def kill(self, node_id: int) -> None:
        """SIGKILL the node (no controlled shutdown)."""
        pid = self._signal(node_id, signal.SIGKILL)
        wait_gone(pid, 10)

    def pause(self, node_id: int) -> None:
        """SIGSTOP the node; returns once the kernel reports it stopped."""
        pid = self._signal(node_id, signal.SIGSTOP)
        self._await_state(node_id, pid, "paused")

    def resume(self, node_id: int) -> None:
        pid = self._signal(node_id, signal.SIGCONT)
        self._await_state(node_id, pid, "running")

    def _await_state(self, node_id: int, pid: int, state: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._node_state(pid) != state:
            if time.monotonic() > deadline:
                raise ClusterError(f"node {node_id} did not become {state} within {timeout:.0f} s")
            time.sleep(0.02)

    def stop_node(self, node_id: int, timeout: float = 20.0) -> None:
        """Controlled shutdown (SIGTERM), then SIGKILL after ``timeout``."""
        pid = self.node_pid(node_id)
        if pid is not None:
            terminate([pid], timeout)

    def restart(self, node_id: int, hard: bool = False) -> int:
        if hard:
            if self.node_pid(node_id) is not None:
                self.kill(node_id)
        else:
            self.stop_node(node_id)
        return self.start_node(node_id)

    # -- whole cluster ---------------------------------------------------------------------

    def up(self, timeout: float | None = None) -> ClusterStatus:
        """Start whatever is not running and wait until the cluster is ready (idempotent)."""
        meta = self._ensure_meta()
        if meta.get("nodes") != self.config.nodes:
            raise ClusterError(
                f"{self.state_dir} holds a {meta.get('nodes')}-node cluster but the config asks for "
                f"{self.config.nodes}; run `vigil cluster down --purge` first")
        jars.kafka_broker_jars(self.config.kafka_version, self.progress)
        self._start_proxy()
        started = []
        for node in self.layout.nodes:
            if self.node_pid(node.node_id) is None:
                self.start_node(node.node_id)
                started.append(node.node_id)
        if started:
            self.progress(f"started node(s) {', '.join(map(str, started))}; waiting for the cluster")
        return self.wait_ready(timeout or self.config.start_timeout_s)

    def wait_ready(self, timeout: float) -> ClusterStatus:
        deadline = time.monotonic() + timeout
        last = None
        while True:
            status = self.status()
            for n in status.nodes:
                if n.state == "stopped":
                    raise ClusterError(f"node {n.node_id} exited during start-up; {self.exit_report(n.node_id)}")
            if all(n.listening for n in status.nodes) and status.active_controller is not None:
                brokers = self._registered_brokers()
                if brokers >= self.config.nodes:
                    return status
                last = f"{brokers} of {self.config.nodes} brokers registered"
            else:
                last = "waiting for listeners and a controller leader"
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster not ready after {timeout:.0f} s ({last})")
            time.sleep(0.5)

    def wait_node_ready(self, node_id: int, timeout: float) -> bool:
        """Until ``node_id`` listens and the cluster's metadata has it as a live broker again
        (registered, unfenced: it caught up); False when it did not within ``timeout``."""
        node = self.layout.node(node_id)
        deadline = time.monotonic() + timeout
        while True:
            # its process first: an old listener and registration may outlive it a moment
            if self.node_pid(node_id) is None:
                raise ClusterError(f"node {node_id} exited during start-up; {self.exit_report(node_id)}")
            if accepts(self.config.host, node.client_port) and node_id in self._registered_ids():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    def _registered_brokers(self) -> int:
        return len(self._registered_ids())

    def _registered_ids(self) -> set[int]:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({**self.admin_conf(), "log_level": 2}).list_topics(timeout=5)
            return set(md.brokers)
        except Exception:  # noqa: BLE001 - not ready yet
            return set()

    def down(self, purge: bool = False) -> None:
        """Stop every node and the proxy; with ``purge``, delete the state directory."""
        terminate([p for p in (self.node_pid(n.node_id) for n in self.layout.nodes) if p is not None], 15)
        proxy = self.proxy_pid()
        if proxy is not None:
            terminate([proxy], 5)
        if purge and self.state_dir.exists():
            import shutil

            shutil.rmtree(self.state_dir)

    def active_controller(self) -> int | None:
        """The KRaft leader with the highest epoch among the nodes' quorum-state files."""
        best: tuple[int, int] | None = None
        for node in self.layout.nodes:
            if self._node_state(self.node_pid(node.node_id)) == "stopped":
                continue
            qs = self.node_dir(node.node_id) / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(qs.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        return best[0] if best else None

    def status(self) -> ClusterStatus:
        layout = self.layout
        controller = self.active_controller()
        nodes = []
        for node in layout.nodes:
            pid = self.node_pid(node.node_id)
            state = self._node_state(pid)
            nodes.append(NodeStatus(
                node_id=node.node_id, pid=pid, state=state, client_port=node.client_port,
                replication_port=node.replication_port, controller_port=node.controller_port,
                listening=state == "running" and accepts(self.config.host, node.client_port),
                active_controller=controller == node.node_id,
            ))
        proxy = self.proxy_pid()
        blocked: list[list] = []
        if proxy is not None:
            try:
                blocked = send_command(self.config.proxy_control_port, {"op": "status"}, timeout=2)["blocked"]
            except (OSError, ValueError, KeyError):
                pass
        return ClusterStatus(
            state_dir=str(self.state_dir), bootstrap_servers=layout.bootstrap_servers,
            network="proxied" if layout.proxied else "direct", proxy_pid=proxy,
            blocked_links=blocked, active_controller=controller, nodes=nodes,
        )

    def log_path(self, node_id: int) -> Path:
        self.layout.node(node_id)
        return self.node_dir(node_id) / "server.log"
