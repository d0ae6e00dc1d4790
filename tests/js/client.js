// A rhea (Node.js) client driven by one JSON argument, for tests/broker/test_rhea.py.
//
// Why: rhea is an independent AMQP 1.0 implementation whose users often write filter
// descriptors as ulong codes (0x120, 0x173, 0x174) where the RabbitMQ clients send symbols.
// The Python test says what to do; this script does exactly that over one connection and prints
// one JSON document on stdout: what the broker answered (attach echo, outcomes, messages).
//
//   node client.js '{"op": "publish", "url": "amqp://127.0.0.1:5672", "address": "/queues/s",
//                    "messages": [{"body": "a", "filter_value": "x", "application_properties": {}}]}'
//   node client.js '{"op": "consume", "url": ..., "address": ..., "until_body": "END",
//                    "filters": [{"key": "sql-filter", "descriptor": 288, "value": "..."}]}'
//   node client.js '{"op": "management", "url": ..., "requests": [{"method": "PUT", "path": ...,
//                    "body": {...}}], "link_name": "management-link-pair", "reopen_as": "other"}'
//
// Filter values are typed with "type": string (default), symbol, long, ulong, bool, list
// (of strings), symbol_map (keys symbols, values strings) or map (string keys). A consumer stops
// at the message whose body is "until_body" (not reported) or after "count" messages; every run
// stops itself after "timeout_ms" (default 10 s) and reports what it had.
'use strict';

const rhea = require('rhea');
const types = rhea.types;

const spec = JSON.parse(process.argv[2]);
const url = new URL(spec.url);
const timeoutMs = spec.timeout_ms || 10000;

function typed(type, value) {
    switch (type || 'string') {
        case 'string': return types.wrap_string(value);
        case 'symbol': return types.wrap_symbol(value);
        case 'long': return types.wrap_long(value);
        case 'ulong': return types.wrap_ulong(value);
        case 'bool': return types.wrap_boolean(value);
        case 'list': return types.wrap_list(value);
        case 'symbol_map': return types.wrap_symbolic_map(value);
        case 'map': return types.wrap_map(value);
        default: throw new Error('unknown filter value type ' + type);
    }
}

function filterMap(filters) {
    const map = {};
    for (const f of filters || []) {
        const descriptor = typeof f.descriptor === 'number'
            ? types.wrap_ulong(f.descriptor) : types.wrap_symbol(f.descriptor);
        map[f.key] = types.described(descriptor, typed(f.type, f.value));
    }
    return map;
}

// Turn what rhea decoded into plain JSON, keeping descriptors and the wire type of values
// where the test needs them (attach echo).
function plain(v) {
    if (v === null || v === undefined) return null;
    if (Buffer.isBuffer(v)) return {binary: v.toString('hex')};
    if (typeof v === 'object' && v.type && typeof v.type.name === 'string' && 'value' in v) {  // rhea's Typed
        const out = {type: v.type.name, value: plain(v.value)};
        if (v.descriptor !== undefined) out.descriptor = plain(v.descriptor);
        return out;
    }
    if (Array.isArray(v)) return v.map(plain);
    if (typeof v === 'object') {
        if (v.descriptor !== undefined) return {descriptor: plain(v.descriptor), value: plain(v.value)};
        const out = {};
        for (const k of Object.keys(v)) out[k] = plain(v[k]);
        return out;
    }
    if (typeof v === 'bigint') return Number(v);
    return v;
}

function connectOptions() {
    const opts = {
        host: url.hostname, port: Number(url.port || 5672), reconnect: false,
        container_id: spec.container_id || 'rhea-interop-' + process.pid,
        hostname: spec.vhost ? 'vhost:' + spec.vhost : url.hostname,
    };
    if (url.username) {
        opts.username = decodeURIComponent(url.username);
        opts.password = decodeURIComponent(url.password);
    }
    return opts;
}

const result = {ok: false};
let finished = false;
let connection;

function finish(error) {
    if (finished) return;
    finished = true;
    if (error) result.error = String(error);
    result.ok = !error;
    process.stdout.write(JSON.stringify(result) + '\n');
    try { connection.close(); } catch (e) { /* already closed */ }
    setTimeout(() => process.exit(0), 50);
}

setTimeout(() => finish('timeout after ' + timeoutMs + ' ms'), timeoutMs);

const container = rhea.create_container();
container.on('error', (ctx) => finish('error: ' + (ctx.error && ctx.error.stack ? ctx.error.stack : JSON.stringify(plain(ctx.error)))));
container.on('connection_error', (ctx) => {
    const e = ctx.error || ctx.connection.error;
    finish('connection error: ' + (e && e.condition ? e.condition + ' ' + (e.description || '') : JSON.stringify(plain(e))));
});
container.on('disconnected', (ctx) => finish('disconnected: ' + (ctx.error || 'no reason')));
connection = container.connect(connectOptions());
connection.on('connection_open', (ctx) => {
    result.remote_properties = plain(ctx.connection.remote.open.properties);
    ({publish, consume, management})[spec.op]();
});

function publish() {
    const sender = connection.open_sender({
        name: spec.link_name || 'rhea-publisher',
        target: {address: spec.address},
    });
    const outcomes = new Array(spec.messages.length).fill(null);
    let next = 0;
    let settled = 0;
    result.outcomes = outcomes;
    sender.on('sender_open', (ctx) => {
        result.attach_target = plain(ctx.sender.remote.attach.target);
    });
    const pump = () => {
        // one_at_a_time: wait for each outcome (each message then makes a chunk of its own)
        while (next < spec.messages.length && sender.sendable() && !(spec.one_at_a_time && settled < next)) {
            const m = spec.messages[next];
            const message = {body: m.body};
            if (m.filter_value !== undefined) message.message_annotations = {'x-stream-filter-value': m.filter_value};
            if (m.application_properties) message.application_properties = m.application_properties;
            if (m.subject) message.subject = m.subject;
            if (m.message_id) message.message_id = m.message_id;
            const index = next++;
            const delivery = sender.send(message);
            delivery.index = index;
        }
    };
    sender.on('sendable', pump);
    const done = (outcome) => (ctx) => {
        outcomes[ctx.delivery.index] = outcome;
        if (++settled === spec.messages.length) finish();
        else if (spec.one_at_a_time) pump();
    };
    sender.on('accepted', done('accepted'));
    sender.on('rejected', done('rejected'));
    sender.on('released', done('released'));
    sender.on('modified', done('modified'));
    sender.on('sender_close', (ctx) => finish('sender closed: ' + JSON.stringify(plain(ctx.sender.error))));
}

function consume() {
    const receiver = connection.open_receiver({
        name: spec.link_name || 'rhea-consumer',
        source: {address: spec.address, filter: spec.filters ? filterMap(spec.filters) : undefined},
        credit_window: spec.credit || 100,
        autoaccept: true,
    });
    result.messages = [];
    receiver.on('receiver_open', (ctx) => {
        const source = ctx.receiver.remote.attach.source;
        result.attach_source_address = source && source.address !== undefined ? source.address : null;
        result.attach_filter = source ? plain(source.filter) : null;
        result.offered_capabilities = plain(ctx.receiver.remote.attach.offered_capabilities);
        if (!spec.count && spec.until_body === undefined) finish();
    });
    receiver.on('message', (ctx) => {
        const m = ctx.message;
        if (spec.until_body !== undefined && m.body === spec.until_body) {
            finish();
            return;
        }
        result.messages.push({
            body: plain(m.body),
            message_annotations: plain(m.message_annotations),
            application_properties: plain(m.application_properties),
            subject: m.subject === undefined ? null : m.subject,
        });
        if (spec.count && result.messages.length >= spec.count) {
            // wait a little: anything beyond count would be a bug the test must see
            setTimeout(finish, spec.linger_ms || 300);
        }
    });
    receiver.on('receiver_close', (ctx) => finish('receiver closed: ' + JSON.stringify(plain(ctx.receiver.error))));
}

// The management node pairs a sender and a receiver on one session (RabbitMQ: same name and
// paired = true). rhea keys links by name within a session, so same-named links would share one
// entry: this client names them <link_name>-requests / <link_name>-replies on the same session.
function management() {
    // "reopen_as": after the answers on the first link pair, close it and ask the same again on a
    // pair with other names on the same session (answers in "responses2")
    result.responses = [];
    managementPair(spec.link_name || 'management-link-pair', result.responses, (sender, receiver) => {
        if (!spec.reopen_as) return finish();
        let closed = 0;
        const reopen = () => {
            if (++closed < 2) return;
            result.responses2 = [];
            managementPair(spec.reopen_as, result.responses2, () => finish());
        };
        sender.once('sender_close', reopen);
        receiver.once('receiver_close', reopen);
        sender.close();
        receiver.close();
    });
}

function managementPair(name, responses, done) {
    const props = {paired: true};
    const sender = connection.open_sender({
        name: name + '-requests', target: {address: '/management'}, source: {address: '/management'},
        properties: props, snd_settle_mode: 1,
    });
    const receiver = connection.open_receiver({
        name: name + '-replies', source: {address: '/management'}, target: {address: '/management'},
        properties: props, credit_window: 10, autoaccept: true, rcv_settle_mode: 0,
    });
    let sent = 0;
    const sendNext = () => {
        const r = spec.requests[sent];
        sender.send({
            message_id: 'req-' + sent, to: r.path, subject: r.method, reply_to: '$me',
            body: r.body === undefined ? null : r.body,
        });
        sent++;
    };
    let ready = 0;
    const maybeStart = () => { if (++ready === 2) sendNext(); };
    sender.once('sendable', maybeStart);
    receiver.on('receiver_open', maybeStart);
    receiver.on('message', (ctx) => {
        const m = ctx.message;
        responses.push({correlation_id: m.correlation_id, subject: m.subject, body: plain(m.body)});
        if (responses.length === spec.requests.length) done(sender, receiver);
        else sendNext();
    });
}
