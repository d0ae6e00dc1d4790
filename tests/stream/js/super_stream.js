// One super stream scenario of rabbitmq-stream-js-client against the broker's stream listener,
// driven by a JSON spec (argv[2]); prints one JSON line with what the client saw.
// spec: {port, superStream, create?: {partitions?: n, bindingKeys?: [...], arguments?},
//        routing?: "hash"|"key", publish?: [{content, key}], route?: [key, ...],
//        consume?: {expect}, group?: {members, publish, publishAfter?}, delete?}
// publish: through a SuperStreamPublisher (the key is the message's messageId; closing the
// publisher flushes it); consume: every partition from the first offset, each message as
// [partition, content]. group: `members` SuperStreamConsumers of one consumerRef (single active
// consumers, as the client's always are), each on a client of its own, join in turn, then
// `publish` goes out and each message is seen as [member, partition, content] until all of them
// came; with `publishAfter`, the last member's client closes (its partition moves) and those go
// out too, until all of them came.
// A failed create or delete is reported, not thrown (the client itself takes
// STREAM_ALREADY_EXISTS from CreateSuperStream for a success).
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
    const send = async (messages) => {
      const publisher = await client.declareSuperStreamPublisher(
        { superStream: name, routingStrategy: spec.routing || "hash" },
        (content, opts) => opts.messageProperties.messageId)
      for (const m of messages) {
        await publisher.send(Buffer.from(m.content), { messageProperties: { messageId: m.key } })
      }
      await publisher.close()
    }
    if (spec.group) {
      const g = spec.group
      out.group = []
      const members = []
      let recording = true  // not while the rest close (their partitions move again)
      const until = (messages) => new Promise((resolve, reject) => {  // each of them seen
        const timer = setTimeout(() => reject(new Error("timed out: " + JSON.stringify(out))), 20000)
        const seen = () => messages.every((m) => out.group.some((g) => g[2] === m.content))
        const poll = () => seen() ? (clearTimeout(timer), resolve()) : setTimeout(poll, 10)
        poll()
      })
      for (let i = 0; i < g.members; i++) {  // each with a client of its own, as processes
        const own = await rabbit.connect({
          hostname: "127.0.0.1", port: spec.port, username: "guest", password: "guest", vhost: "/",
        })
        await own.declareSuperStreamConsumer(
          { superStream: name, consumerRef: "group", offset: rabbit.Offset.first() },
          (msg, consumer) => recording &&
            out.group.push([i, consumer.streamName, msg.content.toString("utf-8")]))
        members.push(own)
      }
      await send(g.publish)
      await until(g.publish)
      if (g.publishAfter) {
        // its connections close (a SuperStreamConsumer's close only gives its connections back
        // to the client's pool, without Unsubscribe: the group would not change)
        await members.pop().close()
        await send(g.publishAfter)
        await until(g.publishAfter)
      }
      recording = false
      for (const m of members) await m.close()
    }
    if (spec.publish) await send(spec.publish)
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
