"""Who may use the HTTP API, and ``/api/users``, ``/api/permissions``, ``/api/whoami``: a
minimal read-only version over the users the broker has today.

Today a user is a ``user:password`` line of ``--users`` (``security.read_users``), or, with no
users file, RabbitMQ's default ``guest``/``guest``; every user may do everything, so each is
shown with the ``administrator`` tag and ``.*`` permissions on ``/``. ``guest`` is accepted
from loopback peers only (RabbitMQ's ``loopback_users``). This module is the one place to
change when users with tags and permissions arrive (``amqp_stream.users``): ``Users`` answers
``authenticate``, ``tags`` and ``permissions``; the routes only shape what it gives.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from amqp_stream.http.errors import not_found
from amqp_stream.security import DEFAULT_USERS, read_users

__all__ = ["Users", "user_json", "permission_json", "routes"]

LOOPBACK_USERS = ("guest",)
ALL = ".*"


@dataclass(frozen=True)
class Users:
    passwords: dict[str, str]

    @classmethod
    def from_config(cls, config: Any) -> "Users":
        users_file = getattr(config, "users_file", None)
        return cls(read_users(users_file) if users_file else dict(DEFAULT_USERS))

    def authenticate(self, user: str, password: str, peer_host: str | None) -> str | None:
        """The user name when ``password`` is right (and a loopback user comes from this
        machine), else None. Compared in constant time, as the stream listener does."""
        expected = self.passwords.get(user)
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        if not ok or expected is None:
            return None
        if user in LOOPBACK_USERS and not _is_loopback(peer_host):
            return None
        return user

    def names(self) -> list[str]:
        return sorted(self.passwords)

    def tags(self, user: str) -> list[str]:
        return ["administrator"] if user in self.passwords else []

    def permissions(self, user: str) -> dict[str, dict[str, str]]:
        """vhost -> configure/write/read regular expressions."""
        return {"/": {"configure": ALL, "write": ALL, "read": ALL}} if user in self.passwords else {}


def _is_loopback(host: str | None) -> bool:
    try:
        return ipaddress.ip_address((host or "").split("%")[0]).is_loopback
    except ValueError:
        return False


def user_json(users: Users, name: str) -> dict[str, Any]:
    """RabbitMQ's user object (no password hash: this broker keeps the users file's passwords,
    which are not shown)."""
    return {"name": name, "tags": users.tags(name), "limits": {}, "password_hash": "",
            "hashing_algorithm": "rabbit_password_hashing_sha256"}


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
        if name not in users.passwords:
            raise not_found()
        return web.json_response(user_json(users, name))

    async def user_permissions(request: web.Request) -> web.Response:
        name = request.match_info["user"]
        if name not in users.passwords:
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
