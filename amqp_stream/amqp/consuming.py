"""A consumer link (our sender): stored records out under link credit, filtered in two stages.

Strategy (the hot path): a ``storage`` reader hands over whole chunks that passed stage 1 (the
chunk's Bloom filter, decided from its header and filter bytes without reading the data). The
compiled stage-2 filter (``fast_match.bytes_matcher``: a one-pass matcher for the commonest
shapes) is applied to a slice of the chunk's records at a time, in one comprehension
(``selection``: no loop iteration of the pump per dropped record); the matches then go out in
one tight loop, each with ``x-stream-offset`` spliced into its message annotations (in line for
the usual shapes, else ``amqp_stream.wire.with_stream_offset``) as raw bytes (``link.send``).
Matches that credit or the turn leave unsent wait in ``ready`` for the next turn. Dropped
records use no credit and leave the delivery count alone. A chunk whose records the reader
chose by columns (``storage.reader.Matches``: ``amqp_stream.columns``, for a chunk whose records
share one layout) is all matches: no slice is evaluated. Consecutive stored chunks are read
at once where the reader can (``Reader.read_span``: one ``preadv``, each chunk checked as a
lone one is, no stage-1 or derived-key filter) and their records chosen by columns in one
pass (``Reader.span_matches``), up to ``SPAN_RECORDS`` records: the ~1,000-record chunks a
loaded publisher leaves then share a chunk's fixed costs; a span the columns cannot tell for
is sliced as one chunk.

The loop calls proton's C functions directly (``cproton_ffi.lib``) for the per-message steps
(create the delivery, send, settle; proton's settle of the current delivery advances the link,
so a pre-settled delivery needs no ``pn_link_advance``): the ``proton`` wrappers would build a
Python object per delivery that nothing here needs, and cproton's own wrappers convert each
argument again. The delivery tag comes from one cell per link (``tags.TagCell``). A batch's
messages are spliced in one comprehension, or, when they share one layout (a producer's
messages, ``ROWS_AT_LEAST`` of them or more), as the rows of one array (``spliced_rows``);
when the whole batch fits in what the session may still hold (and the socket is not backed
up, and no named consumer counts each delivery), it goes out with nothing checked per
delivery, else one by one, checked before each send.

Turns: ``pump`` runs until the credit is used up, the stream's end is reached (then the consumer
waits for the broker to wake it when the committed end moves; a drain request is answered with
``drained()``), or the turn's budget is spent (``ConsumerTurn``: a batch of deliveries, 200
dropped records in a row counted per slice, or its time for stage-2 evaluation, the clock read
before each slice of 1, 1, 2, 4, ... up to 128 records); then it asks the adapter for
another turn after the events already waiting, so other links and connections are served in
between. When the session already holds ``max_buffered`` bytes for the socket the consumer
sends nothing more (checked before each send) and waits until the socket has taken them: a
client that grants credit and never reads costs at most that much memory. The same in
deliveries (proton keeps each, ~800 B, until it is written or settled): while the socket is
backed up the consumer stops at ``max_held`` deliveries proton holds for the link, and a
connection whose link leaves that many unsettled gets a small socket send buffer, so that the
kernel does not take tens of thousands of small deliveries first. Broker-derived
filter keys (``amqp_stream.derived_keys``): when the stream indexes a key the stage-2 filter
requires, the reader skips chunks, and returns chunks read in part, whose records cannot match
(stage 2 still decides each record it returns). Stage 1 is sliced the same way: the reader
passes over at most ``SCAN_BUDGET`` chunks per call and says ``SCAN_PAUSED`` when that is used
up; the turn then ends and asks for another at once, so a
filter that matches almost nothing in a long stream does not hold the event loop for the scan.
"""

from __future__ import annotations

import logging
import operator
import struct
from typing import Any, Callable

import numpy as np
from cproton_ffi import lib

from amqp_stream import fast_match
from amqp_stream.amqp.credit import ConsumerTurn
from amqp_stream.amqp.source_filters import SourceFilters
from amqp_stream.amqp.tags import TagCell
from amqp_stream.amqp.tracking import ConsumerOffsets, StorePolicy
from amqp_stream.errors import BrokerError, InternalError
from amqp_stream.wire import with_stream_offset
from amqp_stream.wire._stored import _NEW_SECTION_HEAD
from storage.errors import CorruptionError
from storage.reader import SCAN_PAUSED, Matches, ReaderStats

__all__ = ["Consumer", "offset_spec", "selection", "spliced", "spliced_rows", "SCAN_BUDGET"]

log = logging.getLogger(__name__)

#: a message that opens with proton's empty header (a list0), then a section
_AFTER_EMPTY_HEADER = b"\x00\x53\x70\x45\x00\x53"
_SPLICE_EMPTY_HEADER = _AFTER_EMPTY_HEADER[:4] + _NEW_SECTION_HEAD
#: its first 7 bytes when the section after the header is one an annotations section goes
#: before (properties .. body: 0x73-0x78): one set look-up per message, not three tests
_EMPTY_HEADER_THEN = frozenset(_AFTER_EMPTY_HEADER + bytes([code]) for code in range(0x73, 0x79))
#: the empty header and the new annotations section with the offset, in one ``pack`` (then one
#: concatenation with the rest of the message: ~60 ns less a delivery than a three-part join)
_SPLICED_HEAD = struct.Struct(f">{len(_SPLICE_EMPTY_HEADER)}sq")
_NEW_HEAD = struct.Struct(f">{len(_NEW_SECTION_HEAD)}sq")  # (the same for no header)
#: what the splice adds to a message at most (a new annotations section with the offset)
_SPLICE_BYTES = len(_NEW_SECTION_HEAD) + 8

#: a batch of at least this many messages of one shape is spliced as rows (``spliced_rows``:
#: its numpy calls cost ~8 µs a batch, so it pays from ~150 messages of ~100 bytes)
ROWS_AT_LEAST = 192
_PREFIX = np.frombuffer(_SPLICE_EMPTY_HEADER, np.uint8)
_OFFSET, _DATA = operator.itemgetter(0), operator.itemgetter(1)

# chunks a stage-1 scan may pass over in one turn: one header pread each, ~2 µs from the page
# cache (one run), so a slice is about as long as the 200 stage-2 drops a turn allows
SCAN_BUDGET = 1000
#: stage 2: records a span of consecutive stored chunks holds at most (``Reader.read_span``);
#: ~0.3 ms of columns, and its matches wait in ``ready`` for credit (bodies copied out)
SPAN_RECORDS = 8192


class _NotStarted:
    """A named consumer's reader until the leader answered its stored offset: nothing yet."""

    position = 0
    stats = ReaderStats()

    def read_chunk(self, max_skips: int | None = None) -> None:
        return None


_NOT_STARTED = _NotStarted()


def selection(match: Callable[[bytes], bool] | None
              ) -> Callable[[list[tuple[int, bytes]]], list[tuple[int, bytes]]] | None:
    """The records of a slice that ``match`` (stage 2) keeps, in one comprehension per slice
    (a record the filter cannot read is not a match); None without a filter."""
    if match is None:
        return None

    def one(data: bytes) -> bool:
        try:
            return match(data)
        except Exception:
            return False

    def select(part: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        try:
            return [r for r in part if match(r[1])]
        except Exception:  # a record the filter cannot read: that slice again, one by one
            return [r for r in part if one(r[1])]

    return select


def spliced(data: bytes, offset: int) -> bytes:
    """``with_stream_offset(data, offset)``; in line for a message without a header whose
    first section is one an annotations section goes before (properties .. body), the other
    shape nearly every message has besides proton's empty header (``Consumer.pump``)."""
    if data[:2] == b"\x00\x53" and len(data) > 3 and 0x72 < data[2] <= 0x78:
        return _NEW_HEAD.pack(_NEW_SECTION_HEAD, offset) + data
    return with_stream_offset(data, offset)


def spliced_rows(batch: list[tuple[int, bytes]]) -> list[bytes] | None:
    """``[spliced(d, o) for o, d in batch]`` for a batch whose messages all have one length
    and the first 8 bytes of the first, which opens with proton's empty header and a section
    an annotations section goes before (``_EMPTY_HEADER_THEN``: a message of one layout, as
    a producer sends them); None for any other batch (then one by one).

    Why: the messages as the rows of one array, the header cut and the annotations section
    with each offset put in front by three numpy copies, each row out as ``bytes`` by one
    ``tolist`` (void items): ~165 against ~245 ns a message one by one for 1,024 messages of
    103 bytes, ~205 against ~250 for 256, break-even at ~150 (in process)."""
    k = len(batch)
    data = list(map(_DATA, batch))
    size = len(data[0])
    if size < 8 or data[0][:7] not in _EMPTY_HEADER_THEN or len(set(map(len, data))) != 1:
        return None
    rows = np.frombuffer(b"".join(data), np.uint8).reshape(k, size)
    if not (rows[:, :8] == rows[0, :8]).all():
        return None
    head = len(_PREFIX)
    out = np.empty((k, head + 8 + size - 4), np.uint8)
    out[:, :head] = _PREFIX
    out[:, head:head + 8] = np.fromiter(map(_OFFSET, batch), ">i8", k).view(np.uint8).reshape(k, 8)
    out[:, head + 8:] = rows[:, 4:]
    return out.view(f"V{out.shape[1]}").ravel().tolist()


def offset_spec(filters: SourceFilters) -> Any:
    """The storage ``OffsetSpec`` for the start the filters asked for."""
    return filters.start


class Consumer:
    def __init__(self, link: Any, entry: Any, filters: SourceFilters,
                 schedule: Callable[["Consumer", bool], None],
                 end: Callable[[BrokerError], None] | None = None,
                 name: str | None = None, store_policy: StorePolicy | None = None,
                 offsets_at: Any = None):
        self.link = link
        try:  # the lag metric's ``consumer`` (a plain str)
            self.metrics_label = f"{link.name}"
        except UnicodeDecodeError:  # proton raises on a name that is not UTF-8 (a peer's choice)
            self.metrics_label = "<not UTF-8>"
        self.end = end or (lambda error: None)  # the core ends this link (its stream is gone)
        self.conn: Any = None  # the adapter's state of this link's connection
        self.entry = entry
        self.filters = filters
        # stage 2 as one function of the stored bytes (no dispatch per record), applied to
        # a slice of records at a time (``selection``)
        self.match = fast_match.bytes_matcher(filters.stage2)
        self.select = selection(self.match)
        self.schedule = schedule  # schedule(consumer, soon): ask for another turn
        # a named consumer (``tracking.CONSUMER_NAME`` on attach): starts after its stored
        # offset and stores what the client accepts; where another cluster node leads the
        # stream, on that leader (``offsets_at``: asked first, the reader opened on its answer)
        start = offset_spec(filters)
        self.offsets: ConsumerOffsets | None = None
        self.reader: Any = _NOT_STARTED
        if name is not None and offsets_at is not None:
            self.offsets = ConsumerOffsets(offsets_at, name, store_policy, query=False)
            offsets_at.query_offset(name, lambda stored, error: self._begin(start, stored, error))
        else:
            if name is not None:
                self.offsets = ConsumerOffsets(entry.stream, name, store_policy)
                start = self.offsets.start(start)
            self.reader = entry.reader(start, filters.filter_values, filters.match_unfiltered,
                                       filters.stage2)
        self.presettled = link.snd_settle_mode == 1  # Link.SND_SETTLED
        self.records: list = []  # the chunk being read, stage 2 not applied yet from pos
        self.pos = 0
        self.ready: list = []  # records of it that matched, not yet sent from ri
        self.ri = 0
        self.tag = 0
        self.tag_cell = TagCell()
        self.turn = ConsumerTurn()
        # the next offset this consumer sends (a plain int: the metrics scrape reads it from
        # its own thread for the consumer lag)
        self.next_offset = int(self.reader.position)
        self.waiting = False  # at the end of the stream: woken when it grows
        self.scheduled = False
        self.closed = False
        self._stats = (0, 0, 0)
        self.sent_messages = self.sent_bytes = 0  # since it attached (the HTTP API's savings)

    def _begin(self, start: Any, stored: int | None, error: BrokerError | None) -> None:
        """On the loop: the leader answered a named consumer's stored offset: read from
        after it (or from the link's own start when none is stored); no answer ends the
        link with the reason."""
        if self.closed:
            return
        if error is not None:
            self.end(error)
            return
        assert self.offsets is not None
        self.offsets.learned(stored)
        self.reader = self.entry.reader(self.offsets.start(start), self.filters.filter_values,
                                        self.filters.match_unfiltered, self.filters.stage2)
        self.next_offset = int(self.reader.position)
        if not self.scheduled:
            self.scheduled = True
            self.schedule(self, False)

    def close(self) -> None:
        self.closed = True
        self.records = self.ready = []
        if self.offsets is not None:
            self.offsets.close(store=not self.entry.deleted)
        close = getattr(self.reader, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                log.debug("closing a reader", exc_info=True)

    def pump(self) -> None:
        """Send what credit allows; see the module docstring for when a turn ends."""
        if self.closed:
            return
        self.scheduled = False
        self.waiting = False
        link = self.link
        turn = self.turn
        turn.start()
        select = self.select
        # (a named consumer's reader until the leader answers, a follower's remote reader: none)
        read_span = getattr(self.reader, "read_span", None) if select is not None else None
        head = _SPLICED_HEAD.pack
        records = self.records
        pos = self.pos
        n = len(records)
        ready = self.ready  # records that passed stage 2 and wait for credit: ready[ri:]
        ri = self.ri
        delivered = delivered_bytes = dropped = 0
        tag = self.tag
        presettled = self.presettled
        offsets = self.offsets
        impl = link._impl
        session = lib.pn_link_session(impl)
        max_buffered = turn.max_buffered
        max_held = turn.max_held
        # deliveries proton keeps for this link: the unsettled ones, or (pre-settled) the ones
        # not written yet; counted only while the socket is backed up (see ``ConsumerTurn``)
        held = lib.pn_link_queued if presettled else lib.pn_link_unsettled
        io = self.conn.io if self.conn is not None else None
        backed_up = io is not None and io.writing
        if (io is not None and not presettled and not io.send_buffer_limited
                and held(impl) >= max_held):
            io.limit_send_buffer(turn.send_buffer)  # (checked per turn: costs nothing per send)
        credit = lib.pn_link_credit(impl)
        outgoing_bytes = lib.pn_session_outgoing_bytes
        new_delivery, send, advance, settle = (lib.pn_delivery, lib.pn_link_send,
                                               lib.pn_link_advance, lib.pn_delivery_settle)
        cell, tag_bytes = self.tag_cell.cell, self.tag_cell.tag
        last = False  # a slice ended the turn: send what it matched, then yield
        try:
            while credit > 0:
                if ri >= len(ready):
                    if pos >= n:
                        span = read_span(SPAN_RECORDS) if read_span is not None else None
                        if span is not None:
                            found = self.reader.span_matches(span)
                            if found is not None:  # all matches: the columns chose them
                                records = ready = found
                                ri = 0
                                pos = n = len(found)
                            else:
                                records = self.reader.span_records(span)
                                pos, n = 0, len(records)
                            continue
                        chunk = self.reader.read_chunk(SCAN_BUDGET)
                        if chunk is SCAN_PAUSED:  # a long stage-1 scan: let others in, go on
                            self.scheduled = True
                            self.schedule(self, False)
                            break
                        if chunk is None:
                            self.waiting = True
                            if link.drain_mode:
                                link.drained()
                            break
                        records = chunk.records
                        pos = 0
                        n = len(records)
                        if select is None or type(records) is Matches:  # no stage 2, or the
                            ready, ri, pos = records, 0, n  # reader's columns chose them
                        continue
                    assert select is not None  # (without one, pos reached n above)
                    size = turn.next_slice()
                    if not size:  # this turn's evaluation time is spent
                        self.scheduled = True
                        self.schedule(self, False)
                        break
                    part = records[pos:pos + size]
                    pos += len(part)
                    ready, ri = select(part), 0
                    dropped += len(part) - len(ready)
                    if not turn.on_slice(len(part), len(ready)):  # let the others in, go on
                        last = True  # (after sending what matched)
                    if not ready:
                        if last:
                            self.scheduled = True
                            self.schedule(self, False)
                            break
                        continue
                # send ready[ri:], as much as credit, the turn and the session's room allow:
                # the batch's messages with x-stream-offset spliced in, in one comprehension.
                # The room: the session's bytes waiting for the socket, counted here
                # (``pn_link_send`` adds each message's size to them); the batch is cut to
                # about what fits (by its first message's size: no copies made to be dropped)
                room = max_buffered - outgoing_bytes(session)
                k = min(credit, turn.max_batch - turn.delivered)
                if (size := len(ready[ri][1]) + _SPLICE_BYTES) * k > room:
                    k = max(1, room // size)
                batch = ready[ri:ri + k]
                if len(batch) >= ROWS_AT_LEAST and (outs := spliced_rows(batch)) is not None:
                    pass  # (messages of one layout: spliced as the rows of one array)
                elif (first := batch[0][1][:8])[:7] in _EMPTY_HEADER_THEN and len(first) == 8:
                    # the first message's shape, usually every one's: one comparison each (of
                    # 8 bytes: a message that holds them is longer than the 7 the shape needs;
                    # the eighth, the next section's constructor, is the same for messages of
                    # one layout; ~25 ns a delivery less than a test of the length too)
                    outs = [head(_SPLICE_EMPTY_HEADER, o) + d[4:] if d[:8] == first
                            else spliced(d, o) for o, d in batch]
                else:
                    outs = [head(_SPLICE_EMPTY_HEADER, o) + d[4:]
                            if d[:7] in _EMPTY_HEADER_THEN and len(d) > 7 else spliced(d, o)
                            for o, d in batch]
                if offsets is None and not backed_up and (total := sum(map(len, outs))) <= room:
                    # the whole batch fits: nothing to check per delivery. Pre-settled, the
                    # settle advances the link too (proton settles the current delivery after
                    # advancing past it): three calls a delivery
                    if presettled:
                        for out in outs:
                            tag += 1
                            cell[0] = tag
                            delivery = new_delivery(impl, tag_bytes)
                            send(impl, out, len(out))
                            settle(delivery)
                    else:
                        for out in outs:
                            tag += 1
                            cell[0] = tag
                            new_delivery(impl, tag_bytes)
                            send(impl, out, len(out))
                            advance(impl)
                    sent = len(outs)
                    delivered_bytes += total
                else:
                    sent = self._send_checked(batch, outs, room, tag)
                    tag += sent
                    delivered_bytes += sum(map(len, outs[:sent]))
                ri += sent
                credit -= sent
                delivered += sent
                if self.scheduled:  # backed up
                    break
                if not turn.on_sent(sent) or last:
                    self.scheduled = True
                    self.schedule(self, False)
                    break
        except CorruptionError as exc:
            self._damaged(exc)
        finally:
            self.records = records
            self.pos = pos
            self.ready = ready
            self.ri = ri
            self.next_offset = (ready[ri][0] if ri < len(ready) else records[pos][0]
                                if pos < len(records) else int(self.reader.position))
            self.tag = tag
            self._account(delivered, delivered_bytes, dropped)

    def _damaged(self, exc: CorruptionError) -> None:
        """The reader met a chunk damaged on disk: detach this link with
        ``amqp:internal-error`` giving the reason (what it sent before goes out first), one
        log line. Why not as a bug (the adapter closes the whole connection, with a
        traceback): the other links of the connection have nothing to do with that chunk."""
        log.error("consumer of stream %r: %s", self.entry.name, exc)
        self.end(InternalError(str(exc)))

    def _send_checked(self, batch: list, outs: list[bytes], room: int, tag: int) -> int:
        """Send ``outs`` (``batch``'s messages as spliced) one by one, the client's backlog
        checked before each (a batch that does not fit in ``room`` bytes, a socket backed up,
        or a named consumer that counts each delivery); how many went. ``tag``: the last tag
        used. When the client is behind, the rest waits for the socket (``scheduled``)."""
        impl = self.link._impl
        session = lib.pn_link_session(impl)
        turn = self.turn
        max_buffered, max_held = turn.max_buffered, turn.max_held
        presettled = self.presettled
        held = lib.pn_link_queued if presettled else lib.pn_link_unsettled
        io = self.conn.io if self.conn is not None else None
        backed_up = io is not None and io.writing
        offsets = self.offsets
        cell, tag_bytes = self.tag_cell.cell, self.tag_cell.tag
        sent = 0
        for (offset, _), out in zip(batch, outs, strict=True):
            if (room < 0 and (room := max_buffered - lib.pn_session_outgoing_bytes(session)) < 0
                    or backed_up and held(impl) >= max_held):
                # the client is behind: send nothing more until its socket takes what waits
                # (checked before each send, so a reader that never reads costs at most
                # max_buffered bytes, or max_held deliveries, and this record waits for the
                # next turn)
                self.scheduled = True
                self.schedule(self, True)
                break
            size = len(out)
            room -= size
            tag += 1
            cell[0] = tag
            delivery = lib.pn_delivery(impl, tag_bytes)
            lib.pn_link_send(impl, out, size)
            if presettled:
                lib.pn_delivery_settle(delivery)  # (and advances past it)
            else:
                lib.pn_link_advance(impl)
            if offsets is not None:
                if presettled:
                    offsets.delivered(offset)
                else:
                    offsets.sent[tag] = offset
            sent += 1
        return sent

    def wake(self) -> None:
        """The stream grew: go on if this consumer was waiting at its end."""
        if self.waiting and not self.scheduled and not self.closed:
            self.waiting = False
            self.pump()

    def _account(self, delivered: int, delivered_bytes: int, dropped: int) -> None:
        self.sent_messages += delivered
        self.sent_bytes += delivered_bytes
        m = self.entry.metrics
        if m is not None:
            self._stats = m.count_turn(self._stats, self.reader.stats, delivered, delivered_bytes,
                                       dropped, settled=self.presettled)
