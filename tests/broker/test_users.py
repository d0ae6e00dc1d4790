"""The user store (``amqp_stream.users``): RabbitMQ's password hashes, its regex rules, the file
that keeps users across a SIGKILL, the users file beside it, and who may run ``amqp-stream
users``. Logins go through real broker processes with proton (AMQP PLAIN through Cyrus and the
broker's saslauthd responder) and rstream (the stream protocol's SASL)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import hashlib
import json
import os

import pytest
from proton import ConnectionException
from rstream import exceptions
from rstream.client import Client as StreamClient
from rstream.connection import ConnectionClosed

from amqp_stream import users
from amqp_stream.errors import BadRequest, Forbidden, NotFound
from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client
from tests.polling import wait_for
from tests.users_cli import users_cli

pytestmark = pytest.mark.timeout(120)

#: RabbitMQ's own test data (deps/rabbit/test/definition_import_SUITE_data/case1.json): the
#: user project_admin, hashed by RabbitMQ with rabbit_password_hashing_sha256; the password is
#: "guest"
RABBITMQ_VECTOR = ("project_admin", "A0EX/2hiwrIDKFS+nEqwbCGcVxwEkDBFF3mBfkNW53KFFk64", "guest")


def _rabbit_hash(digest, password: str, salt: bytes = b"\x01\x02\x03\x04") -> str:
    """rabbit_password:hash/2 written out from its definition: salt, then hash(salt + pw)."""
    return base64.b64encode(salt + digest(salt + password.encode()).digest()).decode()


def _amqp_login(broker: BrokerProcess, user: str, password: str) -> bool:
    try:
        Client(broker.url, user=user, password=password, allowed_mechs="PLAIN",
               allow_insecure_mechs=True).close()
        return True
    except ConnectionException:
        return False


def _stream_login(broker: BrokerProcess, user: str, password: str) -> bool:
    async def go() -> bool:
        client = StreamClient("127.0.0.1", broker.stream_port, frame_max=1024 * 1024, heartbeat=60)
        await client.start()
        try:
            await client.authenticate("/", user, password)
            return True
        except exceptions.ServerError:
            return False
        finally:
            # a refused login: the broker closes the connection (as RabbitMQ does), and the
            # client's own close may then meet a reset; what the login got is decided above
            with contextlib.suppress(ConnectionError, ConnectionClosed):
                await client.close()
    return asyncio.run(asyncio.wait_for(go(), 30))


# -- hashes ----------------------------------------------------------------------------------

def test_rabbitmq_hash_vector_and_our_hashes():
    name, stored, password = RABBITMQ_VECTOR
    assert users.check_password(password, stored)
    assert not users.check_password("guest2", stored)
    made = base64.b64decode(users.hash_password("pw"))
    assert len(made) == 4 + 32  # a 4-byte salt and a SHA-256
    assert made[4:] == hashlib.sha256(made[:4] + b"pw").digest()
    salt = b"\xde\xad\xbe\xef"
    for algorithm, digest in (("rabbit_password_hashing_sha512", hashlib.sha512),
                              ("rabbit_password_hashing_md5", hashlib.md5)):
        assert users.hash_password("pw", algorithm, salt) == _rabbit_hash(digest, "pw", salt)
        assert users.check_password("pw", _rabbit_hash(digest, "pw"), algorithm)
        assert not users.check_password("pw", _rabbit_hash(digest, "pw"))  # other algorithm
    assert not users.check_password("", "")  # no hash: no password login


def test_hashes_from_rabbitmq_definitions_log_in_on_both_protocols(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    name, stored, password = RABBITMQ_VECTOR
    document = {"users": [
        {"name": name, "password_hash": stored,
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""},
        {"name": "old", "password_hash": _rabbit_hash(hashlib.md5, "md5 pw"),
         "hashing_algorithm": "rabbit_password_hashing_md5", "tags": "management,monitoring"},
        {"name": "strong", "password_hash": _rabbit_hash(hashlib.sha512, "sha512 pw"),
         "hashing_algorithm": "rabbit_password_hashing_sha512", "tags": ["administrator"]},
        {"name": "ops@example.com", "password_hash": _rabbit_hash(hashlib.sha256, "mail pw"),
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}],
        "permissions": [{"user": u, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
                        for u in (name, "old", "strong", "ops@example.com")]}
    (data / users.FILE).write_text(json.dumps(document))
    with BrokerProcess(data, extra_args=["--auth-failure-delay", "0"]) as broker:
        for user, pw in ((name, password), ("old", "md5 pw"), ("strong", "sha512 pw"),
                         ("ops@example.com", "mail pw")):
            assert _amqp_login(broker, user, pw), user
            assert _stream_login(broker, user, pw), user
            assert not _amqp_login(broker, user, pw + "x")
            assert not _stream_login(broker, user, pw + "x")
        assert not _amqp_login(broker, "guest", "guest")  # a store of one's own: no guest made
    listed = users_cli(data, "list", "--format", "json").stdout
    assert {u["name"]: u["tags"] for u in json.loads(listed)} == {
        name: [], "old": ["management", "monitoring"], "strong": ["administrator"],
        "ops@example.com": []}


# -- the rules, without a process ------------------------------------------------------------

@pytest.mark.parametrize("pattern,resource,allowed", [
    (".*", "anything", True), ("", "anything", False), ("", "", True),
    ("^p-", "p-1", True), ("^p-", "xp-1", False),
    ("p-", "xp-1", True),  # searched, not anchored (re:run)
    ("^p-1$", "p-10", False), ("^(a|b)$", "b", True), ("amq\\.default", "amq.default", True)])
def test_permission_regexes_as_rabbitmq(pattern, resource, allowed):
    assert users.Permission("u", "/", pattern, pattern, pattern).allows(users.READ, resource) is allowed


def test_store_api_for_the_http_layer(tmp_path):
    store = users.UserStore(str(tmp_path / users.FILE))
    store.load()
    assert store.put_user("app", password="pw", tags=["monitoring"]) is True
    assert store.put_user("app", password_hash=_rabbit_hash(hashlib.sha256, "pw2"),
                          tags="management") is False
    assert store.authenticate("app", "pw2").tags == ("management",)
    assert store.whoami("app") == {"name": "app", "tags": ["management"]}
    store.set_permissions("app", "/", "", "^w$", "^r")
    assert [p.to_json() for p in store.permissions(user="app")] == [
        {"user": "app", "vhost": "/", "configure": "", "write": "^w$", "read": "^r"}]
    store.check("app", "/", users.READ, "rx")
    with pytest.raises(Forbidden, match="configure access to 'x' in vhost '/' refused for user 'app'"):
        store.check("app", "/", users.CONFIGURE, "x")
    for bad in (lambda: store.set_permissions("app", "/other", ".*", ".*", ".*"),
                lambda: store.whoami("nobody")):
        with pytest.raises(NotFound):
            bad()
    for bad in (lambda: store.set_permissions("app", "/", "(", "", ""),
                lambda: store.put_user("a\nb", password="x"),
                lambda: store.put_user("x", password="p", password_hash="aGk="),
                lambda: store.add_user("y", "")):
        with pytest.raises(BadRequest):
            bad()
    again = users.UserStore(str(tmp_path / users.FILE))
    again.load()
    assert again.document() == store.document()
    store.delete_user("app")
    assert store.permissions() == [] and store.user("app") is None
    assert os.stat(tmp_path / users.FILE).st_mode & 0o777 == 0o600


# -- durability, the users file, the command's rights ----------------------------------------

def test_users_survive_a_sigkill(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra_args=["--auth-failure-delay", "0"])
    broker.start()
    try:
        users_cli(data, "add", "durable", "pw-1")
        users_cli(data, "set-permissions", "durable", "^d-", "^d-|^amq\\.default$", "^d-")
        wait_for(lambda: _amqp_login(broker, "durable", "pw-1"), 30, "the broker to take the user")
        broker.kill()
        broker.start()
        assert _amqp_login(broker, "durable", "pw-1") and _stream_login(broker, "durable", "pw-1")
        assert _amqp_login(broker, "guest", "guest")  # made at the first start, kept
        with Client(broker.url, user="durable", password="pw-1", allowed_mechs="PLAIN",
                    allow_insecure_mechs=True) as client:
            assert client.request("PUT", "/queues/d-1", {})[0] == 201
            assert client.request("PUT", "/queues/e-1", {})[0] == 403
    finally:
        broker.close()


def test_the_users_file_keeps_working_beside_the_store(tmp_path):
    users_file = tmp_path / "users"
    users_file.write_text("alice:wonderland\n")
    users_file.chmod(0o600)
    data = tmp_path / "data"
    with BrokerProcess(data) as broker:  # a first start without one makes guest/guest
        assert _amqp_login(broker, "guest", "guest")
    with BrokerProcess(data, extra_args=["--users", str(users_file), "--auth-failure-delay", "0"]) as broker:
        assert _amqp_login(broker, "alice", "wonderland")
        # a users file: no guest/guest, as before, not even the one made earlier
        assert not _amqp_login(broker, "guest", "guest")
        assert not _stream_login(broker, "guest", "guest")
        with Client(broker.url, user="alice", password="wonderland", allowed_mechs="PLAIN",
                    allow_insecure_mechs=True) as client:  # every permission on /
            assert client.request("PUT", "/queues/anything", {})[0] == 201
            assert client.request("DELETE", "/queues/anything")[0] == 200
        users_cli(data, "add", "bob", "builder")
        users_cli(data, "set-permissions", "bob", "", "", ".*")
        wait_for(lambda: _stream_login(broker, "bob", "builder"), 30, "bob, added while running")
        assert _stream_login(broker, "alice", "wonderland")
    env = dict(os.environ, AMQP_STREAM_USERS_FILE=str(users_file))
    refused = users_cli(data, "set-permissions", "alice", "", "", "", check=False, env=env)
    assert refused.returncode == 1 and "users file" in refused.stderr


def _as_an_ordinary_user() -> None:
    """In the child before exec: drop the capabilities that let root ignore file modes
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER) from the bounding set, so the command
    runs under the file permissions any other user has."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_only_who_may_write_the_data_directory_changes_users(tmp_path):
    data = tmp_path / "data"
    users_cli(data, "add", "owner", "pw")
    before = (data / users.FILE).read_bytes()
    data.chmod(0o500)  # the data directory and the store of someone else's broker
    (data / users.FILE).chmod(0o400)
    try:
        refused = users_cli(data, "add", "intruder", "pw", check=False,
                            preexec_fn=_as_an_ordinary_user if os.geteuid() == 0 else None)
    finally:
        data.chmod(0o700)
    assert refused.returncode == 1 and "Permission denied" in refused.stderr, refused.stderr
    assert (data / users.FILE).read_bytes() == before


def test_guest_over_amqp_only_on_a_loopback_listener(tmp_path):
    """Cyrus does not pass the peer's address to the password check, so the AMQP side of the
    loopback rule is the listener's address (``security._password_check``); a users file's
    ``guest`` is no stored guest and logs in from anywhere, as before."""
    from amqp_stream.security import _password_check

    store = users.UserStore(str(tmp_path / users.FILE), {"alice": "a", "guest": "file guest"})
    store.load()
    assert _password_check(store, {"alice": "a"}, guest_ok=True)("alice", "a")
    seeded = users.UserStore(str(tmp_path / "seeded.json"))
    seeded.seed_guest()
    assert _password_check(seeded, {}, guest_ok=True)("guest", "guest")
    assert not _password_check(seeded, {}, guest_ok=False)("guest", "guest")
    assert _password_check(store, {"guest": "file guest"}, guest_ok=False)("guest", "file guest")
