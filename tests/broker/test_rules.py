"""Pure rules of the broker without a socket: addresses, management requests, credit, config."""

from __future__ import annotations

import pytest

from amqp_stream.amqp import addresses, management
from amqp_stream.errors import BrokerError
from amqp_stream.config import BrokerConfig, ConfigError, load
from amqp_stream.amqp.credit import ConsumerTurn, PublisherCredit
from amqp_stream.amqp.adapter import vhost_of


# -- addresses -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("/queues/abc", addresses.Address("queue", "abc")),
    ("/queues/a%20b%2Fc", addresses.Address("queue", "a b/c")),
    ("/queues/%C3%BC", addresses.Address("queue", "ü")),
    ("/queues/q/messages", addresses.Address("queue_messages", "q")),
    ("/exchanges/e", addresses.Address("exchange", "e")),
    ("/exchanges/e/k%2F1", addresses.Address("exchange", "e", "k/1")),
    ("/management", addresses.Address("management")),
])
def test_addresses(text, expected):
    assert addresses.parse(text) == expected


@pytest.mark.parametrize("text", [None, "", "queue", "/queues/", "/queues/a/b/c", "/queues/%zz",
                                  "/queues/%4", "/queues/%FF", "/topics/x", "/queues/" + "a" * 256])
def test_bad_addresses(text):
    with pytest.raises(addresses.AddressError):
        addresses.parse(text)


def test_queue_address_round_trip():
    for name in ["plain", "with space", "ü/é?#%", "a.b-c_d~e"]:
        assert addresses.parse(addresses.queue_address(name)).name == name
    assert addresses.queue_address("a.b-c_d~e") == "/queues/a.b-c_d~e"


def test_vhost_of():
    assert vhost_of("vhost:/") == "/" and vhost_of("localhost") == "/" and vhost_of(None) == "/"
    assert vhost_of("vhost:x") == "x"


# -- management ------------------------------------------------------------------------------------
@pytest.fixture
def core(tmp_path):
    """The broker's real core on a temporary data directory (no sockets, no loop running)."""
    import asyncio
    from amqp_stream.core import Core
    from amqp_stream.loop import Mailbox
    loop = asyncio.new_event_loop()
    c = Core(BrokerConfig(data_dir=tmp_path), Mailbox(loop))
    c.open_all()
    yield c
    c.close_all()
    loop.close()


def test_management_table(core):
    s = core
    h = management.handle
    assert h("PUT", "/queues/a", {"arguments": {"x-queue-type": "stream"}}, s).status == 201
    assert h("PUT", "/queues/a", None, s).status == 200  # x-queue-type defaults to stream
    assert h("PUT", "/queues/a", {"arguments": {"x-max-age": "1h"}}, s).status == 409
    assert h("get", "/queues/a", None, s).status == 200
    assert h("GET", "/queues/b", None, s).status == 404
    assert h("DELETE", "/queues/a/messages", None, s).status == 400
    assert h("DELETE", "/queues/b/messages", None, s).status == 404
    assert h("DELETE", "/queues/a", None, s) == management.Response(200, {"message_count": 0})
    assert h("DELETE", "/queues/a", None, s) == management.Response(200, {"message_count": 0})
    assert h("PUT", "/exchanges/x", {}, s) == management.Response(204, None)
    assert h("GET", "/exchanges/x", None, s).body["type"] == "direct"
    assert h("DELETE", "/bindings/src=x", None, s) == management.Response(
        400, "bad binding path segment 'src=x'")
    assert h("DELETE", "/exchanges/x", None, s) == management.Response(204, None)
    assert h("GET", "/exchanges/x", None, s).status == 404
    assert h(None, "/queues/a", None, s).status == 400
    assert h("PUT", 5, None, s).status == 400
    assert h("POST", "/queues/a", None, s).status == 405


@pytest.mark.parametrize("body", [
    {"arguments": {"x-max-length-bytes": "10"}}, {"arguments": {"x-max-length-bytes": True}},
    {"arguments": {"x-max-age": "0s"}}, {"arguments": {"x-max-age": "5d"}}, {"arguments": {"x-max-age": 5}},
    {"arguments": {"x-stream-max-segment-size-bytes": 3_000_000_001}},
    {"arguments": {"x-stream-max-segment-size-bytes": 0}},
    {"arguments": {"x-stream-filter-size-bytes": 15}}, {"arguments": {"x-stream-filter-size-bytes": 256}},
    {"arguments": {"x-initial-cluster-size": 0}}, {"arguments": {"x-queue-type": "quorum"}},
    {"arguments": {"x-message-ttl": 1000}}, {"arguments": {"x-dead-letter-exchange": "x"}},
    {"arguments": {"x-custom": [1, 2]}}, {"arguments": {5: 1}}, {"arguments": [1]},
    {"durable": "yes"}, {"durable": False}, {"exclusive": True}, {"auto_delete": True}, {1: 2}, [1], "x",
])
def test_invalid_declare_bodies(body):
    with pytest.raises(BrokerError) as info:
        management.validate_declare(body)
    assert info.value.status == 400 and info.value.description


def test_valid_declare_is_normalised():
    from proton import symbol, ulong
    args = management.validate_declare({"durable": True, "exclusive": False, "auto_delete": False,
                                        "arguments": {"x-max-length-bytes": ulong(10),
                                                      "x-max-age": symbol("7D"),
                                                      "x-stream-filter-size-bytes": 255,
                                                      "x-custom": "kept"}})
    assert args == {"x-max-length-bytes": 10, "x-max-age": "7D", "x-stream-filter-size-bytes": 255,
                    "x-custom": "kept", "x-queue-type": "stream"}
    assert type(args["x-max-length-bytes"]) is int and type(args["x-max-age"]) is str


@pytest.mark.parametrize("key", ["x-queue-leader-locator", "x-leader-locator"])
def test_leader_locator_is_checked_under_its_real_name_and_the_alias(key, core):
    """RabbitMQ's argument is x-queue-leader-locator (client-local | balanced | the deprecated
    random, least-leaders, min-masters); the name this
    broker once took is an alias, stored under the real one, and a second declare with either
    name is the same declare."""
    assert management.validate_declare({"arguments": {key: "balanced"}}) == {
        "x-queue-leader-locator": "balanced", "x-queue-type": "stream"}
    with pytest.raises(BrokerError) as info:
        management.validate_declare({"arguments": {key: "nearest"}})
    assert info.value.status == 400 and "x-queue-leader-locator" in info.value.description
    h = management.handle
    assert h("PUT", "/queues/ll", {"arguments": {key: "client-local"}}, core).status == 201
    assert h("PUT", "/queues/ll", {"arguments": {"x-queue-leader-locator": "client-local"}}, core).status == 200
    assert h("PUT", "/queues/ll", {"arguments": {"x-leader-locator": "client-local"}}, core).status == 200
    assert h("PUT", "/queues/ll", {"arguments": {"x-queue-leader-locator": "balanced"}}, core).status == 409


def test_amq_prefix_is_refused(core):
    assert management.handle("PUT", "/queues/amq.x", None, core).status == 403


# -- credit ----------------------------------------------------------------------------------------
def test_publisher_credit_tops_up_at_half_while_few_wait_for_disk():
    c = PublisherCredit(max_credit=170, max_unconfirmed=300)
    assert c.initial() == 170
    for _ in range(84):
        c.received(False)
    assert c.top_up(86) == 0  # more than half left
    c.received(False)
    assert c.top_up(85) == 85  # at half: back to 170
    for _ in range(300):
        c.received(False)
    assert c.unconfirmed == 385
    assert c.top_up(0) == 0  # the disk is behind: no more credit
    c.confirmed(100)
    assert c.top_up(0) == 170
    c.confirmed(10_000)
    assert c.unconfirmed == 0


def test_presettled_transfers_do_not_wait_for_the_disk():
    c = PublisherCredit()
    for _ in range(10_000):
        c.received(True)
    assert c.unconfirmed == 0 and c.top_up(0) == 170


def test_consumer_turn_limits():
    t = ConsumerTurn(max_batch=3, max_scanned=200, max_eval_seconds=3600)
    t.start()
    assert t.on_delivered() and t.on_delivered() and not t.on_delivered()
    t.start()
    assert all(t.on_dropped() for _ in range(199))
    assert not t.on_dropped()
    t.start()
    for _ in range(150):
        t.on_dropped()
    t.on_delivered()  # a delivery resets the run of dropped messages
    assert all(t.on_dropped() for _ in range(199))


def test_consumer_turn_ends_when_its_evaluation_time_is_spent():
    """A costly filter ends a turn by time, matched or dropped, from its first evaluation (the
    clock is read at evaluations 1, 2, 4, 8, 16, then every EVAL_CHECK); a cheap one goes on."""
    t = ConsumerTurn(max_scanned=10_000, max_eval_seconds=0)
    t.start()
    assert not t.on_evaluated()
    t.start()
    assert not t.on_dropped()
    t = ConsumerTurn(max_scanned=10_000, max_eval_seconds=3600)
    t.start()
    assert all(t.on_evaluated() for _ in range(1000)) and all(t.on_dropped() for _ in range(1000))


# -- config ----------------------------------------------------------------------------------------
def test_defaults_run_out_of_the_box():
    c = load({}, env={})
    assert (c.host, c.port, str(c.data_dir), c.fsync, c.filter_size, c.filter_scheme,
            c.metrics_port, c.max_message_size) == ("127.0.0.1", 5672, "data", "always", 16,
                                                   "mmh3", 15692, 16 * 1024 * 1024)


def test_precedence_file_env_cli(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('port = 1000\nfsync = "never"\nfilter-size = 20\n[ignored]\n')
    c = load({"port": None}, env={}, config_file=f)
    assert (c.port, c.fsync, c.filter_size) == (1000, "never", 20)
    c = load({}, env={"AMQP_STREAM_PORT": "2000", "AMQP_STREAM_ALLOW_ANONYMOUS": "yes"}, config_file=f)
    assert c.port == 2000 and c.allow_anonymous is True
    c = load({"port": "3000"}, env={"AMQP_STREAM_PORT": "2000"}, config_file=f)
    assert c.port == 3000
    j = tmp_path / "c.json"
    j.write_text('{"broker": {"metrics_port": 0, "users_file": "u.txt"}}')
    c = load({}, env={"AMQP_STREAM_CONFIG": str(j)})
    assert c.metrics_port == 0 and str(c.users_file) == "u.txt"


@pytest.mark.parametrize("cli,env", [
    ({"port": "x"}, {}), ({"port": "0"}, {}), ({"fsync": "maybe"}, {}), ({"filter_size": "300"}, {}),
    ({}, {"AMQP_STREAM_ALLOW_ANONYMOUS": "perhaps"}), ({"tls_cert": "c.pem"}, {}),
    ({"max_message_size": "0"}, {}), ({"filter_scheme": "md5"}, {}),
    ({"stream_send_threads": "-2"}, {}), ({"stream_send_threads": "many"}, {}),
])
def test_bad_settings(cli, env):
    with pytest.raises(ConfigError):
        load(cli, env=env)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError):
        load({}, env={}, config_file=tmp_path / "missing.toml")
    f = tmp_path / "x.toml"
    f.write_text("no_such_setting = 1")
    with pytest.raises(ConfigError, match="no_such_setting"):
        load({}, env={}, config_file=f)


def test_config_object_checks_itself():
    with pytest.raises(ConfigError):
        BrokerConfig(filter_size=1)
    with pytest.raises(ConfigError, match="stream_send_threads"):
        BrokerConfig(stream_send_threads=-2)
    assert BrokerConfig(stream_send_threads=0).stream_send_threads == 0


def test_stream_directory_names_are_safe():
    from amqp_stream.streams import dir_name
    assert dir_name("abc-1_x") == "abc-1_x"
    assert dir_name("..") == "%2E%2E" and "/" not in dir_name("a/b")
    assert dir_name("ü") == "%C3%BC"
    long_a, long_b = dir_name("x" * 200 + "a"), dir_name("x" * 200 + "b")
    assert len(long_a) <= 120 and long_a != long_b


@pytest.mark.parametrize("address, expected", [
    ("/queues/orders", addresses.Target("", "orders", "orders")),
    ("/queues/a%2Fb", addresses.Target("", "a/b", "a/b")),
    ("/exchanges/amq.topic", addresses.Target("amq.topic", "", None)),
    ("/exchanges/amq.topic/k%2F1", addresses.Target("amq.topic", "k/1", None)),
    ("/exchanges/amq.default", ("amqp:invalid-field", "cannot publish to")),
    ("/exchanges/", ("amqp:invalid-field", "cannot publish to")),
    ("/exchanges/x/k/more", ("amqp:invalid-field", "unknown address")),
    ("/queues/orders/messages", ("amqp:invalid-field", "cannot publish to")),
    ("/management", ("amqp:invalid-field", "cannot publish to")),
    ("orders", ("amqp:invalid-field", "v1 addresses are not supported")),
    (None, ("amqp:invalid-field", "no address")),
])
def test_publish_target_one_rule_for_targets_and_to(address, expected):
    """A publisher's target and a message's ``to`` on the anonymous terminus name where a
    message goes by the same rule (RabbitMQ's v2 target addresses): /queues/<stream> is the
    default exchange, /exchanges/<x>[/<key>] an exchange (the empty key without one)."""
    if isinstance(expected, addresses.Target):
        assert addresses.publish_target(address) == expected
    else:
        with pytest.raises(BrokerError) as info:
            addresses.publish_target(address)
        assert info.value.condition == expected[0]
        assert expected[1] in info.value.description
