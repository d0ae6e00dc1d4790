// One scenario of rabbitmq-stream-js-client against the broker's stream listener, driven by a
// JSON spec (argv[2]); prints one JSON line with what the client saw.
// spec: {port, stream, create?, filtered?, publisherRef?, publish?: [{content, value?, id?}],
//        consume?: {offset: "first"|"next"|["offset", n],
//                   values?, matchUnfiltered?, expect, ref?, store?}, queryOffset?, stats?,
//        alternate?, delete?}
// id: the publishing id (basicSend); ref and store: the consumer's name and an offset it
// stores; queryOffset: a consumer name whose stored offset to ask (null when none); stats:
// the stream's StreamStats as the client reads them (numbers; null for a missing one);
// alternate: n rounds of two publishers of one connection taking turns, "k;i" from publisher
// k in round i, each message sent and flushed before the next (the client's own suite's
// "order is enforced when using flush").
// The consumer is closed before a delete: the client hangs in close() when its own live
// consumer got the MetadataUpdate of the deletion (seen with 1.0.0).
const rabbit = require("rabbitmq-stream-js-client")

async function main() {
  const spec = JSON.parse(process.argv[2])
  const client = await rabbit.connect({
    hostname: "127.0.0.1", port: spec.port, username: "guest", password: "guest", vhost: "/",
  })
  const out = { confirmed: 0, errors: [], messages: [] }
  try {
    if (spec.create) await client.createStream({ stream: spec.stream, arguments: {} })
    if (spec.publish) {
      const publisher = await client.declarePublisher(
        spec.publisherRef ? { stream: spec.stream, publisherRef: spec.publisherRef } : { stream: spec.stream },
        spec.filtered ? (msg) => (msg.applicationProperties || {}).v : undefined)
      const done = new Promise((resolve) => {
        publisher.on("publish_confirm", (err, ids) => {
          if (err) out.errors.push(err)
          else out.confirmed += ids.length
          if (out.confirmed + out.errors.length >= spec.publish.length) resolve()
        })
      })
      for (const m of spec.publish) {
        const opts = m.value === undefined ? {} : { applicationProperties: { v: m.value } }
        if (m.id === undefined) await publisher.send(Buffer.from(m.content), opts)
        else await publisher.basicSend(BigInt(m.id), Buffer.from(m.content), opts)
      }
      await publisher.flush()
      await done
      if (spec.publisherRef) out.lastPublishingId = Number(await publisher.getLastPublishingId())
    }
    if (spec.alternate) {
      const publishers = [await client.declarePublisher({ stream: spec.stream }),
                          await client.declarePublisher({ stream: spec.stream })]
      for (let i = 0; i < spec.alternate; i++) {
        for (const k of publishers.keys()) {
          await publishers[k].send(Buffer.from(`${k};${i}`))
          await publishers[k].flush()
        }
      }
    }
    if (spec.consume) {
      const c = spec.consume
      const offset = c.offset === "first" ? rabbit.Offset.first()
        : c.offset === "next" ? rabbit.Offset.next() : rabbit.Offset.offset(BigInt(c.offset[1]))
      const params = { stream: spec.stream, offset }
      if (c.ref) params.consumerRef = c.ref
      if (c.values) {
        params.filter = { values: c.values, matchUnfiltered: !!c.matchUnfiltered,
                          postFilterFunc: (msg) => true }
      }
      let consumer
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("timed out: " + JSON.stringify(out))), 20000)
        client.declareConsumer(params, (msg) => {
          out.messages.push([Number(msg.offset), msg.content.toString("utf-8")])
          if (out.messages.length >= c.expect) { clearTimeout(timer); resolve() }
        }).then((created) => { consumer = created }).catch(reject)
      })
      while (consumer === undefined) await new Promise((r) => setTimeout(r, 10))
      if (c.store !== undefined) await consumer.storeOffset(BigInt(c.store))
      await consumer.close()
    }
    if (spec.queryOffset) {
      try {
        out.offset = Number(await client.queryOffset({ reference: spec.queryOffset, stream: spec.stream }))
      } catch (e) {
        out.offset = null
        out.queryError = String(e && e.message || e)
      }
    }
    if (spec.stats) {
      const stats = await client.streamStatsRequest(spec.stream)
      out.stats = Object.fromEntries(Object.entries(stats).map(
        ([k, v]) => [k, typeof v === "bigint" ? Number(v) : null]))
    }
    if (spec.delete) await client.deleteStream({ stream: spec.stream })
  } finally {
    await client.close()
  }
  console.log(JSON.stringify(out))
}

main().then(() => process.exit(0)).catch((e) => { console.error(e && e.stack || e); process.exit(1) })
