"""The cluster settings from flags, the environment and the config file (amqp_stream.config)."""

from __future__ import annotations

import pytest

from amqp_stream.config import ConfigError, load


def test_cluster_settings_from_the_environment_and_the_file(tmp_path):
    config = load({}, env={"AMQP_STREAM_CLUSTER": "zk://a:2181,b:2181/c",
                           "AMQP_STREAM_NODE_NAME": "n1",
                           "AMQP_STREAM_REPLICATION_PORT": "6000",
                           "AMQP_STREAM_CLUSTER_SESSION_TIMEOUT": "4.5",
                           "AMQP_STREAM_CLUSTER_QUORUM_TIMEOUT": "20"})
    assert (config.cluster, config.node_name, config.replication_port,
            config.cluster_session_timeout, config.cluster_quorum_timeout) == \
        ("zk://a:2181,b:2181/c", "n1", 6000, 4.5, 20.0)
    assert load({}, env={}).cluster_quorum_timeout == 0  # 3 x the session timeout
    path = tmp_path / "broker.toml"
    path.write_text('cluster = "zk://z:1/p"\nnode-name = "n2"\n')
    config = load({"node_name": "n3"}, env={}, config_file=path)
    assert (config.cluster, config.node_name) == ("zk://z:1/p", "n3")  # flags win
    assert load({}, env={}).cluster is None  # one node by default


@pytest.mark.parametrize("settings, message", [
    ({"cluster": "zk://a:1/p"}, "needs --node-name"),
    ({"cluster": "zk://a:1", "node_name": "n"}, "needs a path"),
    ({"cluster": "http://a:1/p", "node_name": "n"}, "zk://HOST:PORT"),
    ({"cluster": "zk://a:1/p", "node_name": "a/b"}, "node name"),
    ({"cluster_session_timeout": "0.5"}, "cluster_session_timeout"),
    ({"replication_port": "70000"}, "replication_port"),
    ({"cluster_quorum_timeout": "0.5"}, "cluster_quorum_timeout"),
    ({"cluster_quorum_timeout": "-1"}, "cluster_quorum_timeout"),
])
def test_bad_cluster_settings(settings, message):
    with pytest.raises(ConfigError, match=message):
        load(settings, env={})
