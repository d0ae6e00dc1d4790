// One super stream scenario of rabbitmq-stream-js-client against the broker's stream listener,
// driven by a JSON spec (argv[2]); prints one JSON line with what the client saw.
// spec: {port, superStream, create?: {partitions?: n, bindingKeys?: [...], arguments?},
//        routing?: "hash"|"key", publish?: [{content, key}], route?: [key, ...],
//        consume?: {expect}, delete?}
// publish: through a SuperStreamPublisher (the key is the message's messageId; closing the
// publisher flushes it); consume: every partition from the first offset, each message as
// [partition, content]. A failed create or delete is reported, not thrown (the client itself
// takes STREAM_ALREADY_EXISTS from CreateSuperStream for a success).
const rabbit = require("rabbitmq-stream-js-client")

async function main() {
  const spec = JSON.parse(process.argv[2])
  const client = await rabbit.connect({
    hostname: "127.0.0.1", port: spec.port, username: "guest", password: "guest", vhost: "/",
  })
  const out = { messages: [], routes: {} }
  const name = spec.superStream
  try {
    if (spec.create) {
      const c = spec.create
      try {
        await client.createSuperStream({ streamName: name, arguments: c.arguments || {} },
          c.bindingKeys, c.partitions)
        out.created = true
      } catch (e) {
        out.createError = String(e && e.message || e)
      }
    }
    if (spec.publish) {
      const publisher = await client.declareSuperStreamPublisher(
        { superStream: name, routingStrategy: spec.routing || "hash" },
        (content, opts) => opts.messageProperties.messageId)
      for (const m of spec.publish) {
        await publisher.send(Buffer.from(m.content), { messageProperties: { messageId: m.key } })
      }
      await publisher.close()
    }
    try {
      out.partitions = await client.queryPartitions({ superStream: name })
    } catch (e) {
      out.partitionsError = String(e && e.message || e)
    }
    for (const key of spec.route || []) {
      out.routes[key] = await client.routeQuery({ routingKey: key, superStream: name })
    }
    if (spec.consume) {
      // one plain consumer per partition: the client's SuperStreamConsumer always subscribes as
      // a single active consumer and drops what arrives before the subscription is registered
      // (with RabbitMQ, before its ConsumerUpdate); single active consumer is not served yet
      const consumers = []
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("timed out: " + JSON.stringify(out))), 20000)
        for (const p of out.partitions) {
          client.declareConsumer({ stream: p, offset: rabbit.Offset.first() }, (msg) => {
            out.messages.push([p, msg.content.toString("utf-8")])
            if (out.messages.length >= spec.consume.expect) { clearTimeout(timer); resolve() }
          }).then((created) => consumers.push(created)).catch(reject)
        }
      })
      while (consumers.length < out.partitions.length) await new Promise((r) => setTimeout(r, 10))
      for (const c of consumers) await c.close()
    }
    if (spec.delete) {
      try {
        await client.deleteSuperStream({ streamName: name })
        out.deleted = true
      } catch (e) {
        out.deleteError = String(e && e.message || e)
      }
    }
  } finally {
    await client.close()
  }
  console.log(JSON.stringify(out))
}

main().then(() => process.exit(0)).catch((e) => { console.error(e && e.stack || e); process.exit(1) })
