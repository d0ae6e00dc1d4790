"""The broker process: settings in, the core and its listeners on one event loop, signals.

Strategy: this module only assembles and runs. ``amqp_stream.loop`` owns the event loop and the
sockets, ``amqp_stream.core`` the streams and everything protocol-neutral, and
``amqp_stream.amqp`` the AMQP 1.0 adapter (proton as a sans-I/O engine). Storage works on its
own writer threads; their callbacks reach the loop through the loop's mailbox, and after each
batch the core wakes the consumers of streams that grew and the adapter writes what that
produced.

Cyclic garbage is collected on the loop thread only (every ``GC_PERIOD`` seconds): a proton
wrapper freed by a collection that happened to run on a storage writer thread would touch
proton off the loop.

Shutdown (SIGTERM/SIGINT): stop accepting, let the writers finish what is queued (``close`` on
every stream flushes and fsyncs), settle what became durable, close the connections, exit 0.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
from typing import Any

from amqp_stream import __version__, datadir, filtering
from amqp_stream.amqp.adapter import Adapter
from amqp_stream.config import BrokerConfig
from amqp_stream.core import Core, DefinitionsUnreadable
from amqp_stream.loop import EventLoop, raise_fd_limit
from amqp_stream.metrics import Metrics
from amqp_stream.stream_listener import StreamAdapter
import sqlfilter

__all__ = ["Broker"]

log = logging.getLogger("amqp_stream.server")

GC_PERIOD = 0.2
GC_FULL_EVERY = 50  # periods
USERS_EVERY = 5  # periods between looks at the user store's file (amqp_stream.users)
SHUTDOWN_GRACE = 0.5  # seconds for close frames to go out


class Broker:
    """One broker process. ``run()`` serves until SIGTERM/SIGINT and returns the exit code."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.metrics = Metrics()
        self.security = self._prepare_security()
        self.container_id = config.container_id or f"amqp-stream@{socket.gethostname()}"
        self.eloop = EventLoop(config.max_connections, config.handshake_timeout, config.event_loop)
        self.core = Core(config, self.eloop.mailbox, self.metrics)
        self.adapter = Adapter(self.core, self.eloop, self.security, self.container_id,
                               config.idle_timeout)
        self.core.turn_hooks.append(self.adapter.process)
        self.stream_adapter = StreamAdapter(self.core, self.eloop, self.security)
        self.core.turn_hooks.append(self.stream_adapter.process)
        self.eloop.on_count = self.metrics.connections.set
        if config.cluster:  # only then: kazoo is imported by the cluster's coordination
            from amqp_stream.cluster.node import ClusterNode

            self.core.cluster = ClusterNode(self.core, config, self.stream_adapter.advertised_host,
                                            self.stream_adapter.advertised_port)
            self.core.cluster.layout_hooks.append(self.stream_adapter.layout_changed)
        self.ticks = 0
        self.stopping = False
        self.management: Any = None  # amqp_stream.http.ManagementServer when serving
        self.replication: Any = None  # amqp_stream.cluster.replication, in a cluster

    def _prepare_security(self) -> Any:
        try:
            from amqp_stream import security
        except ImportError:
            return None
        return security.prepare(self.config)

    # -- process ---------------------------------------------------------------------------
    def run(self) -> int:
        logging.basicConfig(level=self.config.log_level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("proton").setLevel(logging.WARNING)  # we log each connection once
        fd_limit = raise_fd_limit()
        data_dir = os.path.abspath(self.config.data_dir)
        self.data_lock = datadir.acquire(data_dir)  # held for the life of the process
        if self.data_lock is None:
            return 2
        sqlfilter.prepare()  # the filter grammars, before the first consumer needs them
        filtering.install()  # ... and the reader they read messages with
        cluster = self.core.cluster
        if cluster is not None:
            from amqp_stream.errors import ClusterUnavailable

            try:
                cluster.start()  # the definitions are read from ZooKeeper then
            except ClusterUnavailable as exc:
                log.error("cannot join the cluster: %s", exc)
                return 2
            log.info("node %r joined the cluster %s (%d nodes live)", cluster.name,
                     self.config.cluster, len(cluster.view.nodes))
        try:
            names = self.core.open_all()
            if cluster is not None:
                cluster.apply_now()  # the member logs this node must hold, before serving
        except DefinitionsUnreadable as exc:
            log.error("%s", exc)
            self._close_storage()
            return 1
        self.metrics.watch(self.core.stream_states)
        from amqp_stream.cluster.layouts import Layouts, StaticLayouts
        layouts: Layouts | None = None
        if cluster is not None:
            from amqp_stream.cluster.view_layouts import ViewLayouts
            layouts = ViewLayouts(cluster)
        elif self.config.cluster_static is not None:
            layouts = StaticLayouts(self.config.cluster_static)
        if layouts is not None:
            from amqp_stream.cluster.replication import Replication
            secret = self._cluster_secret(layouts)
            if secret is None:
                self._close_storage()
                return 2
            self.replication = Replication(self.core, layouts, self.config.host, secret)
            if cluster is not None:
                cluster.replicate(self.replication)
                from amqp_stream.cluster.forwarder import Forwarding
                cluster.forwarding = Forwarding(
                    self.core, cluster, self.config.cluster_user, self.config.cluster_password,
                    hold=3 * self.config.cluster_session_timeout + 2)
                from amqp_stream.cluster.remote_reader import RemoteReading
                cluster.reading = RemoteReading(self.core, cluster, self.config.cluster_user,
                                                self.config.cluster_password)
            self.replication.start()
            from amqp_stream.cluster.metrics import ReplicationCollector
            self.metrics.registry.register(ReplicationCollector(self.replication))
        self.metrics.identify(self.config.node_name or self.container_id,
                              self.config.cluster or self.config.node_name or self.container_id,
                              data_dir)
        log.info("amqp-stream %s: %d streams recovered from %s", __version__, len(names), data_dir)
        if self.security is not None:
            describe = getattr(self.security, "describe", None)
            if describe:
                log.info("security: %s", describe())
        try:
            self.metrics.serve(self.config.host, self.config.metrics_port)
        except OSError as exc:
            log.error("cannot serve metrics on %s:%d: %s", self.config.host,
                      self.config.metrics_port, exc.strerror or exc)
            self._close_storage()
            return 1
        if self._serve_management() != 0:
            return 1
        host, port = self.config.host, self.config.port
        # the stream listeners first: whoever sees the AMQP port open (a test, a supervisor)
        # finds every port open
        # (name, port, connection factory, the port its clients are told: ``_port_for``'s)
        sa = self.stream_adapter
        streams = [("rabbitmq-stream", self.config.stream_port, sa.accept, sa.advertised_port)]
        if sa.tls_context is not None:
            streams.append(("rabbitmq-stream+tls", self.config.stream_tls_port, sa.accept_tls,
                            sa.advertised_tls_port))
        for name, stream_port, factory, advertised in streams:
            if not stream_port:
                continue
            try:
                self.eloop.listen(host, stream_port, factory, name)
            except OSError as exc:
                log.error("cannot listen on %s:%d: %s", host, stream_port, exc.strerror or exc)
                self._close_storage()
                return 1
            log.info("listening on %s://%s:%d (advertised as %s:%d)", name, host, stream_port,
                     sa.advertised_host, advertised)
        scheme = "amqps" if self.adapter.ssl_domain is not None else "amqp"
        try:
            self.eloop.listen(host, port, self.adapter.accept, "amqp")
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
            self._close_storage()
            return 1
        log.info("listening on %s://%s:%d as %s (%s loop, open-file limit %d, max_connections %d)",
                 scheme, host, port, self.container_id, type(self.eloop.loop).__module__,
                 fd_limit, self.config.max_connections)
        loop = self.eloop.loop
        gc.disable()
        loop.add_signal_handler(signal.SIGTERM, self.shutdown)
        loop.add_signal_handler(signal.SIGINT, self.shutdown)
        loop.add_signal_handler(signal.SIGUSR1, self.dump_state)
        loop.call_later(GC_PERIOD, self._tick)
        if self.replication is not None:
            loop.call_later(0.2, self.replication.poll)
        try:
            loop.run_forever()
        finally:
            self._close_storage()
            for conn in list(self.eloop.connections):
                conn.close()
            loop.close()
        log.info("stopped")
        return 0

    def _serve_management(self) -> int:
        """The management HTTP API on the loop (before the AMQP port opens: who sees that open
        finds every port open)."""
        port = self.config.management_port
        if not port:
            return 0
        from amqp_stream.http import ManagementServer
        from amqp_stream.http.state import BrokerState

        host = self.config.host
        listeners = [{"node": self.core.registry.node, "protocol": protocol, "ip_address": host,
                      "port": p} for protocol, p in (
            ("amqp", self.config.port), ("stream", self.config.stream_port),
            ("http", port), ("http/prometheus", self.config.metrics_port)) if p]
        # in a cluster the node's name there (``--node-name``): the name other nodes' API
        # lists this node's connections under
        node = (self.config.node_name if self.core.cluster is not None else None) \
            or self.core.registry.node
        state = BrokerState(self.config, self.core, self.adapter, self.stream_adapter,
                            node, listeners, self.security.store)
        self.management = ManagementServer(state, host, port)
        try:
            self.management.start(self.eloop.loop)
        except OSError as exc:
            log.error("cannot serve the management API on %s:%d: %s", host, port,
                      exc.strerror or exc)
            self.management = None
            self._close_storage()
            return 1
        log.info("management API on http://%s:%d/api/", host, port)
        return 0

    def _cluster_secret(self, layouts: object) -> bytes | None:
        """The secret the replication port's connections prove (docs/cluster.md,
        "Authentication"): a ZooKeeper cluster's (given or in ZooKeeper), else the given one
        or the static file's; None (logged) when a static layout has none."""
        if self.core.cluster is not None:
            return bytes(self.core.cluster.secret)
        from amqp_stream.cluster.auth import secret_bytes

        given = self.config.cluster_secret
        found = given if given is not None else getattr(layouts, "secret", None)
        if found is None:
            log.error("--cluster-static needs the cluster's secret: --cluster-secret (or "
                      "AMQP_STREAM_CLUSTER_SECRET) or a \"secret\" in %s, the same on every node",
                      self.config.cluster_static)
            return None
        try:
            return secret_bytes(found, "--cluster-secret" if given is not None
                                else str(self.config.cluster_static))
        except ValueError as exc:
            log.error("%s", exc)
            return None

    def _close_storage(self) -> None:
        if self.replication is not None:
            self.replication.close()
            self.replication = None
        self.core.close_all()
        if self.core.cluster is not None:  # our session ends: the others elect at once
            self.core.cluster.stop()
        if self.security is not None and hasattr(self.security, "close"):
            self.security.close()
            self.security = None

    def _tick(self) -> None:
        self.ticks += 1
        gc.collect(2 if self.ticks % GC_FULL_EVERY == 0 else 0)
        if self.ticks % USERS_EVERY == 0:
            self._reload_users()
        if not self.stopping:
            self.eloop.loop.call_later(GC_PERIOD, self._tick)

    def _reload_users(self) -> None:
        """Take up what ``amqp-stream users`` (another process) wrote to the user store."""
        store = getattr(self.security, "store", None)
        if store is None:
            return
        before = {u.name for u in store.users()}
        try:
            if store.reload_if_changed():
                log.info("users reloaded from %s: %d user(s), %d permission entries",
                         store.path, len(store.users()), len(store.permissions()))
        except (OSError, ValueError) as exc:
            log.error("cannot reload the users from %s (keeping the previous ones): %s",
                      store.path, exc)
        gone = before - {u.name for u in store.users()}
        if gone:  # their connections close, as on the HTTP API's DELETE of a user
            from amqp_stream.http.state import BrokerState

            state = self.management.state if self.management is not None else BrokerState(
                self.config, self.core, self.adapter, self.stream_adapter,
                self.core.registry.node, [], store)
            for name in sorted(gone):
                state.close_user(name)

    def dump_state(self) -> None:
        """SIGUSR1: log every link's flow-control state (for operators chasing a stall)."""
        self.adapter.dump_state()
        self.stream_adapter.dump_state()
        mailbox = self.eloop.mailbox
        log.warning("state: %d connections, mailbox signalled=%s calls=%d dirty=%d",
                    len(self.eloop.connections), mailbox.signalled, len(mailbox.calls),
                    len(self.core.dirty))

    def shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.core.stopping = True
        log.info("shutting down: no new connections, settling what is durable")
        self.eloop.stop_listening()
        if self.management is not None:
            self.management.stop(self.eloop.loop)
        if self.replication is not None:
            self.replication.close()
            self.replication = None
        self.core.close_all()  # writers finish and fsync what is queued
        self.eloop.mailbox.drain()  # settle what became durable
        self.adapter.close_all("amqp:connection:forced", "broker shutting down")
        self.stream_adapter.close_all("broker shutting down")
        self.eloop.loop.call_later(SHUTDOWN_GRACE, self.eloop.loop.stop)
