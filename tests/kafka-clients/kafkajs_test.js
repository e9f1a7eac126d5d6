#!/usr/bin/env node
// kafkajs against a Kafka-protocol broker.
//
//   node kafkajs_test.js BOOTSTRAP PREFIX LOGDIR        every scenario
//   node kafkajs_test.js member BOOTSTRAP GROUP TOPIC   one group member (used by the group scenarios)
//
// Client defaults kept as shipped (idempotent: false, acks -1, Java-compatible murmur2
// partitioner, round-robin assignor, classic group protocol); only timeouts and retries
// are shortened so a broken broker fails in seconds. One PASS/FAIL line per scenario.
'use strict'

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const { Kafka, logLevel } = require('kafkajs')
const { spawn } = require('child_process')
const fs = require('fs')
const path = require('path')

const CLIENT = 'kafkajs'
const PARTITIONS = 4
const GROUP_PER_PARTITION = 10
const RESTART_PER_PARTITION = 5
const SLACK_MS = 5000
const DEADLINE_MS = 1000 * Number(process.env.KAFKA_CLIENTS_DEADLINE_S || '25')

const kafkaFor = (bootstrap, clientId) =>
  new Kafka({
    clientId,
    brokers: [bootstrap],
    connectionTimeout: 3000,
    requestTimeout: 10000,
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, log }) => {
      process.stderr.write(`[kafkajs ${namespace}] ${log.message} ${JSON.stringify(log)}\n`)
    },
  })

const CONSUMER = {
  sessionTimeout: 6000,
  heartbeatInterval: 500,
  rebalanceTimeout: 10000,
  maxWaitTimeInMs: 100,
  retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
}

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
async function scenario(name, fn) {
  const started = Date.now()
  let problems
  try {
    problems = (await withTimeout(fn(), 2 * DEADLINE_MS + 20000, name)) || []
  } catch (e) {
    process.stderr.write(`${e.stack}\n`)
    problems = [`${e.name}: ${e.message}`]
  }
  const took = ((Date.now() - started) / 1000).toFixed(1)
  if (problems.length) {
    failed++
    let text = problems.slice(0, 5).join('; ')
    if (problems.length > 5) text += `; ... (${problems.length} problems)`
    console.log(`FAIL ${CLIENT} ${name}: ${text} (${took}s)`)
  } else {
    passed++
    console.log(`PASS ${CLIENT} ${name} (${took}s)`)
  }
}

// KAFKA_CLIENTS_AUTO_CREATE=1 (see README): the broker creates topics on first use.
const AUTO_CREATE = process.env.KAFKA_CLIENTS_AUTO_CREATE === '1'

async function createTopic(kafka, topic) {
  if (AUTO_CREATE) {
    // A consumer's subscribe asks for the topic's metadata with auto-creation allowed.
    const c = kafka.consumer({ groupId: `${topic}-creator`, ...CONSUMER })
    await c.connect()
    try {
      await c.subscribe({ topics: [topic] })
    } finally {
      await c.disconnect()
    }
  }
  const admin = kafka.admin()
  await admin.connect()
  try {
    if (!AUTO_CREATE) await admin.createTopics({
      topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
      waitForLeaders: true,
      timeout: 5000,
    })
    await waitFor(async () => {
      const md = await admin.fetchTopicMetadata({ topics: [topic] })
      return md.topics.length === 1 && md.topics[0].partitions.length === PARTITIONS
    }, 10000, `metadata of ${topic}`)
  } finally {
    await admin.disconnect()
  }
}

async function metadata(kafka, topic) {
  await createTopic(kafka, topic)
  const admin = kafka.admin()
  await admin.connect()
  const problems = []
  try {
    const names = await admin.listTopics()
    if (!names.includes(topic)) problems.push(`topic ${topic} not listed among ${names.length} topics`)
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    const t = md.topics.find((x) => x.name === topic)
    if (!t) return problems.concat([`no metadata for ${topic}`])
    const ids = t.partitions.map((p) => p.partitionId).sort((a, b) => a - b)
    if (JSON.stringify(ids) !== JSON.stringify([...Array(PARTITIONS).keys()])) {
      problems.push(`partitions ${JSON.stringify(ids)}, expected 0..${PARTITIONS - 1}`)
    }
    for (const p of t.partitions) {
      if (p.partitionErrorCode !== 0) problems.push(`partition ${p.partitionId}: error code ${p.partitionErrorCode}`)
      if (!(p.leader >= 0)) problems.push(`partition ${p.partitionId}: no leader (${p.leader})`)
    }
  } finally {
    await admin.disconnect()
  }
  return problems
}

// CreateTopics with configEntries, then DescribeConfigs of the topic (RESOURCE_TYPES.TOPIC = 2).
async function topicConfigs(kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  const problems = []
  try {
    await admin.createTopics({
      topics: [{
        topic,
        numPartitions: 1,
        replicationFactor: 1,
        configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'max.message.bytes', value: '2097152' }],
      }],
      timeout: 5000,
    })
    const r = await admin.describeConfigs({ resources: [{ type: 2, name: topic }], includeSynonyms: false })
    const entries = (r.resources[0] && r.resources[0].configEntries) || []
    const get = (n) => entries.find((e) => e.configName === n)
    for (const [n, want] of [['cleanup.policy', 'compact'], ['max.message.bytes', '2097152'], ['retention.bytes', '-1']]) {
      const e = get(n)
      if (!e || e.configValue !== want) problems.push(`${n}: ${e && e.configValue}, expected ${want}`)
    }
    if (get('cleanup.policy') && get('cleanup.policy').isDefault) problems.push('cleanup.policy reported as a default')
    try {
      await admin.createTopics({
        topics: [{ topic: `${topic}-bad`, numPartitions: 1, configEntries: [{ name: 'no.such.config', value: '1' }] }],
        timeout: 5000,
      })
      problems.push('an unknown config was accepted')
    } catch (e) {
      const text = JSON.stringify(e.errors || e.message)
      if (!/INVALID_CONFIG|no\.such\.config/.test(text) && e.type !== 'INVALID_CONFIG') problems.push(`unknown config: ${e.name} ${text}`)
    }
  } finally {
    await admin.disconnect()
  }
  return problems
}

// The produce plan: keys k0..k4 three times each, two headers (one binary), one record
// without a key, one with an explicit timestamp an hour ago (kept exactly).
function producePlan(prefix) {
  const plan = []
  for (let i = 0; i < 15; i++) {
    plan.push({
      key: `${prefix}-k${i % 5}`,
      value: `${prefix}-v${i}`,
      headers: { h1: 'one', bin: Buffer.from([0, 255, 10, i]) },
    })
  }
  plan.push({ key: null, value: `${prefix}-nokey`, headers: {} })
  plan.push({ key: `${prefix}-kts`, value: `${prefix}-explicit-ts`, headers: { ts: 'explicit' }, timestamp: Date.now() - 3600000 })
  return plan
}

async function produce(kafka, topic, plan) {
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const delivered = new Map()
  try {
    // One send per record: kafkajs answers per partition batch, so each record's own
    // offset is known without counting within batches.
    for (const r of plan) {
      const msg = { key: r.key, value: r.value, headers: r.headers }
      if (r.timestamp !== undefined) msg.timestamp = String(r.timestamp)
      if (r.partition !== undefined) msg.partition = r.partition
      const res = await producer.send({ topic, acks: -1, timeout: 5000, messages: [msg] })
      if (res.length !== 1 || res[0].errorCode !== 0) throw new Error(`produce answered ${JSON.stringify(res)}`)
      delivered.set(r.value, [res[0].partition, Number(res[0].baseOffset)])
    }
  } finally {
    await producer.disconnect()
  }
  return delivered
}

function headersEqual(got, want) {
  const g = got || {}
  const gk = Object.keys(g).sort()
  const wk = Object.keys(want).sort()
  if (JSON.stringify(gk) !== JSON.stringify(wk)) return false
  return wk.every((k) => Buffer.isBuffer(g[k]) && g[k].equals(Buffer.from(want[k])))
}

async function consumeAll(kafka, topic, group, n) {
  const consumer = kafka.consumer({ groupId: group, ...CONSUMER })
  const out = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        out.push({ partition, message })
      },
    })
    try {
      await waitFor(() => out.length >= n, DEADLINE_MS, `${n} records`)
    } catch (e) {
      // reported by the caller through the count
    }
  } finally {
    await consumer.disconnect()
  }
  return out
}

async function produceAndConsume(kafka, topic, state) {
  await createTopic(kafka, topic)
  const plan = producePlan(topic)
  const t0 = Date.now()
  const delivered = await produce(kafka, topic, plan)
  Object.assign(state, { plan, delivered, t0, t1: Date.now() })
  const problems = []
  const keyPart = new Map()
  for (const r of plan) {
    const d = delivered.get(r.value)
    if (!d) problems.push(`no acknowledgement for ${r.value}`)
    else if (r.key !== null) {
      if (!keyPart.has(r.key)) keyPart.set(r.key, d[0])
      else if (keyPart.get(r.key) !== d[0]) problems.push(`key ${r.key} delivered to partitions ${keyPart.get(r.key)} and ${d[0]}`)
    }
  }
  return problems
}

async function consumeBack(kafka, topic, state) {
  if (!state.plan) return ['not run: the produce scenario did not run']
  const { plan, delivered, t0, t1 } = state
  const got = await consumeAll(kafka, topic, `${topic}-reader`, plan.length)
  const problems = []
  if (got.length !== plan.length) problems.push(`consumed ${got.length} of ${plan.length} records`)
  const byValue = new Map()
  for (const g of got) {
    const v = g.message.value.toString()
    if (byValue.has(v)) problems.push(`${v} consumed twice`)
    byValue.set(v, g)
  }
  const keyPart = new Map()
  for (const r of plan) {
    const g = byValue.get(r.value)
    if (!g) {
      problems.push(`${r.value} not consumed`)
      continue
    }
    const m = g.message
    const key = m.key === null ? null : m.key.toString()
    if (key !== r.key) problems.push(`${r.value}: key ${key}, expected ${r.key}`)
    if (!headersEqual(m.headers, r.headers)) problems.push(`${r.value}: headers ${JSON.stringify(m.headers)}, expected ${JSON.stringify(r.headers)}`)
    const ts = Number(m.timestamp)
    if (r.timestamp !== undefined) {
      if (ts !== r.timestamp) problems.push(`${r.value}: timestamp ${ts}, expected exactly ${r.timestamp}`)
    } else if (!(ts >= t0 - SLACK_MS && ts <= t1 + SLACK_MS)) {
      problems.push(`${r.value}: timestamp ${ts} outside [${t0}, ${t1}] +- ${SLACK_MS} ms`)
    }
    const d = delivered.get(r.value)
    if (d && (d[0] !== g.partition || d[1] !== Number(m.offset))) {
      problems.push(`${r.value}: consumed at ${g.partition}/${m.offset}, acknowledged at ${d[0]}/${d[1]}`)
    }
    if (r.key !== null) {
      if (!keyPart.has(r.key)) keyPart.set(r.key, g.partition)
      else if (keyPart.get(r.key) !== g.partition) problems.push(`key ${r.key} in partitions ${keyPart.get(r.key)} and ${g.partition}`)
    }
  }
  return problems
}

// ---------------------------------------------------------------------------
// Consumer group of two processes

const MEMBERS = [] // every member process started; killed on exit if still running
process.on('exit', () => MEMBERS.forEach((m) => m.kill()))

class Member {
  constructor(name, bootstrap, group, topic, logdir) {
    MEMBERS.push(this)
    this.name = name
    this.assignment = null
    this.records = []
    this.errors = []
    this.commitFailures = []
    const err = fs.openSync(path.join(logdir, `${name}.log`), 'w')
    this.proc = spawn(process.execPath, [__filename, 'member', bootstrap, group, topic], {
      stdio: ['pipe', 'pipe', err],
    })
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, sig) => resolve(code === null ? sig : code)))
    this.code = undefined
    this.exited.then((c) => { this.code = c })
    let buf = ''
    this.proc.stdout.on('data', (d) => {
      buf += d.toString()
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        let ev
        try { ev = JSON.parse(line) } catch (e) { process.stderr.write(`[${name}] ${line}\n`); continue }
        if (ev.ev === 'assigned') this.assignment = ev.partitions.slice().sort((a, b) => a - b)
        else if (ev.ev === 'record') this.records.push(ev)
        else if (ev.ev === 'error') this.errors.push(ev.msg)
        else if (ev.ev === 'commit_failed') this.commitFailures.push(ev.msg)
      }
    })
  }

  async stop(ms) {
    try { this.proc.stdin.end('stop\n') } catch (e) { /* already gone */ }
    const r = await Promise.race([this.exited, sleep(ms).then(() => 'timeout')])
    if (r === 'timeout') {
      this.proc.kill('SIGKILL')
      return `${this.name} did not close within ${ms / 1000}s (killed)`
    }
    return r === 0 ? null : `${this.name} exited with ${r}`
  }

  kill() { if (this.code === undefined) this.proc.kill('SIGKILL') }
  describe() { return `${this.name}: assignment ${JSON.stringify(this.assignment)}, ${this.records.length} records, errors ${JSON.stringify(this.errors.slice(0, 2))}` }
}

async function produceToPartitions(kafka, topic, tag, per) {
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const values = []
  try {
    const messages = []
    for (let p = 0; p < PARTITIONS; p++) {
      for (let i = 0; i < per; i++) {
        const v = `${topic}-${tag}-p${p}-${i}`
        values.push(v)
        messages.push({ key: v, value: v, partition: p })
      }
    }
    await producer.send({ topic, acks: -1, timeout: 5000, messages })
  } finally {
    await producer.disconnect()
  }
  return values
}

async function committed(kafka, group, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const res = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    const out = {}
    for (const p of res[0].partitions) out[p.partition] = Number(p.offset)
    return out
  } finally {
    await admin.disconnect()
  }
}

async function groupScenarios(kafka, bootstrap, pre, logdir, result) {
  const topic = `${pre}-grp`
  const group = `${pre}-group`
  await createTopic(kafka, topic)
  const start = (tag) => [0, 1].map((i) => new Member(`${CLIENT}-${tag}-${i}`, bootstrap, group, topic, logdir))
  const describe = (ms) => ms.map((m) => m.describe()).join('; ')
  const collect = async (ms, n, what) => {
    try {
      await waitFor(() => ms.reduce((s, m) => s + m.records.length, 0) >= n || ms.some((m) => m.code !== undefined), DEADLINE_MS, what)
      return []
    } catch (e) {
      return [`${e.message} (${describe(ms)})`]
    }
  }
  const stopAll = async (ms) => (await Promise.all(ms.map((m) => m.stop(15000)))).filter((x) => x)

  // Phase 1: the two members split the partitions, then the records arrive.
  const problems = []
  let members = start('a')
  let shares
  let phase1
  try {
    try {
      await waitFor(() => {
        const a = members.map((m) => m.assignment)
        if (a.some((x) => !x || x.length === 0)) return false
        const all = a.flat()
        return new Set(all).size === all.length && all.length === PARTITIONS
      }, DEADLINE_MS, 'two members with disjoint non-empty assignments covering every partition')
    } catch (e) {
      result.restart = ['not run: the group did not form']
      return [`${e.message} (${describe(members)})`]
    }
    shares = members.map((m) => m.assignment)
    phase1 = await produceToPartitions(kafka, topic, 'old', GROUP_PER_PARTITION)
    problems.push(...(await collect(members, phase1.length, `${phase1.length} records in the group`)))
    problems.push(...(await stopAll(members)))
  } finally {
    members.forEach((m) => m.kill())
  }
  let seen = []
  members.forEach((m, i) => {
    problems.push(...m.errors.map((e) => `${m.name}: ${e}`))
    // No rebalance is expected once the split is stable: every commit must succeed.
    problems.push(...m.commitFailures.slice(0, 2).map((e) => `${m.name}: commit failed: ${e}`))
    if (m.records.length === 0) problems.push(`${m.name} (partitions ${JSON.stringify(shares[i])}) got no record`)
    for (const r of m.records) {
      if (!shares[i].includes(r.p)) problems.push(`${m.name} got a record of partition ${r.p}, outside its share ${JSON.stringify(shares[i])}`)
    }
    seen = seen.concat(m.records.map((r) => r.v))
  })
  const want = new Set(phase1)
  if (new Set(seen).size !== seen.length) problems.push(`${seen.length - new Set(seen).size} records seen twice`)
  const missing = phase1.filter((v) => !seen.includes(v)).length
  const extra = seen.filter((v) => !want.has(v)).length
  if (missing || extra) problems.push(`missing ${missing}, unexpected ${extra}`)
  try {
    const got = await committed(kafka, group, topic)
    for (let p = 0; p < PARTITIONS; p++) {
      if (got[p] !== GROUP_PER_PARTITION) problems.push(`committed offsets ${JSON.stringify(got)}, expected ${GROUP_PER_PARTITION} on each partition`)
      if (got[p] !== GROUP_PER_PARTITION) break
    }
  } catch (e) {
    problems.push(`reading committed offsets: ${e.message}`)
  }

  // Phase 2: records arrive while the group is down; the restarted group resumes from
  // its commits: nothing of phase 1 again, every new record seen. The members may join one
  // after the other, so a rebalance can interrupt them: a failed commit and a new record
  // seen twice are then normal (at-least-once), not failures.
  const restart = []
  const phase2 = await produceToPartitions(kafka, topic, 'new', RESTART_PER_PARTITION)
  members = start('b')
  try {
    restart.push(...(await collect(members, phase2.length, `${phase2.length} new records after the restart`)))
    restart.push(...(await stopAll(members)))
  } finally {
    members.forEach((m) => m.kill())
  }
  seen = []
  for (const m of members) {
    restart.push(...m.errors.map((e) => `${m.name}: ${e}`))
    seen = seen.concat(m.records.map((r) => r.v))
  }
  const old = seen.filter((v) => want.has(v))
  if (old.length) restart.push(`${old.length} records before the commit point re-read (e.g. ${old[0]})`)
  const notSeen = phase2.filter((v) => !seen.includes(v)).length
  if (notSeen) restart.push(`${notSeen} new records not seen`)
  if (new Set(seen).size !== seen.length) {
    process.stderr.write(`group-restart: ${seen.length - new Set(seen).size} new records seen twice (a rebalance during the restart)\n`)
  }
  result.restart = restart
  return problems
}

async function member(bootstrap, group, topic) {
  const emit = (ev) => process.stdout.write(JSON.stringify(ev) + '\n')
  const kafka = kafkaFor(bootstrap, 'flume-kc-member')
  const consumer = kafka.consumer({ groupId: group, ...CONSUMER })
  let stopping = false
  const stop = new Promise((resolve) => {
    let buf = ''
    process.stdin.on('data', (d) => {
      buf += d.toString()
      if (buf.includes('stop')) resolve()
    })
    process.stdin.on('end', resolve)
  })
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    emit({ ev: 'assigned', partitions: (e.payload.memberAssignment[topic] || []) })
  })
  consumer.on(consumer.events.REBALANCING, () => emit({ ev: 'assigned', partitions: [] }))
  consumer.on(consumer.events.CRASH, (e) => emit({ ev: 'error', msg: `crash: ${e.payload.error && e.payload.error.message}` }))
  try {
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic: t, partition, message }) => {
        if (stopping) return
        emit({ ev: 'record', p: partition, o: Number(message.offset), v: message.value.toString() })
        try {
          // processed: commit offset + 1
          await consumer.commitOffsets([{ topic: t, partition, offset: String(Number(message.offset) + 1) }])
        } catch (e) {
          // e.g. a rebalance under way: the record comes again
          process.stderr.write(`commit failed: ${e.stack}\n`)
          emit({ ev: 'commit_failed', msg: `${e.name}: ${e.message}` })
        }
      },
    })
    await stop
  } catch (e) {
    emit({ ev: 'error', msg: `${e.name}: ${e.message}` })
  }
  stopping = true
  await consumer.disconnect() // leaves the group
}

// Admin: createPartitions grows a topic while a group member reads it (the member is
// rebalanced onto every partition), then deleteGroups removes the group's offsets.
async function adminScenario(kafka, topic) {
  await createTopic(kafka, topic)
  const problems = []
  const total = PARTITIONS + 2
  const group = `${topic}-admin`
  const admin = kafka.admin()
  await admin.connect()
  const consumer = kafka.consumer({ groupId: group, ...CONSUMER })
  let assigned = []
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    assigned = (e.payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  })
  try {
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({ eachMessage: async () => {} })
    await waitFor(() => assigned.length === PARTITIONS, DEADLINE_MS, `the member assigned ${PARTITIONS} partitions`)
    await admin.createPartitions({ topicPartitions: [{ topic, count: total }], timeout: 5000 })
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    if (md.topics[0].partitions.length !== total) problems.push(`metadata lists ${md.topics[0].partitions.length} partitions, expected ${total}`)
    await waitFor(() => assigned.length === total, DEADLINE_MS, `the member rebalanced onto ${total} partitions (has ${JSON.stringify(assigned)})`)
    try {
      await admin.createPartitions({ topicPartitions: [{ topic, count: total }], timeout: 5000 })
      problems.push('createPartitions to the same count succeeded')
    } catch (e) {
      if (e.type !== 'INVALID_PARTITIONS') problems.push(`createPartitions to the same count: ${e.type || e.message}, expected INVALID_PARTITIONS`)
    }
    await consumer.disconnect()
    await admin.setOffsets({ groupId: group, topic, partitions: [{ partition: total - 1, offset: '0' }] })
    const res = await admin.deleteGroups([group])
    if (res.length !== 1 || res[0].errorCode !== 0) problems.push(`deleteGroups: ${JSON.stringify(res)}`)
    const left = await committed(kafka, group, topic)
    if (Object.values(left).some((o) => o >= 0)) problems.push(`the deleted group still has offsets ${JSON.stringify(left)}`)
    try {
      await admin.deleteGroups([group])
      problems.push('deleting the group a second time succeeded')
    } catch (e) {
      const why = (e.groups || []).map((g) => g.error && g.error.type).join(',')
      if (why !== 'GROUP_ID_NOT_FOUND') problems.push(`deleting the group a second time: ${why || e.message}, expected GROUP_ID_NOT_FOUND`)
    }
  } finally {
    await consumer.disconnect().catch(() => {})
    await admin.disconnect()
  }
  return problems
}

// (offset, key, value) of every record of partition 0 from the start, read by a member
// of a group of its own, until the record at `last` is read or the deadline passes.
// Keys and values as strings, null for none.
async function readPartition(kafka, topic, last) {
  const consumer = kafka.consumer({ groupId: `${topic}-reader-${Date.now()}-${Math.random()}`, ...CONSUMER })
  const out = []
  const str = (b) => (b === null ? null : b.toString())
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (partition === 0) out.push([Number(message.offset), str(message.key), str(message.value)])
      },
    })
    await waitFor(() => out.length && out[out.length - 1][0] >= last, DEADLINE_MS, `the record at ${last}`).catch(() => {})
  } finally {
    await consumer.disconnect()
  }
  return out
}

// A compacted topic with small segments (as common.py's compaction_plan: 20 values for
// each of five keys, tombstones for two, then 60 records of another key, one batch each,
// so the segments roll: a segment rolls only between batches and the cleaner never
// touches the active one). Once the broker's cleaner has run, a consumer from the start
// sees each key once with its newest value (null for the deleted ones) at the offset the
// producer was given. A keyless record is refused with INVALID_RECORD.
async function compaction(kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    await admin.createTopics({
      topics: [{
        topic,
        numPartitions: 1,
        replicationFactor: 1,
        configEntries: [
          { name: 'cleanup.policy', value: 'compact' },
          { name: 'segment.bytes', value: '1024' },
          { name: 'min.cleanable.dirty.ratio', value: '0.01' },
        ],
      }],
      waitForLeaders: true,
      timeout: 5000,
    })
  } finally {
    await admin.disconnect()
  }
  const batches = []
  for (let rnd = 0; rnd < 20; rnd++) batches.push([0, 1, 2, 3, 4].map((k) => [`key-${k}`, `v${rnd}`]))
  batches.push([['key-3', null], ['key-4', null]])
  for (let i = 0; i < 60; i++) batches.push([['filler', `f${i}`]])
  const acked = new Map()
  const problems = []
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  try {
    for (const batch of batches) {
      // One send is one batch: its records get consecutive offsets from baseOffset.
      const res = await producer.send({ topic, acks: -1, timeout: 5000, messages: batch.map(([key, value]) => ({ key, value, partition: 0 })) })
      if (res.length !== 1 || res[0].errorCode !== 0) throw new Error(`produce answered ${JSON.stringify(res)}`)
      batch.forEach(([k, v], i) => acked.set(Number(res[0].baseOffset) + i, [k, v]))
    }
    try {
      await producer.send({ topic, acks: -1, timeout: 5000, messages: [{ value: 'no key', partition: 0 }] })
      problems.push('a keyless record on a compacted topic was acknowledged')
    } catch (e) {
      const type = e.type || (e.cause && e.cause.type)
      if (type !== 'INVALID_RECORD') problems.push(`a keyless record on a compacted topic: ${e.name} ${type || e.message}, expected INVALID_RECORD`)
    }
  } finally {
    await producer.disconnect()
  }
  const last = Math.max(...acked.keys())
  const newest = new Map()
  for (const o of [...acked.keys()].sort((a, b) => a - b)) newest.set(acked.get(o)[0], o)
  const got = await waitFor(async () => {
    const g = await readPartition(kafka, topic, last)
    return g.filter((r) => r[1] && r[1].startsWith('key-')).length === 5 ? g : null
  }, DEADLINE_MS, 'the cleaner to leave one record of each key')
  for (let k = 0; k < 5; k++) {
    const key = `key-${k}`
    const left = got.filter((r) => r[1] === key)
    const want = k >= 3 ? null : 'v19'
    if (left.length !== 1 || left[0][0] !== newest.get(key) || left[0][2] !== want) {
      problems.push(`${key}: ${JSON.stringify(left)}, expected one record at ${newest.get(key)} with ${want}`)
    }
  }
  for (const [o, k, v] of got) {
    const a = acked.get(o)
    if (!a || a[0] !== k || a[1] !== v) problems.push(`offset ${o} reads ${JSON.stringify([k, v])}, the producer was given ${JSON.stringify(a)}`)
  }
  if (!(got.length < acked.size) || got[0][0] === 0) problems.push(`${got.length} of ${acked.size} records left, the first at ${got[0][0]}: nothing was cleaned`)
  return problems
}

// DeleteRecords: the log start moves (fetchTopicOffsets' low), a consumer from the
// beginning starts there, a deletion past the end is OFFSET_OUT_OF_RANGE, and -1
// deletes every record.
async function deleteRecords(kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  const problems = []
  const n = 10
  const before = 4
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true, timeout: 5000 })
    const producer = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    try {
      const messages = [...Array(n).keys()].map((i) => ({ value: `r${i}`, partition: 0 }))
      await producer.send({ topic, acks: -1, timeout: 5000, messages })
    } finally {
      await producer.disconnect()
    }
    const span = async () => {
      const o = (await admin.fetchTopicOffsets(topic)).find((p) => p.partition === 0)
      return [Number(o.low), Number(o.high)]
    }
    // deleteTopicRecords looks the partition's leader up in the metadata the admin
    // client already has; a topic it never asked about has none ("Could not find the
    // leader"), so ask first.
    await admin.fetchTopicMetadata({ topics: [topic] })
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: String(before) }] })
    let s = await span()
    if (s[0] !== before || s[1] !== n) problems.push(`low and high watermarks ${JSON.stringify(s)}, expected [${before},${n}]`)
    const want = [...Array(n - before).keys()].map((i) => `${before + i}:r${before + i}`).join(',')
    const fromStart = (await readPartition(kafka, topic, n - 1)).map(([o, , v]) => `${o}:${v}`).join(',')
    if (fromStart !== want) problems.push(`from the beginning: ${fromStart}, expected ${want}`)
    // Not checked here: a kafkajs consumer whose position is below the log start. Its
    // fetch is OFFSET_OUT_OF_RANGE as it should be, but kafkajs then resets by
    // committing -2 (its "earliest" marker, which Kafka stores as it is) and the broker
    // refuses a negative offset in OffsetCommit (OFFSET_OUT_OF_RANGE): the consumer
    // crashes. kafka-python's delete-records scenario checks the reset.
    try {
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: String(n + 1) }] })
      problems.push(`deleting records before ${n + 1}, past the end ${n}, succeeded`)
    } catch (e) {
      // The retrier wraps the per-partition error in a KafkaJSNonRetriableError.
      const types = (e.partitions || (e.cause && e.cause.partitions) || []).map((p) => p.error && p.error.type).join(',')
      if (types !== 'OFFSET_OUT_OF_RANGE') problems.push(`deleting past the end: ${e.name} ${types || e.message}, expected OFFSET_OUT_OF_RANGE`)
    }
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '-1' }] })
    s = await span()
    if (s[0] !== n || s[1] !== n) problems.push(`after deleting every record (-1) the watermarks are ${JSON.stringify(s)}, expected [${n},${n}]`)
  } finally {
    await admin.disconnect()
  }
  return problems
}

// Kafka transactions: a transactional producer commits one transaction and aborts
// another on partition 0 (and commits one with sendOffsets for a group); a
// read_committed consumer (kafkajs' default) sees only the committed records, in
// order; a read_uncommitted one sees all; the group's offset is the transaction's.
// A zombie: a second producer with the same transactionalId fences the first,
// whose open transaction is aborted and whose next send or commit fails.
async function transactions(kafka, topic) {
  await createTopic(kafka, topic)
  const problems = []
  const producer = kafka.producer({
    transactionalId: `${topic}-tx`,
    idempotent: true,
    maxInFlightRequests: 1,
    transactionTimeout: 30000,
  })
  await producer.connect()
  const send = async (txn, values) =>
    txn.send({ topic, messages: values.map((v) => ({ key: 'k', value: v, partition: 0 })) })
  try {
    let t = await producer.transaction()
    await send(t, ['c1-0', 'c1-1', 'c1-2'])
    await t.commit()
    t = await producer.transaction()
    await send(t, ['ab-0', 'ab-1'])
    await t.abort()
    t = await producer.transaction()
    await send(t, ['c2-0'])
    await t.sendOffsets({ consumerGroupId: `${topic}-g`, topics: [{ topic, partitions: [{ partition: 1, offset: '5' }] }] })
    await t.commit()
  } finally {
    await producer.disconnect()
  }
  const txProducer = () =>
    kafka.producer({ transactionalId: `${topic}-z`, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 30000 })
  const zombie = txProducer()
  const successor = txProducer()
  await zombie.connect()
  try {
    const zt = await zombie.transaction()
    await send(zt, ['zombie-0'])
    await successor.connect()
    // kafkajs sends the transactional InitProducerId at the first transaction: a new
    // epoch, and the zombie's open transaction aborted.
    const st = await successor.transaction()
    let outcome = 'the fenced producer committed a transaction'
    try {
      await send(zt, ['zombie-1'])
      await zt.commit()
    } catch (e) {
      const what = `${e.type || ''} ${e.name} ${e.message}`
      outcome = /FENCED|EPOCH/i.test(what) ? null : `the fenced producer got ${what}, expected a fencing error`
    }
    if (outcome) problems.push(outcome)
    await send(st, ['after-fence'])
    await st.commit()
  } finally {
    await zombie.disconnect().catch(() => {})
    await successor.disconnect()
  }
  const read = async (readUncommitted, want) => {
    const consumer = kafka.consumer({ groupId: `${topic}-r-${readUncommitted}`, readUncommitted, ...CONSUMER })
    const out = []
    await consumer.connect()
    try {
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (partition === 0) out.push(message.value.toString())
        },
      })
      await waitFor(() => out.length >= want, DEADLINE_MS, `${want} records`).catch(() => {})
      await sleep(300)
    } finally {
      await consumer.disconnect()
    }
    return out
  }
  const committedOnly = await read(false, 5)
  const want = ['c1-0', 'c1-1', 'c1-2', 'c2-0', 'after-fence']
  if (JSON.stringify(committedOnly) !== JSON.stringify(want)) problems.push(`read_committed read ${committedOnly}, expected ${want}`)
  const all = await read(true, 8)
  const wantAll = ['c1-0', 'c1-1', 'c1-2', 'ab-0', 'ab-1', 'c2-0', 'zombie-0', 'after-fence']
  if (JSON.stringify(all) !== JSON.stringify(wantAll)) problems.push(`read_uncommitted read ${all}, expected ${wantAll}`)
  const admin = kafka.admin()
  await admin.connect()
  try {
    const offsets = await admin.fetchOffsets({ groupId: `${topic}-g`, topics: [topic] })
    const p1 = offsets[0].partitions.find((p) => p.partition === 1)
    if (!p1 || p1.offset !== '5') problems.push(`the transaction's group offset: ${JSON.stringify(p1)}, expected 5`)
  } finally {
    await admin.disconnect()
  }
  return problems
}

async function main() {
  const args = process.argv.slice(2)
  if (args[0] === 'member') {
    await member(args[1], args[2], args[3])
    return 0
  }
  const [bootstrap, prefix, logdir] = args
  const pre = `${prefix}-js`
  const kafka = kafkaFor(bootstrap, 'flume-kc-kafkajs')
  const state = {}
  const group = {}
  await scenario('metadata', () => metadata(kafka, `${pre}-meta`))
  await scenario('produce', () => produceAndConsume(kafka, `${pre}-rec`, state))
  await scenario('consume', () => consumeBack(kafka, `${pre}-rec`, state))
  await scenario('group', () => groupScenarios(kafka, bootstrap, pre, logdir, group))
  await scenario('group-restart', async () => group.restart || ['not run: the group scenario failed before it'])
  await scenario('admin', () => adminScenario(kafka, `${pre}-adm`))
  await scenario('topic-configs', () => topicConfigs(kafka, `${pre}-cfg`))
  await scenario('delete-records', () => deleteRecords(kafka, `${pre}-del`))
  await scenario('compaction', () => compaction(kafka, `${pre}-cmp`))
  await scenario('transactions', () => transactions(kafka, `${pre}-txn`))
  return failed ? 1 : 0
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.log(`FAIL ${CLIENT} harness: ${e.message}`)
    process.exit(1)
  }
)
