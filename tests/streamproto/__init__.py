"""Tests of amqp_stream.streamproto; ``strategies`` builds every frame for hypothesis."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from amqp_stream.streamproto import frames as f
from amqp_stream.streamproto.constants import Key, OffsetType

FIXTURES = Path(__file__).parent / "fixtures"
RABBITMQ_FRAMES = json.loads((FIXTURES / "rabbitmq-3.10.json").read_text())

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=20)
ntext = st.none() | text
texts = st.lists(text, max_size=4).map(tuple)
props = st.dictionaries(text, text, max_size=4)
body = st.binary(max_size=40)
offset_spec = st.one_of(
    st.sampled_from([f.OffsetSpec.first(), f.OffsetSpec.last(), f.OffsetSpec.next()]),
    u64.map(f.OffsetSpec.offset), i64.map(f.OffsetSpec.timestamp))
versions = st.lists(st.tuples(u16, u16, u16), max_size=5).map(tuple)
batch = st.tuples(st.sampled_from([0, 1, 2, 3, 4, 7]), u16, u32)

v1_message = st.tuples(u64, st.none(), body, st.none() | batch)
v2_message = st.tuples(u64, ntext, body, st.none())

FRAMES: dict[type, st.SearchStrategy] = {
    f.DeclarePublisher: st.builds(f.DeclarePublisher, u32, u8, text, text),
    f.QueryPublisherSequence: st.builds(f.QueryPublisherSequence, u32, text, text),
    f.DeletePublisher: st.builds(f.DeletePublisher, u32, u8),
    f.Subscribe: st.builds(f.Subscribe, u32, u8, text, offset_spec, u16, props),
    f.Credit: st.builds(f.Credit, u8, u16),
    f.StoreOffset: st.builds(f.StoreOffset, text, text, u64),
    f.QueryOffset: st.builds(f.QueryOffset, u32, text, text),
    f.Unsubscribe: st.builds(f.Unsubscribe, u32, u8),
    f.Create: st.builds(f.Create, u32, text, props),
    f.Delete: st.builds(f.Delete, u32, text),
    f.Metadata: st.builds(f.Metadata, u32, texts),
    f.PeerProperties: st.builds(f.PeerProperties, u32, props),
    f.SaslHandshake: st.builds(f.SaslHandshake, u32),
    f.SaslAuthenticate: st.builds(f.SaslAuthenticate, u32, text, body),
    f.Tune: st.builds(f.Tune, u32, u32),
    f.Open: st.builds(f.Open, u32, text),
    f.Close: st.builds(f.Close, u32, u16, text),
    f.Heartbeat: st.just(f.Heartbeat()),
    f.Route: st.builds(f.Route, u32, text, text),
    f.Partitions: st.builds(f.Partitions, u32, text),
    f.ExchangeCommandVersions: st.builds(f.ExchangeCommandVersions, u32, versions),
    f.StreamStats: st.builds(f.StreamStats, u32, text),
    f.CreateSuperStream: st.builds(f.CreateSuperStream, u32, text, texts, texts, props),
    f.DeleteSuperStream: st.builds(f.DeleteSuperStream, u32, text),
    f.ResolveOffsetSpec: st.builds(f.ResolveOffsetSpec, u32, text, offset_spec, props),
    f.ConsumerUpdateResponse: st.builds(
        f.ConsumerUpdateResponse, u32, u16,
        offset_spec | st.just(f.OffsetSpec(OffsetType.NONE))),
    f.Publish: st.one_of(
        st.builds(f.Publish, u8, st.lists(v1_message, max_size=5).map(tuple), st.just(1)),
        st.builds(f.Publish, u8, st.lists(v2_message, max_size=5).map(tuple), st.just(2))),
    f.Response: st.builds(f.Response, st.sampled_from(
        [Key.DECLARE_PUBLISHER, Key.DELETE_PUBLISHER, Key.SUBSCRIBE, Key.UNSUBSCRIBE,
         Key.CREATE_STREAM, Key.DELETE_STREAM, Key.CLOSE, Key.CREATE_SUPER_STREAM,
         Key.DELETE_SUPER_STREAM]), u32, u16),
    f.QueryPublisherSequenceResponse: st.builds(f.QueryPublisherSequenceResponse, u32, u16, u64),
    f.CreditResponse: st.builds(f.CreditResponse, u16, u8),
    f.QueryOffsetResponse: st.builds(f.QueryOffsetResponse, u32, u16, u64),
    f.MetadataResponse: st.builds(
        f.MetadataResponse, u32,
        st.lists(st.builds(f.Broker, u16, text, u32), max_size=3).map(tuple),
        st.lists(st.builds(f.StreamMetadata, text, u16, u16,
                           st.lists(u16, max_size=3).map(tuple)), max_size=3).map(tuple)),
    f.MetadataUpdate: st.builds(f.MetadataUpdate, u16, text),
    f.PeerPropertiesResponse: st.builds(f.PeerPropertiesResponse, u32, u16, props),
    f.SaslHandshakeResponse: st.builds(f.SaslHandshakeResponse, u32, u16, texts),
    f.SaslAuthenticateResponse: st.builds(f.SaslAuthenticateResponse, u32, u16, body),
    f.OpenResponse: st.builds(f.OpenResponse, u32, u16, props),
    f.RouteResponse: st.builds(f.RouteResponse, u32, u16, texts),
    f.PartitionsResponse: st.builds(f.PartitionsResponse, u32, u16, texts),
    f.ConsumerUpdate: st.builds(f.ConsumerUpdate, u32, u8, st.booleans()),
    f.ExchangeCommandVersionsResponse: st.builds(f.ExchangeCommandVersionsResponse, u32, u16,
                                                 versions),
    f.StreamStatsResponse: st.builds(f.StreamStatsResponse, u32, u16,
                                     st.dictionaries(text, i64, max_size=4)),
    f.ResolveOffsetSpecResponse: st.builds(f.ResolveOffsetSpecResponse, u32, u16, u16, u64),
    f.PublishConfirm: st.builds(f.PublishConfirm, u8, st.lists(u64, max_size=6).map(tuple)),
    f.PublishError: st.builds(f.PublishError, u8,
                              st.lists(st.tuples(u64, u16), max_size=4).map(tuple)),
    f.Deliver: st.builds(f.Deliver, u8, st.binary(min_size=48, max_size=120), st.none() | u64),
}

any_frame = st.one_of(*FRAMES.values())
