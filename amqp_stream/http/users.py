"""Who may use the HTTP API and what each may see and do, and ``/api/users``,
``/api/permissions``, ``/api/whoami``.

The users are the broker's user store (``amqp_stream.users``: ``users.json`` and a users
file's users), the same object both protocols check, so a change made here counts on every
listener at once and lands in ``users.json`` (atomic replace under the store's lock) for
restarts and for ``amqp-stream users``.

What a tag allows is ``rabbit_web_dispatch_access_control``'s (``rabbit_mgmt_util``):
- any of the management tags lets a user in (``authenticate``; ``guest`` from loopback only);
- ``administrator``: users, permissions, vhost changes (``is_authorized_admin``);
- ``monitoring`` (and administrator): the nodes, and everyone's connections, channels and
  consumers (``is_monitor``, ``filter_user``); others see only their own;
- a path naming a vhost needs a permission entry on it or the administrator tag
  (``is_authorized_vhost``); listings without one show only such vhosts' objects
  (``filter_vhost``);
- a connection by name: its owner, a monitor to look, an administrator to close it
  (``is_authorized_user``);
- declaring and deleting streams, exchanges and bindings checks the user's configure, write and
  read permissions as the AMQP management node does (``resource_allow``, with
  ``amqp_stream.amqp.management``'s rules): tags do not lift them, as in RabbitMQ, where those
  requests run on a channel as the user.
A refusal is RabbitMQ's JSON, ``{"error": "not_authorised", "reason": ...}``, with status
``REFUSED``: 401 without a ``WWW-Authenticate`` header, as RabbitMQ answers it
(``rabbit_web_dispatch_access_control:not_authorised``; a request refused on the channel it
runs on, ``ACCESS_REFUSED``, comes back through ``rabbit_mgmt_util:with_channel`` the same way).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable, Iterable, TypeVar

from aiohttp import web

from amqp_stream.http.errors import ApiError, bad_request, not_found
from amqp_stream.users import CONFIGURE, GUEST, READ, WRITE, UserStore

__all__ = ["Users", "user_json", "permission_json", "routes", "REFUSED", "MANAGEMENT_TAGS"]

#: tags that let a user into the management API (RabbitMQ: any of the management ones)
MANAGEMENT_TAGS = ("administrator", "monitoring", "policymaker", "management")
ADMIN, MONITOR = "administrator", "monitoring"
REFUSED = 401

T = TypeVar("T")


def refused(reason: str) -> ApiError:
    return ApiError(REFUSED, reason, "not_authorised")


class Users:
    """The broker's user store (``amqp_stream.users``) as the HTTP API reads and changes it,
    and the tag rules above."""

    def __init__(self, store: UserStore):
        self.store = store

    def authenticate(self, user: str, password: str, peer_host: str | None) -> str | None:
        """The user name when ``password`` is right, the user has a management tag (as
        RabbitMQ's API requires), and ``guest`` comes from this machine (RabbitMQ's
        ``loopback_users``); else None."""
        found = self.store.authenticate(user, password)
        if found is None or not set(found.tags) & set(MANAGEMENT_TAGS):
            return None
        if user == GUEST and not found.from_users_file and not _is_loopback(peer_host):
            return None
        return user

    def names(self) -> list[str]:
        return sorted(u.name for u in self.store.users())

    def tags(self, user: str) -> list[str]:
        found = self.store.user(user)
        return list(found.tags) if found is not None else []

    def permissions(self, user: str) -> dict[str, dict[str, str]]:
        """vhost -> configure/write/read regular expressions."""
        return {p.vhost: {"configure": p.configure, "write": p.write, "read": p.read}
                for p in self.store.permissions(user=user)}

    # -- what a user may see and do --------------------------------------------------------
    def is_admin(self, user: str) -> bool:
        return ADMIN in self.tags(user)

    def is_monitor(self, user: str) -> bool:
        return bool({ADMIN, MONITOR} & set(self.tags(user)))

    def require_admin(self, user: str) -> None:
        if not self.is_admin(user):
            raise refused("Not administrator user")

    def require_monitor(self, user: str) -> None:
        if not self.is_monitor(user):
            raise refused("Not monitor user")

    def sees_vhost(self, user: str, vhost: str) -> bool:
        """``is_authorized_vhost``: an administrator, or a permission entry on ``vhost``."""
        return self.is_admin(user) or self.store.may_use_vhost(user, vhost)

    def require_vhost(self, user: str, vhost: str) -> None:
        if not self.sees_vhost(user, vhost):
            raise refused("User not authorised to access virtual host")

    def own(self, user: str, items: Iterable[T], owner: Callable[[T], str]) -> list[T]:
        """``filter_user``: everything for a monitor, else the user's own."""
        if self.is_monitor(user):
            return list(items)
        return [i for i in items if owner(i) == user]

    def require_owner(self, user: str, method: str, owner: str) -> None:
        """``is_authorized_user``: the owner; else a monitor to look, an administrator to
        delete."""
        if owner == user or (self.is_admin(user) if method == "DELETE" else self.is_monitor(user)):
            return
        raise refused("User not authorised to access object")

    def resource_allow(self, user: str, vhost: str) -> Callable[[str, str], None]:
        """The ``allow(what, name)`` of ``amqp_stream.amqp.management`` for ``user``:
        ``Forbidden`` (401 with RabbitMQ's ACCESS_REFUSED text) unless the user's
        permissions on ``vhost`` grant ``what`` on ``name``."""
        return lambda what, name: self.store.check(user, vhost, what, name)

    def authorise(self, user: str, method: str, path: str, match: dict[str, str]) -> None:
        """The route-level rules (``path`` is the route's pattern, e.g.
        ``/api/users/{user}``); the finer ones (owners, listings, resources) are the
        handlers'."""
        path = path.rstrip("/")
        if (path.startswith(("/api/users", "/api/permissions")) or path.endswith("/permissions")
                or (path.startswith("/api/vhosts/") and method in ("PUT", "DELETE"))):
            self.require_admin(user)
        elif path.startswith("/api/nodes"):
            self.require_monitor(user)
        elif "vhost" in match:
            self.require_vhost(user, match["vhost"])


def _is_loopback(host: str | None) -> bool:
    try:
        return ipaddress.ip_address((host or "").split("%")[0]).is_loopback
    except ValueError:
        return False


def user_json(users: Users, name: str) -> dict[str, Any]:
    """RabbitMQ's user object (``password_hash`` empty for a users file's user: that file
    keeps passwords, not hashes)."""
    found = users.store.user(name)
    return found.to_json() if found is not None else {}


def permission_json(user: str, vhost: str, perms: dict[str, str]) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, **perms}


def _all_permissions(users: Users) -> list[dict[str, Any]]:
    return [permission_json(u, v, p) for u in users.names() for v, p in users.permissions(u).items()]


def _object(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise bad_request(f"{key} must be a string")
    return value


def routes(state: Any, add: Any) -> None:
    from amqp_stream.http.body import read_json  # body -> state -> this module

    users: Users = state.users
    store = users.store

    async def whoami(request: web.Request) -> web.Response:
        name = request["user"]
        return web.json_response({"name": name, "tags": users.tags(name)})

    async def list_users(request: web.Request) -> web.Response:
        return web.json_response([user_json(users, n) for n in users.names()])

    async def one_user(request: web.Request) -> web.Response:
        name = request.match_info["user"]
        if name not in users.names():
            raise not_found()
        return web.json_response(user_json(users, name))

    async def put_user(request: web.Request) -> web.Response:
        """``rabbit_mgmt_wm_user``: ``password`` or ``password_hash`` (with
        ``hashing_algorithm``), neither for no password login; ``tags`` as a list or a
        comma-separated string. 201 when made, 204 when replaced."""
        body = _object(await read_json(request))
        password = _optional_str(body, "password")
        password_hash = _optional_str(body, "password_hash")
        algorithm = _optional_str(body, "hashing_algorithm")
        kwargs: dict[str, Any] = {"hashing_algorithm": algorithm} if algorithm else {}
        created = store.put_user(request.match_info["user"], password=password,
                                 password_hash=password_hash, tags=body.get("tags") or (),
                                 **kwargs)
        return web.Response(status=201 if created else 204)

    async def delete_user(request: web.Request) -> web.Response:
        """The user goes, and so do its open connections, both protocols', as RabbitMQ's
        ``rabbit_connection_tracking`` closes them on ``user_deleted``."""
        name = request.match_info["user"]
        store.delete_user(name)
        state.close_user(name)
        return web.Response(status=204)

    async def user_permissions(request: web.Request) -> web.Response:
        name = request.match_info["user"]
        if name not in users.names():
            raise not_found()
        return web.json_response([permission_json(name, v, p)
                                  for v, p in users.permissions(name).items()])

    async def list_permissions(request: web.Request) -> web.Response:
        return web.json_response(_all_permissions(users))

    async def vhost_permissions(request: web.Request) -> web.Response:
        vhost = request.match_info["vhost"]
        state.check_vhost(vhost)
        return web.json_response([p for p in _all_permissions(users) if p["vhost"] == vhost])

    async def one_permission(request: web.Request) -> web.Response:
        vhost, name = request.match_info["vhost"], request.match_info["user"]
        state.check_vhost(vhost)
        perms = users.permissions(name).get(vhost)
        if perms is None:
            raise not_found()
        return web.json_response(permission_json(name, vhost, perms))

    async def put_permission(request: web.Request) -> web.Response:
        """``rabbit_mgmt_wm_permission``: all three expressions required; 201 when made, 204
        when replaced."""
        vhost, name = request.match_info["vhost"], request.match_info["user"]
        state.check_vhost(vhost)
        body = _object(await read_json(request))
        missing = [k for k in (CONFIGURE, WRITE, READ) if k not in body]
        if missing:
            raise bad_request(f"{', '.join(missing)} missing")
        created = store.permission(name, vhost) is None
        store.set_permissions(name, vhost, body[CONFIGURE], body[WRITE], body[READ])
        return web.Response(status=201 if created else 204)

    async def delete_permission(request: web.Request) -> web.Response:
        vhost, name = request.match_info["vhost"], request.match_info["user"]
        state.check_vhost(vhost)
        if not store.clear_permissions(name, vhost):
            raise not_found()
        return web.Response(status=204)

    add("GET", "/api/whoami", whoami)
    add("GET", "/api/users", list_users)
    add("GET", "/api/users/{user}", one_user)
    add("PUT", "/api/users/{user}", put_user)
    add("DELETE", "/api/users/{user}", delete_user)
    add("GET", "/api/users/{user}/permissions", user_permissions)
    add("GET", "/api/permissions", list_permissions)
    add("GET", "/api/vhosts/{vhost}/permissions", vhost_permissions)
    add("GET", "/api/permissions/{vhost}/{user}", one_permission)
    add("PUT", "/api/permissions/{vhost}/{user}", put_permission)
    add("DELETE", "/api/permissions/{vhost}/{user}", delete_permission)
