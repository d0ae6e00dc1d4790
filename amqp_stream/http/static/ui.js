// The web UI: polls the management API every INTERVAL ms and redraws its tables; rates are
// differences between polls, drawn with the lags as small SVG sparklines (HISTORY points).
// Credentials: typed in the login form, kept in sessionStorage (this tab only), sent as
// basic auth; a 401 shows the login form again with the broker's reason.
"use strict";

const INTERVAL = Number(new URLSearchParams(location.search).get("interval")) || 2000;
const HISTORY = 60;
const VHOST = "%2F";
const KEY = "amqp-stream-auth";
const $ = (id) => document.getElementById(id);

const history = new Map();  // series key -> numbers (oldest first)
const last = new Map();     // counter key -> [value, time]
let timer = null;

class Unauthorized extends Error {}

function auth() { return sessionStorage.getItem(KEY); }

async function api(method, path, body) {
  const headers = {"Authorization": "Basic " + auth(), "X-Requested-With": "XMLHttpRequest"};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body)});
  if (response.status === 401) {
    let reason = "Login failed";
    try { reason = (await response.json()).reason || reason; } catch (e) { /* not JSON */ }
    throw new Unauthorized(reason);
  }
  if (!response.ok) {
    let reason = response.statusText;
    try { reason = (await response.json()).reason || reason; } catch (e) { /* not JSON */ }
    throw new Error(`${method} ${path}: ${response.status} ${reason}`);
  }
  return response.status === 204 ? null : response.json();
}

// -- small helpers ------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

function num(n) { return Number(n).toLocaleString("en"); }

function bytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function rate(key, value, now) {  // per second since the last poll (0 on the first)
  const prev = last.get(key);
  last.set(key, [value, now]);
  if (!prev || now <= prev[1]) return 0;
  return Math.max(0, (value - prev[0]) * 1000 / (now - prev[1]));
}

function record(key, value) {
  let points = history.get(key);
  if (!points) history.set(key, points = []);
  points.push(value);
  if (points.length > HISTORY) points.shift();
  return points;
}

// A sparkline of ``points``: the newest on the right, scaled to the largest shown.
function sparkline(points, kind) {
  const w = 120, h = 24, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark " + kind);
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const top = Math.max(...points, 1);
  const step = w / (Math.max(points.length, 10) - 1);  // fills up over the first polls
  const x0 = w - step * (points.length - 1);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map((p, i) =>
    `${(x0 + i * step).toFixed(1)},${(h - 2 - (p / top) * (h - 4)).toFixed(1)}`).join(" "));
  const title = document.createElementNS(ns, "title");
  title.textContent = `last ${points.length} polls, max ${top.toFixed(1)}`;
  svg.append(title, line);
  return svg;
}

// Redraws a table's rows. A row's cells of class "keep" (its controls: a field being typed
// in, a button about to be clicked) stay the same elements from poll to poll: the row with
// the same data-key takes them over.
function fill(table, rows, columns, empty) {
  const body = $(table).tBodies[0];
  // moving a kept cell takes the focus from a field being typed in (the keys after it went
  // nowhere): give it back, with the caret, in this same task (no key comes in between)
  const active = document.activeElement;
  const caret = active && active.tagName === "INPUT" ? [active.selectionStart, active.selectionEnd] : null;
  const old = new Map([...body.rows].map((r) => [r.dataset.key, r]));
  for (const row of rows) {
    const before = old.get(row.dataset.key);
    if (!before) continue;
    const kept = before.querySelectorAll("td.keep");
    row.querySelectorAll("td.keep").forEach((cell, i) => { if (kept[i]) cell.replaceWith(kept[i]); });
  }
  body.replaceChildren(...(rows.length ? rows :
    [el("tr", {}, el("td", {class: "empty", colspan: columns}, empty))]));
  if (active && active !== document.activeElement && active.isConnected) {
    active.focus();
    if (caret) active.setSelectionRange(...caret);
  }
}

// -- what each table shows ------------------------------------------------------------------
function filterText(filter) {
  if (!filter) return el("span", {class: "none"}, "none");
  const out = el("span", {class: "filter"});
  if (filter.values.length) {
    out.append("values ", el("code", {class: "values"}, filter.values.join(", ")));
    if (filter.match_unfiltered) out.append(" + unfiltered");
  }
  if (filter.sql) out.append(out.childNodes.length ? " · " : "", "SQL ",
    el("code", {class: "sql"}, filter.sql));
  const props = Object.entries(filter.properties || {});
  if (props.length) out.append(out.childNodes.length ? " · " : "", "properties ",
    el("code", {}, props.map(([k, v]) => `${k}=${v}`).join(", ")));
  return out;
}

function savingsText(s) {
  const chunks = s.chunks_read + s.chunks_skipped;
  const skipped = chunks ? Math.round(100 * s.chunks_skipped / chunks) : 0;
  const sent = s.bytes_read ? Math.round(100 * s.bytes_sent / s.bytes_read) : 0;
  return el("span", {class: "savings", "data-chunks-skipped": s.chunks_skipped,
                     "data-bytes-read": s.bytes_read, "data-bytes-sent": s.bytes_sent},
    el("span", {class: "bar", style: `width:${skipped / 2}px`}),
    ` ${num(s.chunks_skipped)} of ${num(chunks)} chunks skipped (${skipped}%) · `,
    `${bytes(s.bytes_read)} read, ${bytes(s.bytes_sent)} sent`,
    s.bytes_read ? ` (${sent}%)` : "");
}

function streamsTable(queues, now) {
  fill("streams", queues.map((q) => {
    const r = rate("stream:" + q.name, q.committed_offset + 1, now);
    return el("tr", {"data-stream": q.name},
      el("td", {class: "name"}, q.name),
      el("td", {class: "num messages"}, num(q.messages)),
      el("td", {class: "num size"}, bytes(q.segments_bytes || 0)),
      el("td", {class: "num segments"}, num(q.segments)),
      el("td", {class: "num consumers"}, num(q.consumers)),
      el("td", {class: "rate"}, el("span", {class: "value"}, `${r.toFixed(1)}/s`),
        sparkline(record("stream:" + q.name, r), "rate")));
  }), 6, "no streams");
}

function consumersTable(consumers, now) {
  fill("consumers", consumers.map((c) => {
    const key = c.channel_details.connection_name + "|" + c.consumer_tag;
    const r = rate("consumer:" + key, c.filtering.messages_sent, now);
    return el("tr", {"data-consumer": key, "data-stream": c.queue.name},
      el("td", {}, c.queue.name),
      el("td", {}, c.channel_details.connection_name),
      el("td", {}, c.consumer_tag),
      el("td", {class: "filter"}, filterText(c.filter)),
      el("td", {class: "savings"}, savingsText(c.filtering)),
      el("td", {class: "rate"}, `${r.toFixed(1)}/s`,
        sparkline(record("consumer-rate:" + key, r), "rate")),
      // null: read from a member on another node, no log here to measure the lag against
      c.offset_lag == null ? el("td", {class: "lag"}, el("span", {class: "value"}, "n/a"))
        : el("td", {class: "lag"}, el("span", {class: "value"}, num(c.offset_lag)),
          sparkline(record("consumer-lag:" + key, c.offset_lag), "lag")));
  }), 7, "no consumers");
}

function connectionsTable(connections) {
  fill("connections", connections.map((c) => {
    const client = c.client_properties || {};
    return el("tr", {"data-connection": c.name, "data-key": c.name},
      el("td", {class: "name"}, c.user_provided_name ? `${c.name} (${c.user_provided_name})` : c.name),
      el("td", {}, c.protocol), el("td", {}, c.user),
      el("td", {}, [client.product, client.version].filter(Boolean).join(" ") ||
                   client.container_id || ""),
      el("td", {class: "since"}, new Date(c.connected_at).toLocaleTimeString("en-GB")),
      octets("received", c.recv_oct, c.recv_oct_details),
      octets("sent", c.send_oct, c.send_oct_details),
      el("td", {class: "keep"}, el("button", {class: "close", onclick: () => act(
        () => api("DELETE", "/api/connections/" + encodeURIComponent(c.name)),
        `connection ${c.name} closed`)}, "Close")));
  }), 8, "no connections");
}

// A connection's byte count with the API's rate (RabbitMQ's recv_oct/send_oct_details).
function octets(cls, n, details) {
  return el("td", {class: `num ${cls}`, "data-bytes": n || 0}, bytes(n || 0),
    el("span", {class: "per-second"}, ` ${bytes(Math.round((details || {}).rate || 0))}/s`));
}

function offsetsTable(offsets) {
  fill("offsets", offsets.map((o) => {
    const stream = o.stream;
    const input = el("input", {class: "reset-to", value: "first",
                               title: "first, last, next or an offset"});
    const key = stream + "/" + o.consumer;
    return el("tr", {"data-offset": key, "data-key": key},
      el("td", {}, stream), el("td", {class: "consumer"}, o.consumer),
      el("td", {class: "num offset"}, num(o.offset)),
      el("td", {class: "num lag"}, num(o.lag)),
      el("td", {class: "keep"}, input, " ", el("button", {class: "reset", onclick: () => {
        const to = input.value.trim();
        const body = /^\d+$/.test(to) ? {offset: Number(to)} : {spec: to};
        act(() => api("PUT", `/api/stream/offsets/${VHOST}/${encodeURIComponent(stream)}/` +
                             encodeURIComponent(o.consumer), body),
            `offset of ${o.consumer} on ${stream} reset`);
      }}, "Reset")));
  }), 5, "no stored offsets");
}

function superStreamsTable(exchanges, bindings) {
  const supers = exchanges.filter((x) => x.arguments && x.arguments["x-super-stream"]);
  fill("super-streams", supers.map((x) => el("tr", {"data-super-stream": x.name},
    el("td", {}, x.name),
    el("td", {class: "partitions"}, bindings.filter((b) => b.source === x.name)
      .sort((a, b) => (a.arguments["x-stream-partition-order"] ?? 0) -
                      (b.arguments["x-stream-partition-order"] ?? 0))
      .map((b) => `${b.routing_key} → ${b.destination}`).join(", ")))), 2, "no super streams");
}

function duration(ms) {
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400);
  const hms = new Date(s * 1000).toISOString().slice(11, 19);
  return d ? `${d}d ${hms}` : hms;
}

function nodesTable(nodes) {
  fill("nodes", nodes.map((n) => el("tr", {"data-node": n.name},
    el("td", {class: "name"}, n.name), el("td", {}, n.running ? "running" : "down"),
    el("td", {class: "num"}, duration(n.uptime || 0)), el("td", {class: "num"}, num(n.fd_used || 0)))),
    4, "no nodes");
}

// -- the loop --------------------------------------------------------------------------------
function status(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

async function act(call, done) {
  try {
    await call();
    status(done);
    await poll();
  } catch (e) {
    if (e instanceof Unauthorized) return loggedOut(e.message);
    status(e.message, true);
  }
}

async function poll() {
  clearTimeout(timer);
  try {
    const [queues, consumers, connections, exchanges, bindings, nodes, offsets] =
      await Promise.all(["/api/queues", "/api/consumers", "/api/connections", "/api/exchanges",
                         "/api/bindings", "/api/nodes", "/api/stream/offsets"]
        .map((p) => api("GET", p)));
    const now = Date.now();
    streamsTable(queues, now);
    consumersTable(consumers, now);
    connectionsTable(connections);
    offsetsTable(offsets);
    superStreamsTable(exchanges, bindings);
    nodesTable(nodes);
    $("main").dataset.polls = Number($("main").dataset.polls || 0) + 1;
    status("updated " + new Date(now).toLocaleTimeString());
  } catch (e) {
    if (e instanceof Unauthorized) return loggedOut(e.message);
    status(e.message, true);
  }
  timer = setTimeout(poll, INTERVAL);
}

function loggedOut(reason) {
  clearTimeout(timer);
  sessionStorage.removeItem(KEY);
  $("main").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = reason || "";
}

async function loggedIn() {
  const who = await api("GET", "/api/whoami");
  $("login").hidden = true;
  $("login-error").textContent = "";
  $("main").hidden = false;
  $("logout").hidden = false;
  $("node").textContent = "user " + who.name;
  await poll();
}

$("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const user = $("user").value, password = $("password").value;
  sessionStorage.setItem(KEY, btoa(String.fromCharCode(
    ...new TextEncoder().encode(`${user}:${password}`))));
  try {
    await loggedIn();
  } catch (e) {
    loggedOut(e instanceof Unauthorized ? e.message : String(e.message || e));
  }
});

$("logout").addEventListener("click", () => loggedOut(""));

if (auth()) loggedIn().catch((e) => loggedOut(e.message)); else loggedOut("");
