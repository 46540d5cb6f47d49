// The NATS side of the JetStream store (../jetstream-store.ts), in a worker thread: the state port is
// synchronous (a commit returns once its record is durable, as with fdatasync), the NATS client is not.
// The engine's thread posts one request and sleeps on a shared flag until this thread answers
// (bridge.ts). Plain JavaScript so that a worker thread can run it from the sources and from dist alike.
//
// The project's stream ARIUM_<name> holds every record the holder writes, one subject each:
//   arium.state.<name>.j      journal records (a record of several messages: parts 1/n … n/n)
//   arium.state.<name>.live   the checkpoint ({root, seq}); older ones are purged
//   arium.state.<name>.snap   snapshot log lines, one group of messages per append
//   arium.state.<name>.fence  written by each new holder as it takes the project
// Every one of them is published with the stream's expected last sequence: the holder is the only
// writer, so it knows that sequence; once another engine has taken the project and written its fence,
// each publish of the former holder is refused by the server (fencing), even in the middle of a record.
// The lease is a key of the KV bucket arium-lease-<name> whose entries expire after lease_ms.
import { workerData } from 'node:worker_threads';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import { connect, headers, nkeyAuthenticator } from '@nats-io/transport-node';

const { port, signal: signalBuffer } = workerData;
const signal = new Int32Array(signalBuffer);
/** JetStream's "wrong last sequence": another writer appended since (the fence). */
const WRONG_LAST_SEQUENCE = 10071;
const LEASE_KEY = 'holder';

let nc = null;
let js = null;
let jsm = null;
let kv = null;
let os = null;
let settings = null;
let stream = '';
let subject = '';
/** The stream's last sequence as this holder left it: every publish expects it. */
let lastSeq = 0;
/** The lease this engine holds: its KV revision, its record, and the renewal timer. */
let lease = null;
/** Why this engine no longer holds the project (another took it over); every write then fails. */
let lost = null;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const codeOf = (error) => error?.code ?? error?.api_error?.err_code ?? error?.apiError?.()?.err_code;

class Fenced extends Error {
  name = 'StoreFencedError';
}

function fenced() {
  return new Fenced(lost ?? 'this engine does not hold the project');
}

async function open(given) {
  settings = given;
  const options = {
    servers: given.servers,
    name: `arium-store ${given.name}`,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 2_000,
    maxPingOut: 2,
    timeout: 5_000,
  };
  const auth = given.auth;
  if (auth && 'user' in auth) Object.assign(options, { user: auth.user, pass: auth.pass });
  else if (auth && 'token' in auth) options.token = auth.token;
  else if (auth && 'nkeySeed' in auth) options.authenticator = nkeyAuthenticator(auth.nkeySeed);
  if (given.tls) {
    options.tls = {
      ...(given.tls.ca_file ? { caFile: given.tls.ca_file } : {}),
      ...(given.tls.cert_file ? { certFile: given.tls.cert_file } : {}),
      ...(given.tls.key_file ? { keyFile: given.tls.key_file } : {}),
    };
  }
  nc = await connect(options);
  js = jetstream(nc, { timeout: given.timeoutMs });
  jsm = await jetstreamManager(nc, { timeout: given.timeoutMs });
  stream = `ARIUM_${given.name}`;
  subject = `arium.state.${given.name}`;
  const config = { name: stream, subjects: [`${subject}.>`], storage: 'file', num_replicas: given.replicas, max_msgs_per_subject: -1 };
  await whileForming(given.timeoutMs, async () => {
    try {
      await jsm.streams.info(stream);
    } catch {
      try {
        await jsm.streams.add(config);
      } catch (error) {
        // Another engine created it meanwhile.
        if (!/already in use|exists/i.test(String(error?.message))) throw error;
      }
    }
    kv = await new Kvm(js).create(`arium-lease-${given.name}`, { ttl: given.leaseMs, history: 1, replicas: given.replicas });
    os = await new Objm(js).create(`arium-objects-${given.name}`, { replicas: given.replicas, storage: 'file' });
  });
  return { maxPayload: nc.info?.max_payload ?? 1024 * 1024 };
}

/**
 * What a cluster says while it is still forming (its servers not all routed yet, no meta leader yet): the
 * same request succeeds a moment later, so it is asked again until `ms` have passed.
 */
const FORMING = /no suitable peers for placement|temporarily unavailable|not assigned|no responders|\b503\b/i;

async function whileForming(ms, work) {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await work();
    } catch (error) {
      if (!FORMING.test(String(error?.message)) || Date.now() + 250 > until) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

/** The lease's record, or null when nobody holds it (never taken, released, or expired). */
async function currentLease() {
  const entry = await kv.get(LEASE_KEY);
  if (entry?.operation !== 'PUT' || entry.length === 0) return { entry, owner: null };
  try {
    return { entry, owner: entry.json() };
  } catch {
    return { entry, owner: { pid: null, host: 'unknown', id: 'unreadable' } };
  }
}

/** Writes the lease if it is still at `revision` (0: absent); returns the new revision, or null when another wrote first. */
async function writeLease(entry) {
  const record = JSON.stringify(settings.owner);
  try {
    if (entry && entry.revision > 0) return await kv.update(LEASE_KEY, record, entry.revision);
    return await kv.create(LEASE_KEY, record);
  } catch (error) {
    if (codeOf(error) === WRONG_LAST_SEQUENCE || /wrong last sequence|exists/i.test(String(error?.message))) return null;
    throw error;
  }
}

/**
 * Takes the lease: at once when nobody holds it; when somebody does, once its revision has not changed
 * for lease_ms as seen from here (its holder stopped renewing: killed, stopped, cut off), which needs no
 * clock shared between hosts. Gives up after `waitMs` of seeing it renewed, naming the holder.
 */
async function acquire({ waitMs }) {
  if (lease) return { lastSeq };
  const deadline = Date.now() + waitMs;
  let seen = 0;
  let seenAt = 0;
  for (;;) {
    const { entry, owner } = await currentLease();
    let revision = null;
    if (owner === null) {
      revision = await writeLease(entry);
    } else {
      if (entry.revision !== seen) {
        seen = entry.revision;
        seenAt = Date.now();
      } else if (Date.now() - seenAt >= settings.leaseMs) {
        revision = await writeLease(entry);
      }
      if (revision === null && Date.now() > deadline) return { held: owner };
    }
    if (revision !== null) {
      lease = { revision };
      lost = null;
      await fence();
      lease.timer = setInterval(renew, Math.max(50, Math.floor(settings.leaseMs / 3)));
      return { lastSeq };
    }
    await sleep(Math.min(100, Math.max(10, settings.leaseMs / 20)));
  }
}

/** Appends this holder's fence at the stream's end: from then on a former holder's publishes are refused. */
async function fence() {
  for (let attempt = 0; ; attempt++) {
    const info = await jsm.streams.info(stream);
    const last = info.state.last_seq;
    try {
      const ack = await js.publish(`${subject}.fence`, JSON.stringify(settings.owner), { expect: { lastSequence: last } });
      lastSeq = ack.seq;
      return;
    } catch (error) {
      // The former holder appended between the read and this publish: read again (it cannot go on for ever,
      // as it can no longer renew the lease this engine now holds).
      if (codeOf(error) !== WRONG_LAST_SEQUENCE || attempt > 100) throw error;
    }
  }
}

let renewing = false;
async function renew() {
  if (!lease || lost || renewing) return;
  renewing = true;
  try {
    const revision = await writeLease({ revision: lease.revision });
    if (revision !== null) {
      lease.revision = revision;
      return;
    }
    const { entry, owner } = await currentLease();
    if (owner === null) {
      // The lease expired (this thread was held up) and nobody took it: take it back, unless another
      // engine wrote to the stream meanwhile.
      const again = await writeLease(entry);
      const info = await jsm.streams.info(stream);
      if (again !== null && info.state.last_seq === lastSeq) {
        lease.revision = again;
        return;
      }
    }
    stepDown(owner);
  } catch {
    // The server is out of reach: try again at the next tick; the fence keeps the project safe meanwhile.
  } finally {
    renewing = false;
  }
}

function stepDown(owner) {
  const who = owner && owner.id !== settings.owner.id ? `another engine (pid ${owner.pid} on ${owner.host})` : 'another engine';
  lost = `This engine no longer holds the project "${settings.name}": ${who} took it over after this engine's lease (${settings.leaseMs} ms) went unrenewed; this engine stepped down and refuses every change. Restart it to wait for the project`;
  if (lease?.timer) clearInterval(lease.timer);
}

async function release() {
  if (!lease) return {};
  clearInterval(lease.timer);
  const revision = lease.revision;
  lease = null;
  if (lost) return {};
  try {
    // Only the lease this engine still holds: a lease another engine has taken is not ours to remove.
    await kv.delete(LEASE_KEY, { previousSeq: revision });
  } catch {}
  return {};
}

function partHeaders(index, count) {
  const h = headers();
  h.set('Arium-Part', `${index}/${count}`);
  h.set('Arium-Lease', settings.owner.id);
  return h;
}

/** Publishes a group of messages on one subject, each expecting the stream's last sequence to be this holder's. */
async function publish({ sub, parts }) {
  if (!lease || lost) throw fenced();
  for (let i = 0; i < parts.length; i++) {
    let ack;
    try {
      ack = await js.publish(`${subject}.${sub}`, parts[i], { expect: { lastSequence: lastSeq }, headers: partHeaders(i + 1, parts.length) });
    } catch (error) {
      if (codeOf(error) === WRONG_LAST_SEQUENCE) {
        const { owner } = await currentLease().catch(() => ({ owner: null }));
        stepDown(owner);
        throw fenced();
      }
      await resync();
      throw error;
    }
    lastSeq = ack.seq;
  }
  return { seq: lastSeq };
}

/**
 * After a publish whose acknowledgment did not come: the message may be stored. If the stream's last
 * message is this engine's, it is; the next publish expects its sequence.
 */
async function resync() {
  try {
    const info = await jsm.streams.info(stream);
    if (info.state.last_seq === lastSeq) return;
    const last = await jsm.streams.getMessage(stream, { seq: info.state.last_seq });
    if (last?.header?.get('Arium-Lease') === settings.owner.id) lastSeq = last.seq;
  } catch {}
}

/** Every message on a subject, oldest first. */
async function read({ sub }) {
  const out = [];
  let seq = 1;
  for (;;) {
    const msg = await jsm.streams.getMessage(stream, { seq, next_by_subj: `${subject}.${sub}` });
    if (!msg) return out;
    out.push({ seq: msg.seq, part: msg.header?.get('Arium-Part') ?? '1/1', data: msg.data });
    seq = msg.seq + 1;
  }
}

async function last({ sub }) {
  const msg = await jsm.streams.getMessage(stream, { last_by_subj: `${subject}.${sub}` });
  if (msg) return { seq: msg.seq, data: msg.data, firstSeq: null };
  // Messages are only ever purged after a checkpoint was written: a stream purged before has had one.
  const info = await jsm.streams.info(stream);
  return { seq: null, data: null, firstSeq: info.state.first_seq };
}

/** Removes a subject's messages before `before` (all this holder wrote, when not given). */
async function purge({ sub, before }) {
  if (!lease || lost) throw fenced();
  await jsm.streams.purge(stream, { filter: `${subject}.${sub}`, seq: before ?? lastSeq + 1 });
  return {};
}

async function holder() {
  const { owner } = await currentLease();
  return { owner };
}

async function objList() {
  const names = [];
  for (const info of await os.list()) if (!info.deleted) names.push([info.name, info.size]);
  return { names };
}

async function objPut({ objects }) {
  if (lost) throw fenced();
  // A few at a time: each is several messages, and a snapshot of a big tree brings thousands.
  let next = 0;
  const one = async () => {
    while (next < objects.length) {
      const { name, data } = objects[next++];
      await os.putBlob({ name }, data);
    }
  };
  await Promise.all(Array.from({ length: Math.min(64, objects.length) }, one));
  return {};
}

/**
 * Runs `read` again when it has not answered within a share of the request's time: a read of an
 * object store goes through a consumer, which may wait on a server that was just lost until the
 * stream has a new leader.
 */
async function patiently(read) {
  const each = Math.max(500, Math.floor(settings.timeoutMs / 4));
  for (let attempt = 1; ; attempt++) {
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${each} ms`)), each);
    });
    try {
      return await Promise.race([read(), late]);
    } catch (error) {
      if (attempt >= 3) throw error;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * An object's bytes, its chunks read one by one from the object store's stream by the stream's own
 * message API: `getBlob` reads them through a consumer, and after a server is lost a consumer placed
 * on it waits on it, while the stream itself has moved to a new leader.
 */
async function readObject(name) {
  const info = await os.info(name);
  if (!info || info.deleted) return null;
  const bucket = `arium-objects-${settings.name}`;
  const chunks = [];
  let seq = 1;
  for (let i = 0; i < info.chunks; i++) {
    const msg = await jsm.streams.getMessage(`OBJ_${bucket}`, { seq, next_by_subj: `$O.${bucket}.C.${info.nuid}` });
    if (!msg) break;
    chunks.push(msg.data);
    seq = msg.seq + 1;
  }
  return Buffer.concat(chunks);
}

async function objGet({ name }) {
  return { data: await patiently(() => readObject(name)) };
}

async function objDelete({ names }) {
  if (!lease || lost) throw fenced();
  for (const name of names) await os.delete(name);
  return {};
}

async function close() {
  if (lease) await release();
  await nc?.close();
  return {};
}

const OPS = { open, acquire, release, holder, publish, read, last, purge, objList, objPut, objGet, objDelete, close };

async function answer({ id, op, args }) {
  let reply;
  try {
    reply = { id, ok: await OPS[op](args) };
  } catch (error) {
    reply = { id, error: { name: error?.name ?? 'Error', message: String(error?.message ?? error), code: codeOf(error) ?? null } };
  }
  port.postMessage(reply);
  Atomics.store(signal, 0, id);
  Atomics.notify(signal, 0);
}

port.on('message', (request) => {
  answer(request);
});
