"""Users, their tags and per-vhost permissions, as RabbitMQ's internal auth backend has them.

Strategy: one small JSON document, ``<data dir>/users.json``, in the shape of the ``users`` and
``permissions`` sections of a RabbitMQ definitions export (same field names), so a RabbitMQ
export's users can be copied in and ours read by RabbitMQ's tools. It is a file of its own, not
part of ``definitions.json``: it holds secrets (mode 0600) and it has a second writer, the
``amqp-stream users`` command, which edits it while the broker runs; the broker owns
``definitions.json`` alone and rewrites it on every declare.

Every change is a read-modify-write under an ``flock`` on ``users.json.lock`` (so the command and
the broker's own writers never lose each other's changes) and lands with
``storage.files.replace_file`` (temp file, fsync, rename): a SIGKILL leaves the old document or
the new one. The broker calls ``reload_if_changed`` about once a second and takes up what the
command wrote, without a restart.

Passwords (``rabbit_password``): a 4-byte random salt, then hash(salt + UTF-8 password), the
whole base64-encoded; the hash is SHA-256 by default (``rabbit_password_hashing_sha256``),
SHA-512 and MD5 are accepted from imported definitions. An empty hash means the user cannot
log in with a password.

Permissions (``rabbit_auth_backend_internal:check_resource_access``): three regular expressions
per user and vhost, searched (not anchored: ``^...$`` anchors) in the resource name; an empty
one matches nothing (RabbitMQ turns it into ``^$``). A user without an entry for a vhost may not
use it at all.

The users file (``--users``, ``security.read_users``) keeps working beside the store: its users
are kept in memory only, with the administrator tag and every permission on ``/`` (what they
could do before permissions existed); the store cannot change them.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from amqp_stream.errors import AlreadyExists, BadRequest, Forbidden, NotFound
from storage.files import replace_file

__all__ = ["User", "Permission", "UserStore", "FILE", "DEFAULT_HASHING", "HASHING",
           "hash_password", "check_password", "CONFIGURE", "WRITE", "READ", "GUEST", "VHOSTS"]

FILE = "users.json"
FORMAT = 1
DEFAULT_HASHING = "rabbit_password_hashing_sha256"
HASHING: dict[str, Callable[[bytes], Any]] = {
    "rabbit_password_hashing_sha256": hashlib.sha256,
    "rabbit_password_hashing_sha512": hashlib.sha512,
    "rabbit_password_hashing_md5": hashlib.md5,
}
SALT_BYTES = 4
CONFIGURE, WRITE, READ = "configure", "write", "read"
GUEST = "guest"
VHOSTS = ("/",)  # the virtual hosts this broker has
MAX_NAME_BYTES = 255
RELOAD_PERIOD = 1.0  # seconds between the broker's looks at the file


def hash_password(password: str, algorithm: str = DEFAULT_HASHING, salt: bytes | None = None) -> str:
    """RabbitMQ's stored form of ``password``: base64(salt + hash(salt + UTF-8 password))."""
    if algorithm not in HASHING:
        raise BadRequest(f"unknown hashing algorithm {algorithm!r} "
                         f"(one of {', '.join(HASHING)})")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = HASHING[algorithm](salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password: str, password_hash: str, algorithm: str = DEFAULT_HASHING) -> bool:
    """True when ``password`` is the one ``password_hash`` was made from (constant time)."""
    if not password_hash or algorithm not in HASHING:
        return False
    try:
        stored = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt = stored[:SALT_BYTES]
    digest = HASHING[algorithm](salt + password.encode("utf-8")).digest()
    return len(stored) == SALT_BYTES + len(digest) and hmac.compare_digest(stored[SALT_BYTES:], digest)


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str = ""
    hashing_algorithm: str = DEFAULT_HASHING
    tags: tuple[str, ...] = ()
    limits: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    from_users_file: bool = field(default=False, compare=False)

    def to_json(self) -> dict:
        """As in a RabbitMQ definitions export (and ``GET /api/users/<name>``)."""
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm, "tags": list(self.tags),
                "limits": dict(self.limits)}

    @property
    def administrator(self) -> bool:
        return "administrator" in self.tags


@dataclass(frozen=True)
class Permission:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def to_json(self) -> dict:
        return {"user": self.user, "vhost": self.vhost, "configure": self.configure,
                "write": self.write, "read": self.read}

    def allows(self, what: str, resource: str) -> bool:
        """``rabbit_auth_backend_internal``: the regex for ``what`` found anywhere in ``resource``;
        an empty regex matches nothing but the empty name."""
        return _compiled(getattr(self, what) or "^$").search(resource) is not None


_patterns: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    compiled = _patterns.get(pattern)
    if compiled is None:
        if len(_patterns) > 1024:
            _patterns.clear()
        compiled = _patterns[pattern] = re.compile(pattern)
    return compiled


def _check_name(name: Any) -> str:
    """Any name RabbitMQ takes (e-mail addresses included) but for control characters, which
    no SASL PLAIN message can carry whole."""
    if not isinstance(name, str) or not name:
        raise BadRequest("a user name must be a non-empty string")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise BadRequest(f"user name is longer than {MAX_NAME_BYTES} bytes")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadRequest(f"user name {name!r} may not contain control characters")
    return name


def _check_tags(tags: Any) -> tuple[str, ...]:
    """Tags as a list or as RabbitMQ's older comma-separated string."""
    if isinstance(tags, str):
        tags = [t for t in re.split(r"[,\s]+", tags) if t]
    if not isinstance(tags, (list, tuple)) or not all(isinstance(t, str) and t for t in tags):
        raise BadRequest("tags must be a list of non-empty strings")
    return tuple(dict.fromkeys(tags))


def _check_regex(what: str, pattern: Any) -> str:
    if not isinstance(pattern, str):
        raise BadRequest(f"{what} must be a regular expression (a string)")
    try:
        _compiled(pattern)
    except re.error as exc:
        raise BadRequest(f"{what} regular expression {pattern!r}: {exc}") from None
    return pattern


def _check_vhost(vhost: Any) -> str:
    if vhost not in VHOSTS:
        raise NotFound(f"virtual host {vhost!r} does not exist (this broker has {', '.join(VHOSTS)})")
    return vhost


class UserStore:
    """The users and permissions of one data directory (``path`` is its ``users.json``).

    ``file_users`` (name -> password, from ``--users``) are kept in memory beside the stored ones.
    Queries read memory; changes re-read the file under the lock, change, write, and keep the
    result. Errors are ``amqp_stream.errors`` classes (``status`` for an HTTP answer).
    """

    def __init__(self, path: str, file_users: Mapping[str, str] | None = None):
        self.path = path
        self.lock_path = path + ".lock"
        self.stored: dict[str, User] = {}
        self.stored_permissions: dict[tuple[str, str], Permission] = {}
        self.file_users = {name: User(name, hash_password(password), tags=("administrator",),
                                      from_users_file=True)
                           for name, password in (file_users or {}).items()}
        self._seen: tuple | None = None

    # -- persistence -----------------------------------------------------------------------
    def exists(self) -> bool:
        return os.path.exists(self.path)

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self) -> None:
        """Read the file (none yet: no stored users). ``ValueError`` for one this version
        cannot read."""
        seen = self._stat()
        try:
            with open(self.path, "rb") as fh:
                document = json.loads(fh.read().decode("utf-8"))
        except FileNotFoundError:
            document = {}
        self._take(document)
        self._seen = seen

    def reload_if_changed(self) -> bool:
        """Re-read the file when another process replaced it; True when it did. A file that
        cannot be read keeps what is in memory (``ValueError`` to log)."""
        if self._stat() == self._seen:
            return False
        self.load()
        return True

    def _take(self, document: Any) -> None:
        if not isinstance(document, dict):
            raise ValueError(f"{self.path}: not a JSON object")
        if document and document.get("format", FORMAT) != FORMAT:
            raise ValueError(f"{self.path}: format {document.get('format')!r} is not {FORMAT}")
        users: dict[str, User] = {}
        permissions: dict[tuple[str, str], Permission] = {}
        try:
            for u in document.get("users", []):
                algorithm = u.get("hashing_algorithm") or DEFAULT_HASHING
                if algorithm not in HASHING:
                    raise ValueError(f"user {u.get('name')!r}: unknown hashing algorithm {algorithm!r}")
                users[u["name"]] = User(_check_name(u["name"]), u.get("password_hash") or "",
                                        algorithm, _check_tags(u.get("tags", [])),
                                        dict(u.get("limits") or {}))
            for p in document.get("permissions", []):
                perm = Permission(p["user"], p["vhost"], *(_check_regex(k, p.get(k, ""))
                                                           for k in (CONFIGURE, WRITE, READ)))
                permissions[(perm.user, perm.vhost)] = perm
        except (KeyError, TypeError, AttributeError, BadRequest) as exc:
            raise ValueError(f"{self.path}: {type(exc).__name__}: {exc}") from None
        self.stored, self.stored_permissions = users, permissions

    def document(self) -> dict:
        """The stored users and permissions, in RabbitMQ's definitions-export shape."""
        return {"format": FORMAT,
                "users": [u.to_json() for u in self.stored.values()],
                "permissions": [p.to_json() for p in self.stored_permissions.values()]}

    @contextlib.contextmanager
    def _change(self) -> Iterator[None]:
        """Re-read under the lock, let the caller change memory, write it back; on an error
        nothing is written and memory is the file's again."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.load()
            try:
                yield
            except BaseException:
                self.load()
                raise
            replace_file(self.path, json.dumps(self.document(), indent=1).encode("utf-8"),
                         mode=0o600)
            self._seen = self._stat()
        finally:
            os.close(fd)

    def seed_guest(self) -> bool:
        """RabbitMQ's first start: ``guest``/``guest``, administrator, every permission on
        ``/``, when there is no file yet. True when it was made."""
        if self.exists():
            return False
        with self._change():
            if not self.stored:
                self.stored[GUEST] = User(GUEST, hash_password("guest"), tags=("administrator",))
                self.stored_permissions[(GUEST, "/")] = Permission(GUEST, "/")
        return True

    # -- queries ---------------------------------------------------------------------------
    def users(self) -> list[User]:
        return [*self.file_users.values(),
                *(u for n, u in self.stored.items() if n not in self.file_users)]

    def user(self, name: str) -> User | None:
        return self.file_users.get(name) or self.stored.get(name)

    def permissions(self, user: str | None = None, vhost: str | None = None) -> list[Permission]:
        """Every permission entry, or those of one user and/or one vhost."""
        found = [Permission(name, "/") for name in self.file_users]
        found += [p for (u, _), p in self.stored_permissions.items() if u not in self.file_users]
        return [p for p in found if (user is None or p.user == user)
                and (vhost is None or p.vhost == vhost)]

    def permission(self, user: str, vhost: str) -> Permission | None:
        if user in self.file_users:
            return Permission(user, "/") if vhost == "/" else None
        return self.stored_permissions.get((user, vhost))

    def authenticate(self, name: str, password: str) -> User | None:
        """The user when ``password`` is theirs, else None. Beside a users file the default
        ``guest``/``guest`` is refused (a users file always turned it off; a stored guest made
        at an earlier start without one must not come back with it)."""
        user = self.user(name)
        if user is None or (self.file_users and name == GUEST and password == "guest"
                            and not user.from_users_file):
            check_password(password, hash_password("x"))  # the same work for unknown names
            return None
        return user if check_password(password, user.password_hash, user.hashing_algorithm) else None

    def whoami(self, name: str) -> dict:
        user = self.user(name)
        if user is None:
            raise NotFound(f"user {name!r} does not exist")
        return {"name": user.name, "tags": list(user.tags)}

    def check(self, user: str | None, vhost: str, what: str, resource: str) -> None:
        """``Forbidden`` (RabbitMQ's ACCESS_REFUSED text) unless ``user`` may ``what`` the
        resource named ``resource`` in ``vhost``; ``user`` None is an anonymous login, which
        is only offered where everything is allowed (``security.prepare``)."""
        if user is None:
            return
        permission = self.permission(user, vhost)
        if permission is None or not permission.allows(what, resource):
            raise Forbidden(f"ACCESS_REFUSED - {what} access to '{resource}' in vhost '{vhost}' "
                            f"refused for user '{user}'")

    def may_use_vhost(self, user: str | None, vhost: str) -> bool:
        """``check_vhost_access``: any permission entry for the vhost."""
        return user is None or self.permission(user, vhost) is not None

    # -- changes ---------------------------------------------------------------------------
    def _stored_user(self, name: str) -> User:
        if name in self.file_users:
            raise Forbidden(f"user {name!r} comes from the users file (--users); change it there")
        user = self.stored.get(name)
        if user is None:
            raise NotFound(f"user {name!r} does not exist")
        return user

    def add_user(self, name: str, password: str, tags: Any = ()) -> User:
        """``rabbitmqctl add_user``: ``AlreadyExists`` when the name is taken."""
        _check_name(name)
        if name in self.file_users:
            raise AlreadyExists(f"user {name!r} already exists (in the users file)")
        with self._change():
            if name in self.stored:
                raise AlreadyExists(f"user {name!r} already exists")
            user = self.stored[name] = User(name, _new_hash(password), tags=_check_tags(tags))
        return user

    def put_user(self, name: str, *, password: str | None = None, password_hash: str | None = None,
                 hashing_algorithm: str = DEFAULT_HASHING, tags: Any = ()) -> bool:
        """``PUT /api/users/<name>``: create or replace; the password in clear or as a hash
        (neither: no password login); True when created."""
        _check_name(name)
        if name in self.file_users:
            raise Forbidden(f"user {name!r} comes from the users file (--users); change it there")
        if password is not None and password_hash is not None:
            raise BadRequest("give password or password_hash, not both")
        if password is not None:
            stored_hash, algorithm = _new_hash(password), DEFAULT_HASHING
        else:
            if hashing_algorithm not in HASHING:
                raise BadRequest(f"unknown hashing algorithm {hashing_algorithm!r}")
            stored_hash, algorithm = password_hash or "", hashing_algorithm
            if stored_hash:
                try:
                    base64.b64decode(stored_hash, validate=True)
                except ValueError:
                    raise BadRequest("password_hash is not base64") from None
        checked_tags = _check_tags(tags)
        with self._change():
            created = name not in self.stored
            self.stored[name] = User(name, stored_hash, algorithm, checked_tags)
        return created

    def delete_user(self, name: str) -> None:
        """``rabbitmqctl delete_user``: the user and its permissions go."""
        with self._change():
            self._stored_user(name)
            del self.stored[name]
            for key in [k for k in self.stored_permissions if k[0] == name]:
                del self.stored_permissions[key]

    def change_password(self, name: str, password: str) -> None:
        with self._change():
            user = self._stored_user(name)
            self.stored[name] = User(name, _new_hash(password), DEFAULT_HASHING, user.tags,
                                     user.limits)

    def set_tags(self, name: str, tags: Any) -> None:
        checked = _check_tags(tags)
        with self._change():
            user = self._stored_user(name)
            self.stored[name] = User(name, user.password_hash, user.hashing_algorithm, checked,
                                     user.limits)

    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        """``rabbitmqctl set_permissions -p vhost user conf write read`` (replaces)."""
        _check_vhost(vhost)
        permission = Permission(user, vhost, _check_regex(CONFIGURE, configure),
                                _check_regex(WRITE, write), _check_regex(READ, read))
        with self._change():
            self._stored_user(user)
            self.stored_permissions[(user, vhost)] = permission

    def clear_permissions(self, user: str, vhost: str) -> bool:
        """False when there were none."""
        with self._change():
            self._stored_user(user)
            return self.stored_permissions.pop((user, vhost), None) is not None


def _new_hash(password: Any) -> str:
    if not isinstance(password, str) or not password:
        raise BadRequest("a password must be a non-empty string")
    return hash_password(password)
