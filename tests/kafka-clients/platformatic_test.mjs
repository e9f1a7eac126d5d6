#!/usr/bin/env node
// @platformatic/kafka against a Kafka-protocol broker, its consumer groups with the
// consumer protocol (KIP-848, groupProtocol: 'consumer': the broker assigns) and, for
// comparison, the classic one.
//
//   PLATFORMATIC_PREFIX=DIR node platformatic_test.mjs BOOTSTRAP PREFIX
//
// DIR is the npm prefix @platformatic/kafka is installed under (DIR/node_modules): the
// package is ESM only, and ESM imports do not look at NODE_PATH.
//
// The package wants Node 22 (engines: >= 22.22); on Node 20 it runs with the polyfill
// below (Promise.withResolvers, Node 22's; the only Node 22 API it reached in these
// scenarios). One PASS/FAIL line per scenario, as kafkajs_test.js prints them:
//   consumer-group       N records on a 4-partition topic, read by one consumer of a
//                        consumer-protocol group that commits each: every record read once,
//                        the committed offsets (admin OffsetFetch) equal the log ends, and
//                        ListGroups lists the group with type `consumer`
//   consumer-two-members two consumer-protocol members split the 4 partitions (disjoint,
//                        covering all), each reads its records once; one closes (leaves), the
//                        other gets all 4 and reads the records produced after
//   classic-group        the consumer-group scenario with the classic protocol (JoinGroup and
//                        SyncGroup, the client's own assignor); listed with type `classic`
// Every wait is a condition with a deadline (KAFKA_CLIENTS_DEADLINE_S, default 25 s).

import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers() {
    let resolve, reject
    const promise = new this((res, rej) => {
      resolve = res
      reject = rej
    })
    return { promise, resolve, reject }
  }
}

const CLIENT = 'platformatic'
const PARTITIONS = 4
const PER_PARTITION = 25
const DEADLINE_MS = 1000 * Number(process.env.KAFKA_CLIENTS_DEADLINE_S || '25')

const prefixDir = process.env.PLATFORMATIC_PREFIX
if (!prefixDir) {
  console.log(`FAIL ${CLIENT} harness: PLATFORMATIC_PREFIX (the npm prefix of @platformatic/kafka) is not set`)
  process.exit(1)
}
const entry = createRequire(join(prefixDir, 'node_modules', 'resolve.js')).resolve('@platformatic/kafka')
const kafka = await import(pathToFileURL(entry).href)
const { Admin, Consumer, Producer, stringSerializers, stringDeserializers } = kafka
const VERSION = createRequire(entry)('../package.json').version

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitFor(cond, ms, what) {
  const end = Date.now() + ms
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out after ${ms / 1000}s waiting for ${what}`)
    await sleep(50)
  }
}

async function withTimeout(promise, ms, what) {
  let timer
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000}s`)), ms)
  })
  try {
    return await Promise.race([promise, t])
  } finally {
    clearTimeout(timer)
  }
}

let passed = 0
let failed = 0
async function scenario(name, fn, factor = 3) {
  const started = Date.now()
  let problems
  try {
    problems = (await withTimeout(fn(), factor * DEADLINE_MS + 20000, name)) || []
  } catch (e) {
    process.stderr.write(`${e.stack}\n`)
    problems = [`${e.name}: ${e.message}`]
  }
  const took = ((Date.now() - started) / 1000).toFixed(1)
  if (problems.length) {
    for (const p of problems) process.stderr.write(`[${CLIENT}] ${name}: ${p}\n`)
    failed++
    let text = problems.slice(0, 5).join('; ')
    if (problems.length > 5) text += `; ... (${problems.length} problems)`
    console.log(`FAIL ${CLIENT} ${name}: ${text} (${took}s)`)
  } else {
    passed++
    console.log(`PASS ${CLIENT} ${name} (${took}s)`)
  }
}

// Short timeouts and few retries: a broken broker fails in seconds.
const base = (bootstrap, clientId) => ({
  clientId,
  bootstrapBrokers: [bootstrap],
  timeout: 10000,
  retries: 3,
  retryDelay: 250,
})

const log = (...a) => process.stderr.write(`[${CLIENT}] ${a.join(' ')}\n`)

async function createTopic(admin, topic) {
  await admin.createTopics({ topics: [topic], partitions: PARTITIONS, replicas: 1 })
  await waitFor(async () => {
    const md = await admin.metadata({ topics: [topic], forceUpdate: true })
    const t = md.topics.get(topic)
    return t && t.partitionsCount === PARTITIONS
  }, 10000, `metadata of ${topic}`)
}

// `per` records to each partition, values `<tag>-p<P>-<i>`; returns the values.
async function produce(bootstrap, topic, tag, per) {
  const producer = new Producer({ ...base(bootstrap, `${CLIENT}-producer`), serializers: stringSerializers })
  const values = []
  const messages = []
  for (let p = 0; p < PARTITIONS; p++) {
    for (let i = 0; i < per; i++) {
      const v = `${tag}-p${p}-${i}`
      values.push(v)
      messages.push({ topic, key: v, value: v, partition: p })
    }
  }
  try {
    await producer.send({ messages, acks: -1 })
  } finally {
    await producer.close()
  }
  return values
}

// The log end of every partition (ListOffsets, latest).
async function logEnds(admin, topic) {
  const res = await admin.listOffsets({ topics: [{ name: topic, partitions: [...Array(PARTITIONS).keys()].map((p) => ({ partitionIndex: p, timestamp: -1n })) }] })
  const out = {}
  for (const t of res) for (const p of t.partitions) out[p.partitionIndex] = Number(p.offset)
  return out
}

// What `group` committed on `topic` (OffsetFetch through the admin client).
async function committedOf(admin, group, topic) {
  const res = await admin.listConsumerGroupOffsets({
    groups: [{ groupId: group, topics: [{ name: topic, partitionIndexes: [...Array(PARTITIONS).keys()] }] }],
  })
  const out = {}
  for (const g of res) for (const t of g.topics) for (const p of t.partitions) out[p.partitionIndex] = Number(p.committedOffset)
  return out
}

// A group member: reads from its committed offsets (earliest without them) and commits
// every record once it has it, before taking the next.
class Member {
  constructor(bootstrap, group, topic, name, seen, protocol) {
    this.name = name
    this.topic = topic
    this.seen = seen
    this.errors = []
    const groupOpts = protocol === 'consumer'
      ? { groupProtocol: 'consumer' }
      : { groupProtocol: 'classic', sessionTimeout: 6000, heartbeatInterval: 500, rebalanceTimeout: 10000 }
    this.consumer = new Consumer({
      ...base(bootstrap, name),
      groupId: group,
      ...groupOpts,
      deserializers: stringDeserializers,
      maxWaitTime: 100,
    })
    this.consumer.on('consumer:heartbeat:error', ({ error }) => log(`${name}: heartbeat error: ${error.message}`))
  }

  async start() {
    this.stream = await this.consumer.consume({
      topics: [this.topic],
      mode: 'committed',
      fallbackMode: 'earliest',
      autocommit: false,
      maxWaitTime: 100,
    })
    this.stream.on('error', (e) => this.errors.push(`stream: ${e.message}`))
    this.fetches = 0 // Fetch answers received (the stream's `fetch` event)
    this.stream.on('fetch', () => this.fetches++)
    // Every change of what it owns, for the log (the scenarios wait on owned() itself).
    let last = ''
    this.watch = setInterval(() => {
      const now = JSON.stringify(this.owned())
      if (now !== last) log(`${this.name} owns ${now}`)
      last = now
    }, 20)
    this.done = (async () => {
      for await (const m of this.stream) {
        this.seen.push({ p: m.partition, o: Number(m.offset), v: m.value, by: this.name })
        try {
          await m.commit()
        } catch (e) {
          this.errors.push(`commit of ${m.partition}/${m.offset}: ${e.message}`)
        }
      }
    })().catch((e) => this.errors.push(`reading: ${e.message}`))
    return this
  }

  // The partitions of the topic it owns now (the group's assignment as the client holds it).
  owned() {
    const a = (this.consumer.assignments || []).find((x) => x.topic === this.topic)
    return a ? [...a.partitions].sort((x, y) => x - y) : []
  }

  async close() {
    if (this.closed) return
    this.closed = true
    clearInterval(this.watch)
    await this.stream.close()
    await this.done
    await this.consumer.close()
  }
}

// Each of `values` read exactly once, nothing else.
function checkReads(seen, values, what) {
  const problems = []
  const want = new Set(values)
  const got = seen.map((r) => r.v)
  const distinct = new Set(got)
  if (got.length !== distinct.size) problems.push(`${what}: ${got.length - distinct.size} records read twice`)
  const missing = values.filter((v) => !distinct.has(v))
  const extra = [...distinct].filter((v) => !want.has(v))
  if (missing.length) problems.push(`${what}: ${missing.length} records not read (e.g. ${missing[0]})`)
  if (extra.length) problems.push(`${what}: ${extra.length} unexpected records (e.g. ${extra[0]})`)
  return problems
}

async function committedAtEnds(admin, group, topic) {
  let last = {}
  let ends = {}
  try {
    await waitFor(async () => {
      ends = await logEnds(admin, topic)
      last = await committedOf(admin, group, topic)
      return Object.keys(ends).length === PARTITIONS && Object.keys(ends).every((p) => last[p] === ends[p])
    }, DEADLINE_MS, 'the committed offsets to reach the log ends')
    return []
  } catch (e) {
    return [`committed offsets ${JSON.stringify(last)}, log ends ${JSON.stringify(ends)}: ${e.message}`]
  }
}

// ListGroups v5 with both types (the client asks for `classic` only unless told).
async function groupType(admin, group) {
  const groups = await admin.listGroups({ types: ['classic', 'consumer'] })
  const g = groups.get(group)
  return g ? g.groupType : 'not listed'
}

// Scenarios consumer-group and classic-group.
async function oneConsumer(bootstrap, pre, protocol) {
  const topic = `${pre}-${protocol}-one`
  const group = `${topic}-g`
  const admin = new Admin(base(bootstrap, `${CLIENT}-admin`))
  const problems = []
  const seen = []
  let m
  try {
    await createTopic(admin, topic)
    const values = await produce(bootstrap, topic, 'a', PER_PARTITION)
    m = await new Member(bootstrap, group, topic, `${protocol}-a`, seen, protocol).start()
    await waitFor(() => seen.length >= values.length, DEADLINE_MS, `${values.length} records (read ${seen.length}; owns ${JSON.stringify(m.owned())})`)
    problems.push(...(await committedAtEnds(admin, group, topic)))
    const type = await groupType(admin, group)
    if (type !== protocol) problems.push(`ListGroups gives the group's type as ${type}, want ${protocol}`)
    await sleep(300) // not a synchronisation: a window for a duplicate to show up
    await m.close()
    problems.push(...checkReads(seen, values, 'records'))
    problems.push(...m.errors.slice(0, 3).map((e) => `${m.name}: ${e}`))
    // After the member left: the commits stay.
    const after = await committedOf(admin, group, topic)
    const want = Object.fromEntries([...Array(PARTITIONS).keys()].map((p) => [p, PER_PARTITION]))
    if (JSON.stringify(after) !== JSON.stringify(want)) problems.push(`committed after close ${JSON.stringify(after)}, want ${JSON.stringify(want)}`)
  } finally {
    if (m) await m.close().catch((e) => log(`closing ${m.name}: ${e.message}`))
    await admin.close()
  }
  return problems
}

async function twoMembers(bootstrap, pre) {
  const topic = `${pre}-consumer-two`
  const group = `${topic}-g`
  const admin = new Admin(base(bootstrap, `${CLIENT}-admin`))
  const problems = []
  const seen = []
  const members = []
  const describe = () => members.map((m) => `${m.name} owns ${JSON.stringify(m.owned())}`).join(', ')
  const splitOk = () => {
    const owned = members.map((m) => m.owned())
    const all = owned.flat()
    return owned.every((o) => o.length > 0) && all.length === PARTITIONS && new Set(all).size === PARTITIONS
  }
  try {
    await createTopic(admin, topic)
    members.push(await new Member(bootstrap, group, topic, 'a', seen, 'consumer').start())
    await waitFor(() => members[0].owned().length === PARTITIONS, DEADLINE_MS, `a to own the 4 partitions (${describe()})`)
    members.push(await new Member(bootstrap, group, topic, 'b', seen, 'consumer').start())
    await waitFor(splitOk, DEADLINE_MS, `the partitions split between a and b (${describe()})`)
    const shares = Object.fromEntries(members.map((m) => [m.name, m.owned()]))
    log(`split: ${describe()}`)
    // The client delivers the records of a fetch that was in flight when a partition was
    // revoked (it acknowledges the revocation without waiting for that fetch, and does not
    // drop what it brings back): a record produced now could reach a as well as b. Once each
    // member has had one more Fetch answer, its fetches ask for its new share only.
    const fetched = members.map((m) => m.fetches)
    await waitFor(() => members.every((m, i) => m.fetches > fetched[i]), DEADLINE_MS, 'a Fetch answer for each member after the split')
    const first = await produce(bootstrap, topic, 'first', PER_PARTITION)
    await waitFor(() => seen.length >= first.length, DEADLINE_MS, `${first.length} records (read ${seen.length}; ${describe()})`)
    problems.push(...(await committedAtEnds(admin, group, topic)))
    for (const r of seen) {
      if (!shares[r.by].includes(r.p)) problems.push(`${r.by} read ${r.p}/${r.o}, outside its share ${JSON.stringify(shares[r.by])}`)
    }
    if (!seen.some((r) => r.by === 'a') || !seen.some((r) => r.by === 'b')) problems.push('one member read nothing')
    const b = members.pop()
    await b.close()
    problems.push(...b.errors.slice(0, 3).map((e) => `b: ${e}`))
    const a = members[0]
    const t0 = Date.now()
    await waitFor(() => a.owned().length === PARTITIONS, DEADLINE_MS, `a to own the 4 partitions after b left (${describe()})`)
    log(`a owns the 4 partitions ${((Date.now() - t0) / 1000).toFixed(1)}s after b closed`)
    const n = seen.length
    const second = await produce(bootstrap, topic, 'second', PER_PARTITION)
    await waitFor(() => seen.length >= n + second.length, DEADLINE_MS, `${second.length} more records (read ${seen.length - n}; ${describe()})`)
    problems.push(...(await committedAtEnds(admin, group, topic)))
    await sleep(300) // not a synchronisation: a window for a duplicate to show up
    problems.push(...checkReads(seen, first.concat(second), 'records'))
    const late = seen.slice(n).filter((r) => r.by !== 'a')
    if (late.length) problems.push(`${late.length} records produced after b left were read by b`)
    problems.push(...a.errors.slice(0, 3).map((e) => `a: ${e}`))
  } finally {
    for (const m of members) await m.close().catch((e) => log(`closing ${m.name}: ${e.message}`))
    await admin.close()
  }
  return problems
}

async function main() {
  const [bootstrap, prefix] = process.argv.slice(2)
  if (!bootstrap || !prefix) {
    console.log(`FAIL ${CLIENT} harness: usage: PLATFORMATIC_PREFIX=DIR node platformatic_test.mjs BOOTSTRAP PREFIX`)
    return 1
  }
  log(`@platformatic/kafka ${VERSION} on Node ${process.versions.node}`)
  const pre = `${prefix}-pf`
  await scenario('consumer-group', () => oneConsumer(bootstrap, pre, 'consumer'))
  await scenario('consumer-two-members', () => twoMembers(bootstrap, pre), 5)
  await scenario('classic-group', () => oneConsumer(bootstrap, pre, 'classic'))
  return failed ? 1 : 0
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.log(`FAIL ${CLIENT} harness: ${e.message}`)
    process.exit(1)
  }
)
