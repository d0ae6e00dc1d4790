"""The pure parts of replication: the frame format, the commit rule, where a replica's log
must be cut (on real logs)."""

from __future__ import annotations

import os

import pytest

from amqp_stream.cluster import replication_wire as wire
from amqp_stream.cluster.commit import CommitTracker
from amqp_stream.cluster.leader import common_end
from storage import Stream, StreamConfig


def test_frames_round_trip_and_partial_frames_wait():
    hello = wire.Hello("s", "n2", 7, 1234, ((7, 1200), (5, 800)))
    start = wire.Start(7, 1000, 900, 880, True)
    data = (wire.encode_hello(hello) + wire.encode_start(start) + wire.chunk_head(3, True)
            + b"abc" + wire.encode_commit(5, 4) + wire.encode_ack(6, 5)
            + wire.encode_refuse(wire.REFUSE_STALE_EPOCH, "old"))
    got, at = wire.frames(data[:-3])
    assert at < len(data) - 3 and len(got) == 5  # the REFUSE waits for its last bytes
    got, at = wire.frames(data)
    assert at == len(data)
    kinds = [k for k, _ in got]
    assert kinds == [wire.HELLO, wire.START, wire.CHUNK, wire.COMMIT, wire.ACK, wire.REFUSE]
    assert wire.decode_hello(got[0][1]) == hello
    assert wire.decode_start(got[1][1]) == start
    assert got[2][1] == b"\x01abc"
    assert wire.decode_position(got[3][1]) == (5, 4)
    assert wire.decode_position(got[4][1]) == (6, 5)
    assert wire.decode_refuse(got[5][1]) == (wire.REFUSE_STALE_EPOCH, "old")
    with pytest.raises(wire.WireError):
        wire.frames(b"\x00\x00\x00\x00\x01")
    with pytest.raises(wire.WireError, match="version"):
        wire.decode_hello(b"\x09")


def test_commit_is_the_quorum_th_tail_and_only_into_the_leaders_epoch():
    commits = []
    t = CommitTracker(("a", "b", "c"), 2, floor=100, commit=50,
                      on_commit=lambda e, c: commits.append(e))
    t.report("a", 150, 140)  # the leader alone: no quorum
    assert commits == []
    t.report("b", 100, 90)  # a quorum holds 100: the floor (older epochs), not committed
    assert commits == []
    t.report("b", 120, 110)
    assert commits == [120]
    t.report("c", 160, 150)  # tails 150, 120, 160: the 2nd highest
    assert commits == [120, 150]
    t.report("x", 999, 1)  # not a member
    t.report("b", 110, 100)  # a tail never goes back
    assert commits == [120, 150] and t.commit == 150


def test_common_end_cuts_a_replica_back_to_the_last_chunk_both_logs_hold(tmp_path):
    cfg = StreamConfig(fsync="never")
    leader = Stream.open(tmp_path / "l", cfg)
    replica = Stream.open(tmp_path / "r", cfg)
    try:
        for _ in range(3):
            leader.append_batch([b"x"] * 5, None)
            leader.flush()
        with leader.replication_reader(0) as r:
            chunks = []
            while (c := r.read_raw()) is not None:
                chunks.append((os.pread(c.fd, c.size, c.position), c.first))
        replica.set_follower(True)
        replica.append_chunks(chunks)
        # the replica, then leader of epoch 2 alone, wrote 7 more; the new leader (epoch 3)
        # wrote others
        replica.set_follower(False)
        replica.set_epoch(2)
        replica.append_batch([b"y"] * 7, None)
        replica.flush()
        leader.set_epoch(3)
        leader.append_batch([b"z"] * 4, None)
        leader.flush()
        assert common_end(leader, tuple(replica.epoch_ends())) == 15
        # a replica that is only behind: its end
        assert common_end(leader, ((1, 10),)) == 15
        assert common_end(leader, ((1, 5),)) == 10
        # nothing in common: from the start
        assert common_end(leader, ((9, 3),)) == 0
    finally:
        leader.close()
        replica.close()


def test_a_stored_commit_end_is_never_served_beyond_the_log(tmp_path):
    """``commit.load`` gives the stored end, cut to what the log holds now (a tail lost to a
    machine crash under a lax fsync policy), and nothing for a log that stored none."""
    from amqp_stream.cluster import commit

    with Stream.open(tmp_path / "s", StreamConfig()) as s:
        for i in range(3):
            s.append_batch([b"m%d" % i] * 10)
            s.flush()
        assert commit.load(s) == (0, -1)
        commit.store(s.directory, 20, 10)
        assert commit.load(s) == (20, 10)
        commit.store(s.directory, 50, 40)  # beyond the 30 records the log holds
        assert commit.load(s) == (30, s.last_chunk_id) and s.last_chunk_id == 20


def test_a_replica_takes_what_came_in_the_same_read_as_the_leaders_proof(tmp_path):
    """The leader's proof, START and the first chunks may reach a replica in one read (the
    leader sends them back to back); the replica handles them before it reads again: the
    leader sends nothing more until it hears an ACK, so waiting for more bytes first hung
    both (seen in a cluster test: a restarted replica followed nothing for 30 s)."""
    import socket

    from amqp_stream.cluster import auth
    from amqp_stream.cluster.layout import Node
    from amqp_stream.cluster.replica import ReplicaLink

    secret = b"a cluster secret"
    cfg = StreamConfig(fsync="never")
    with Stream.open(tmp_path / "l", cfg) as leader:
        leader.append_batch([b"x"] * 5, None)
        leader.flush()
        with leader.replication_reader(0) as r:
            c = r.read_raw()
            assert c is not None
            chunk = wire.chunk_head(c.size, c.first) + os.pread(c.fd, c.size, c.position)
    replica = Stream.open(tmp_path / "r", cfg)
    replica.set_follower(True)
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        node = Node("n1", "127.0.0.1", 0, 0, server.getsockname()[1])
        link = ReplicaLink("s", replica, 1, node, "n2", secret, sync_interval_s=0)
        link.start()
        conn, _ = server.accept()
        try:
            conn.settimeout(10)  # no ACK within it fails the test
            nonce = auth.send_challenge(conn)
            frames = auth.FrameReader(conn)
            welcome = auth.check_auth(secret, nonce, *frames.next("AUTH", auth.HANDSHAKE_FRAME))
            assert frames.next("HELLO")[0] == wire.HELLO
            conn.sendall(welcome + wire.encode_start(wire.Start(1, 0, 0, -1, False)) + chunk)
            acked = []
            while not acked or acked[-1][0] < 5:
                kind, payload = frames.next("an ACK")
                assert kind == wire.ACK
                acked.append(wire.decode_position(payload))
            assert replica.local_end == 5
        finally:
            link.close()
            conn.close()
            replica.close()
