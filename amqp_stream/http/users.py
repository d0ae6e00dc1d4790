"""Who may use the HTTP API, and ``/api/users``, ``/api/permissions``, ``/api/whoami``: a
minimal read-only version over the users the broker has today.

The users are the broker's user store (``amqp_stream.users``: ``users.json`` and a users
file's users); ``Users`` answers ``authenticate`` (a management tag needed, ``guest`` from
loopback peers only), ``tags`` and ``permissions``; the routes only shape what it gives.
Changing users over HTTP is not here yet: ``amqp-stream users`` does it.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from aiohttp import web

from amqp_stream.http.errors import not_found
from amqp_stream.users import GUEST, UserStore

__all__ = ["Users", "user_json", "permission_json", "routes"]

#: tags that let a user into the management API (RabbitMQ: any of the management ones)
MANAGEMENT_TAGS = ("administrator", "monitoring", "policymaker", "management")


class Users:
    """The broker's user store (``amqp_stream.users``) as the HTTP API reads it."""

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


def routes(state: Any, add: Any) -> None:
    users: Users = state.users

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

    add("GET", "/api/whoami", whoami)
    add("GET", "/api/users", list_users)
    add("GET", "/api/users/{user}", one_user)
    add("GET", "/api/users/{user}/permissions", user_permissions)
    add("GET", "/api/permissions", list_permissions)
    add("GET", "/api/vhosts/{vhost}/permissions", vhost_permissions)
    add("GET", "/api/permissions/{vhost}/{user}", one_permission)
