"""Turns the security settings into the proton objects the server applies to every connection.

Strategy: proton's built-in server SASL can only say yes to ANONYMOUS (and EXTERNAL); checking a
PLAIN password needs proton built against Cyrus SASL. Cyrus reads a ``<name>.conf`` file from a
configuration directory; ours (``<data dir>/.sasl``, mode 0700, rebuilt at every start, removed
at exit) says ``pwcheck_method: saslauthd``: Cyrus asks a saslauthd over a Unix socket, and the
broker answers it itself (``amqp_stream.saslauthd``) from the user store
(``amqp_stream.users``: RabbitMQ's salted hashes, the users file's users beside them). Every
accepted transport is pointed at that directory.

The loopback rule: a broker that can be reached from other machines must authenticate. Listening
on anything but a loopback address with ANONYMOUS allowed is a ``ConfigError`` unless the operator
said ``--allow-anonymous``; with a users file (or users of one's own in the store), ANONYMOUS is
refused unless allowed explicitly. RabbitMQ's ``guest`` logs in from loopback only: over AMQP
that is, when the listener is on a loopback address (Cyrus does not tell us the peer).

TLS: ``--tls-cert``/``--tls-key`` make an ``SSLDomain(MODE_SERVER)`` for the listener; then every
connection must use TLS (amqps). PLAIN over plain TCP is allowed (RabbitMQ allows it too), which
is only safe on loopback; ``docs/security.md`` says so.

Cyrus reads its configuration path once per process (at the first server transport), so one
process serves one ``SecuritySetup``.
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from proton import SASL, SSLDomain, SSLException, Transport

from amqp_stream.config import ConfigError  # the package's configuration error lives with the settings
from amqp_stream.saslauthd import Responder
from amqp_stream.users import FILE as USERS_FILE
from amqp_stream.users import GUEST, UserStore

__all__ = ["ConfigError", "SecuritySetup", "prepare", "read_users", "is_loopback",
           "SASL_CONFIG_NAME"]

log = logging.getLogger(__name__)

SASL_CONFIG_NAME = "amqp-stream"
"""Cyrus looks for ``<name>.conf`` in the configuration directory."""

SOCKET_NAME = "saslauthd"
"""The saslauthd socket's name (in a private temporary directory)."""

SOCKET_DIR_PREFIX = "amqp-stream-saslauthd-"
"""The private temporary directory of that socket: ``<tmp>/<prefix><random>``."""

STALE_AFTER = 60.0
"""Seconds before a socket directory with no listener counts as a dead broker's (a broker
starting now makes its directory a moment before it binds the socket)."""


@dataclass
class SecuritySetup:
    """What the server needs: pass ``ssl_domain`` to ``Container.listen`` and call
    ``configure(transport)`` for every accepted connection (on ``connection_bound``, before any
    SASL frame is read). ``close()`` removes the private Cyrus directory."""

    ssl_domain: SSLDomain | None
    mechanisms: str
    sasl_config_dir: str | None
    sasl_config_name: str | None
    require_auth: bool = True
    users: tuple[str, ...] = ()
    store: UserStore | None = None
    _tmp: list[str] = field(default_factory=list, repr=False)
    _responder: Responder | None = field(default=None, repr=False)

    def configure(self, transport: Transport) -> None:
        """Apply the SASL settings to one server transport."""
        sasl = transport.sasl()
        sasl.allowed_mechs(self.mechanisms)
        if self.sasl_config_dir:
            sasl.config_path(self.sasl_config_dir)
        if self.sasl_config_name:
            sasl.config_name(self.sasl_config_name)
        # PLAIN over plain TCP (never needed with TLS, where it is not "insecure").
        sasl.allow_insecure_mechs = True
        transport.require_auth(self.require_auth)

    def describe(self) -> str:
        """One line for the start-up log."""
        tls = "TLS (amqps only)" if self.ssl_domain is not None else "no TLS"
        users = f", {len(self.users)} user(s)" if self.users else ""
        return f"SASL {self.mechanisms}{users}; {tls}"

    def close(self) -> None:
        if self._responder is not None:
            self._responder.close()
            shutil.rmtree(os.path.dirname(self._responder.path), ignore_errors=True)
            self._responder = None
        while self._tmp:
            shutil.rmtree(self._tmp.pop(), ignore_errors=True)


def is_loopback(host: str) -> bool:
    """True when ``host`` can only be reached from this machine (127.0.0.0/8, ::1, localhost).

    The wildcard addresses (``0.0.0.0``, ``::``, empty) and any name that resolves to an address
    outside the loopback range are not loopback.
    """
    host = (host or "").strip().strip("[]")
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {str(info[4][0]) for info in infos}  # an int only without IPv6 support
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def read_users(path: str | os.PathLike) -> dict[str, str]:
    """Parse a users file: one ``user:password`` per line, split at the first colon.

    Blank lines and lines starting with ``#`` are ignored; the password is everything after the
    colon up to the end of the line (spaces included). Raises ``ConfigError`` for a missing file,
    an empty user name, a line without a colon, a duplicate user or a file with no users.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read users file {path}: {exc.strerror or exc}") from None
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        user = user.strip()
        if not sep or not user:
            raise ConfigError(f"{path}:{number}: expected 'user:password'")
        if any(c.isspace() or c == "@" for c in user):
            raise ConfigError(f"{path}:{number}: user name {user!r} may not contain spaces or '@'")
        if not password:
            raise ConfigError(f"{path}:{number}: empty password for {user!r}")
        if user in users:
            raise ConfigError(f"{path}:{number}: user {user!r} appears twice")
        users[user] = password
    if not users:
        raise ConfigError(f"users file {path} defines no users")
    try:
        if Path(path).stat().st_mode & 0o077:
            log.warning("users file %s is readable by other users (chmod 600 it)", path)
    except OSError:
        pass
    return users


def _sasl_dir(data_dir: Any) -> str:
    """``<data dir>/.sasl`` (mode 0700, emptied), so a crash leaves at most one copy, replaced at
    the next start; a private temporary directory when there is no usable data directory
    (Cyrus takes a colon-separated path list, so a data directory with a colon cannot be used)."""
    if data_dir and ":" not in os.path.abspath(str(data_dir)):
        directory = os.path.join(os.path.abspath(str(data_dir)), ".sasl")
        try:
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(os.path.dirname(directory), exist_ok=True)
            os.mkdir(directory, 0o700)
            return directory
        except OSError as exc:
            raise ConfigError(f"cannot create {directory}: {exc.strerror or exc}") from None
    return tempfile.mkdtemp(prefix="amqp-stream-sasl-")  # mode 0700


def _write_sasl_conf(directory: str, mechanisms: str, socket_path: str) -> None:
    """``amqp-stream.conf``: PLAIN checks go to the saslauthd socket at ``socket_path``
    (``amqp_stream.saslauthd`` answers there)."""
    conf = [f"mech_list: {mechanisms}", "pwcheck_method: saslauthd",
            f"saslauthd_path: {socket_path}"]
    Path(directory, f"{SASL_CONFIG_NAME}.conf").write_text("\n".join(conf) + "\n")


def _ssl_domain(cert: str | None, key: str | None) -> SSLDomain | None:
    if not cert and not key:
        return None
    if not cert or not key:
        raise ConfigError("TLS needs both --tls-cert and --tls-key")
    for what, path in (("certificate", cert), ("key", key)):
        if not os.path.isfile(path):
            raise ConfigError(f"TLS {what} file not found: {path}")
    domain = SSLDomain(SSLDomain.MODE_SERVER)
    try:
        domain.set_credentials(str(cert), str(key), None)
        domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    except SSLException as exc:
        raise ConfigError(f"cannot load TLS certificate {cert} / key {key}: {exc}") from None
    return domain


def prepare(config: Any, store: UserStore | None = None) -> SecuritySetup:
    """Check the security settings of ``config`` and build the proton objects for them.

    Reads ``host``, ``allow_anonymous``, ``users_file``, ``tls_cert``, ``tls_key`` and
    ``data_dir`` (its ``users.json``, unless ``store`` is given). With no users file, a data
    directory without ``users.json`` gets RabbitMQ's first user, guest/guest (loopback only);
    on a loopback listener ANONYMOUS is offered beside PLAIN, as on the stream listener. Raises
    ``ConfigError`` (the broker must not start) for a wildcard or non-loopback ``host`` without
    authentication, an unreadable or invalid users file or store, or unusable TLS files.
    """
    host = getattr(config, "host", "127.0.0.1")
    allow_anonymous = bool(getattr(config, "allow_anonymous", False))
    users_file = getattr(config, "users_file", None)
    data_dir = getattr(config, "data_dir", None)
    ssl_domain = _ssl_domain(getattr(config, "tls_cert", None), getattr(config, "tls_key", None))

    file_users = read_users(users_file) if users_file else {}
    if file_users and not SASL.extended():
        raise ConfigError("a users file needs python-qpid-proton built with Cyrus SASL "
                          "(scripts/bootstrap rebuilds it); this build cannot check PLAIN passwords")
    tmp: list[str] = []  # removed by close() or at exit
    if store is None:
        if not data_dir:
            tmp.append(tempfile.mkdtemp(prefix="amqp-stream-users-"))
            atexit.register(shutil.rmtree, tmp[-1], True)
        store = _open_store(data_dir or tmp[-1], file_users)
    own_users = bool(file_users) or any(name != GUEST for name in store.stored)
    # PLAIN where someone can use it: a loopback listener (guest, and users added later), or
    # users other than guest (which is refused beyond loopback); Cyrus fixes the list at start
    mechs = ["PLAIN"] if SASL.extended() and (own_users or is_loopback(host)) else []
    if allow_anonymous or not (own_users or is_loopback(host)) or (
            not file_users and is_loopback(host)):
        mechs.append("ANONYMOUS")
    if "ANONYMOUS" in mechs and not allow_anonymous and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without authentication: anyone who can reach it "
            "could read and write every stream. Give --users FILE (PLAIN) or add users "
            "(amqp-stream users add), listen on 127.0.0.1, or pass --allow-anonymous to "
            "accept anonymous clients on purpose")
    mechanisms = " ".join(mechs)
    if not file_users:
        store.seed_guest()  # RabbitMQ's first start
    conf_dir = _sasl_dir(data_dir) if SASL.extended() else None
    try:
        responder = None
        if conf_dir is not None:
            # the socket in a short private directory of its own: it fits a Unix socket's
            # address, and a second broker started on the same data directory (refused at its
            # lock, after this) cannot remove it from under the first
            sweep_socket_dirs()
            socket_dir = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)
            atexit.register(shutil.rmtree, socket_dir, True)
            socket_path = os.path.join(socket_dir, SOCKET_NAME)
            _write_sasl_conf(conf_dir, mechanisms, socket_path)
            responder = Responder(socket_path, _password_check(store, file_users, is_loopback(host)))
            atexit.register(shutil.rmtree, conf_dir, True)
    except BaseException:
        if conf_dir is not None:
            shutil.rmtree(conf_dir, ignore_errors=True)
        raise
    return SecuritySetup(ssl_domain=ssl_domain, mechanisms=mechanisms, sasl_config_dir=conf_dir,
                         sasl_config_name=SASL_CONFIG_NAME if conf_dir else None,
                         require_auth="ANONYMOUS" not in mechs,
                         users=tuple(u.name for u in store.users()), store=store,
                         _tmp=tmp + [conf_dir] if conf_dir else tmp, _responder=responder)


def sweep_socket_dirs(stale_after: float = STALE_AFTER) -> list[str]:
    """Remove the saslauthd socket directories that brokers killed without their exit handlers
    (SIGKILL, a power cut) left in the temporary directory; returns the removed paths.

    A directory is a dead broker's when it is ours, older than ``stale_after`` seconds and
    nobody listens on its socket (connect refused, or no socket): a live broker's is never
    touched, whatever its PID namespace.
    """
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(SOCKET_DIR_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                or now - st.st_mtime < stale_after or _listening(os.path.join(entry.path, SOCKET_NAME))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    if removed:
        log.info("removed %d saslauthd socket directories of brokers that did not exit", len(removed))
    return removed


def _listening(path: str) -> bool:
    """True unless connecting to the Unix socket at ``path`` is refused or it does not exist
    (anything else, a full backlog too, counts as alive)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True
    return True


def _password_check(store: UserStore, file_users: dict[str, str],
                    guest_ok: bool) -> Callable[[str, str], bool]:
    """What the saslauthd responder asks: ``check(name, password)``; the stored ``guest`` only
    on a loopback listener (the loopback rule)."""

    def check(name: str, password: str) -> bool:
        if name == GUEST and not guest_ok and name not in file_users:
            return False
        return store.authenticate(name, password) is not None
    return check


def _open_store(directory: Any, file_users: dict[str, str]) -> UserStore:
    store = UserStore(os.path.join(os.path.abspath(str(directory)), USERS_FILE), file_users)
    try:
        store.load()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the users store {store.path}: {exc}") from None
    return store
