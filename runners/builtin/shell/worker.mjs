// The process of the builtin `shell.run` (runners/builtin/shell/pool.ts starts it as a child of the
// engine's process). It runs just-bash, a simulated bash in JavaScript, over a file system whose every
// operation is a message to the engine, which serves it from the call's ToolVfs (permission checks, the
// call's transaction). This process holds no file of its own: no host path, no network (just-bash's
// curl exists only when a network is configured, and none is), no processes (python3, js-exec and node
// exist only when enabled, and they are not; sqlite3, which starts a thread of its own, is left out).
//
// Why apart from the engine's thread: just-bash's defense in depth runs each script inside an
// AsyncLocalStorage context, and on Node 20 the first `run` of an AsyncLocalStorage turns on the
// process's promise hooks for good: every `await` of the engine cost about 5 to 9 times more after one
// script. Why a process and not a thread: when a script fills the heap, V8 may abort the whole process
// it runs in; here that is this process, and the engine gives the call MEMORY_LIMIT. The process can
// also be killed at the call's deadline, whatever the script is doing.
//
// Plain JavaScript, run as it is from the sources (tests) and from an installed package alike.

import { Buffer } from 'node:buffer';
import { randomFillSync } from 'node:crypto';
import { getHeapStatistics } from 'node:v8';

/** A message to the engine; dropped when the engine is gone (this process then ends, below). */
function post(message) {
  if (process.connected) process.send?.(message);
}

// Without the engine there is nothing to serve and nobody to answer: end with it.
process.on('disconnect', () => process.exit(0));

/**
 * Devices the shell has of its own: they are not VFS paths, so `2>/dev/null` writes nothing anywhere.
 * just-bash reads a file whole, so a read of a device of random or zero bytes gives a finite block: of
 * DEVICE_BLOCK bytes, or as many as the largest count the script asks for with `head -c N` (read from
 * its text before it runs, see deviceDemand), up to the output limit and one
 * more byte so that asking past it is the output-limit error, never a silent cut. A bigger block for
 * every read would make the common `tr -dc a-z < /dev/urandom | head -c 16` run tr over megabytes.
 */
const DEVICE_BLOCK = 64 * 1024;
const DEVICES = new Set(['/dev/null', '/dev/zero', '/dev/random', '/dev/urandom', '/dev/stdin', '/dev/stdout', '/dev/stderr', '/dev/tty']);

let Bash;
/** @type {string[]} */
let COMMANDS = [];
try {
  const justBash = await import('just-bash');
  Bash = justBash.Bash;
  // Every command of just-bash that computes in memory. sqlite3 runs in a thread of its own (sql.js):
  // left out. The network, Python and JavaScript commands are not in this list at all.
  COMMANDS = justBash.getCommandNames().filter((name) => name !== 'sqlite3');
} catch (error) {
  post({ t: 'failed', message: String(error?.message ?? error) });
  process.disconnect?.();
}
const REGISTERED = new Set(COMMANDS);

/** A path as the shell means it: absolute, without "." or ".." (".." at the root stays at the root). */
function normalize(path) {
  const parts = [];
  for (const segment of String(path).split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') parts.pop();
    else parts.push(segment);
  }
  return `/${parts.join('/')}`;
}

/** An error as node:fs makes them: just-bash's commands read the code from the message. */
function fsError(code, message) {
  return Object.assign(new Error(message), { code });
}

/** A command's stub in /bin or /usr/bin: how just-bash finds a command by name without a VFS file. */
function isStub(path) {
  const slash = path.lastIndexOf('/');
  const dir = path.slice(0, slash);
  return (dir === '/bin' || dir === '/usr/bin') && REGISTERED.has(path.slice(slash + 1));
}

/** The folders just-bash probes on its own to find a command (PATH and its fallback). */
function isLookup(path) {
  return path === '/bin' || path === '/usr/bin' || path.startsWith('/bin/') || path.startsWith('/usr/bin/');
}

function bytesOf(content, options) {
  if (typeof content !== 'string') return new Uint8Array(content.buffer, content.byteOffset, content.byteLength).slice();
  const encoding = typeof options === 'string' ? options : options?.encoding;
  if (encoding === 'binary' || encoding === 'latin1') return new Uint8Array(Buffer.from(content, 'latin1'));
  if (encoding === 'base64' || encoding === 'hex' || encoding === 'ascii') return new Uint8Array(Buffer.from(content, encoding));
  return new Uint8Array(Buffer.from(content, 'utf8'));
}

function textOf(bytes, options) {
  const encoding = (typeof options === 'string' ? options : options?.encoding) ?? 'utf8';
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return buffer.toString(encoding === 'utf-8' ? 'utf8' : encoding);
}

/** The call's answers still to come, by request number. */
const pending = new Map();
let nextRequest = 1;
/** The run in progress: one at a time per process. */
let current = null;

function ask(id, op, args) {
  return new Promise((resolve, reject) => {
    const req = nextRequest++;
    pending.set(req, { resolve, reject });
    post({ t: 'fs', id, req, op, args });
  });
}

/**
 * just-bash's IFileSystem over the call's VFS. Paths are normalized here; the engine checks
 * each against the call's permissions. The VFS has no modes and no links: `chmod` holds a mode for the
 * rest of the call only (so `chmod +x s.sh && ./s.sh` works), links are refused.
 */
class VfsFileSystem {
  #id;
  #modes = new Map();
  /**
   * The stats that came with folder listings, by path. The call sees the tree as it was when it began
   * plus its own changes, so they hold until the script changes something: every change clears them.
   */
  #stats = new Map();

  /** How many bytes a read of /dev/zero or /dev/urandom gives in this job (see DEVICE_BLOCK). */
  deviceBytes = DEVICE_BLOCK;

  constructor(id) {
    this.#id = id;
  }

  #ask(op, args) {
    return ask(this.#id, op, args);
  }

  async #change(op, args) {
    this.#stats.clear();
    try {
      return await ask(this.#id, op, args);
    } finally {
      // Again: a listing answered while the change was on its way may hold the state before it.
      this.#stats.clear();
    }
  }

  #statOf(p, st) {
    const directory = st.type === 'directory';
    return {
      isFile: !directory,
      isDirectory: directory,
      isSymbolicLink: false,
      mode: this.#modes.get(p) ?? (directory ? 0o755 : 0o644),
      size: st.size,
      mtime: new Date(st.mtime),
      // The VFS has no links: a path names one file. (cp and mv compare identities to refuse copying a
      // file onto itself.)
      identity: p,
    };
  }

  async #list(path) {
    const p = normalize(path);
    const entries = await this.#ask('list', { path: p });
    for (const e of entries) {
      if (e.mtime !== undefined) this.#stats.set(p === '/' ? `/${e.name}` : `${p}/${e.name}`, { type: e.type, size: e.size, mtime: e.mtime });
    }
    return entries;
  }

  async #read(path) {
    const p = normalize(path);
    if (DEVICES.has(p)) {
      if (p === '/dev/zero') return new Uint8Array(this.deviceBytes);
      if (p === '/dev/random' || p === '/dev/urandom') return randomFillSync(new Uint8Array(this.deviceBytes));
      return new Uint8Array(0);
    }
    return this.#ask('read', { path: p });
  }

  async readFile(path, options) {
    return textOf(await this.#read(path), options);
  }

  async readFileBytes(path) {
    return textOf(await this.#read(path), 'latin1');
  }

  async readFileBuffer(path) {
    return this.#read(path);
  }

  async #write(path, content, options, append) {
    const p = normalize(path);
    if (DEVICES.has(p)) return;
    await this.#change('write', { path: p, data: bytesOf(content, options), append });
  }

  async writeFile(path, content, options) {
    await this.#write(path, content, options, false);
  }

  async appendFile(path, content, options) {
    await this.#write(path, content, options, true);
  }

  async exists(path) {
    const p = normalize(path);
    if (DEVICES.has(p) || isStub(p) || this.#stats.has(p)) return true;
    return this.#ask(isLookup(p) ? 'probe' : 'exists', { path: p });
  }

  async stat(path) {
    const p = normalize(path);
    if (DEVICES.has(p)) return { isFile: true, isDirectory: false, isSymbolicLink: false, mode: 0o666, size: 0, mtime: new Date(0), identity: p };
    if (isStub(p)) return { isFile: true, isDirectory: false, isSymbolicLink: false, mode: 0o755, size: 0, mtime: new Date(0), identity: p };
    return this.#statOf(p, this.#stats.get(p) ?? (await this.#ask('stat', { path: p })));
  }

  async lstat(path) {
    return this.stat(path);
  }

  async mkdir(path, options) {
    const p = normalize(path);
    const recursive = options?.recursive === true;
    const { created } = await this.#change('mkdir', { path: p, recursive });
    if (!created && !recursive) throw fsError('EEXIST', `EEXIST: file already exists, mkdir '${p}'`);
  }

  async readdir(path) {
    const entries = await this.#list(path);
    return entries.map((e) => e.name);
  }

  async readdirWithFileTypes(path) {
    const entries = await this.#list(path);
    return entries.map((e) => ({ name: e.name, isFile: e.type === 'file', isDirectory: e.type === 'directory', isSymbolicLink: false }));
  }

  async rm(path, options) {
    const p = normalize(path);
    try {
      await this.#change('delete', { path: p, recursive: options?.recursive === true });
    } catch (error) {
      if (options?.force === true && error?.code === 'ENOENT') return;
      throw error;
    }
    this.#modes.delete(p);
  }

  async cp(src, dest, options) {
    await this.#change('copy', { from: normalize(src), to: normalize(dest), recursive: options?.recursive === true });
  }

  async mv(src, dest) {
    const from = normalize(src);
    const to = normalize(dest);
    await this.#change('move', { from, to });
    const mode = this.#modes.get(from);
    this.#modes.delete(from);
    if (mode !== undefined) this.#modes.set(to, mode);
  }

  resolvePath(base, path) {
    return normalize(String(path).startsWith('/') ? path : `${base}/${path}`);
  }

  getAllPaths() {
    return [];
  }

  async chmod(path, mode) {
    const p = normalize(path);
    await this.stat(p);
    if (!DEVICES.has(p) && !isStub(p)) this.#modes.set(p, mode & 0o7777);
  }

  async symlink(_target, linkPath) {
    throw fsError('ENOTSUP', `ENOTSUP: operation not supported, symlink '${normalize(linkPath)}' (the VFS has no links)`);
  }

  async link(_existingPath, newPath) {
    throw fsError('ENOTSUP', `ENOTSUP: operation not supported, link '${normalize(newPath)}' (the VFS has no links)`);
  }

  async readlink(path) {
    const p = normalize(path);
    await this.stat(p);
    throw fsError('EINVAL', `EINVAL: invalid argument, readlink '${p}'`);
  }

  async realpath(path) {
    const p = normalize(path);
    await this.stat(p);
    return p;
  }

  async utimes(path) {
    // The VFS keeps the time of a file's last write; `touch` of an existing file changes nothing.
    await this.stat(path);
  }
}

/**
 * The most items one brace range gives in just-bash: it stops a longer range there without a word
 * (`{1..20000}` gives 1 to 10000, with exit status 0), a fixed number it has no option for. A script
 * with a longer range fails instead, before it runs.
 */
const BRACE_RANGE_MAX = 10_000;

/** Items a brace range gives as just-bash expands it (`{a..b..step}`: the step's sign ignored, 0 taken as 1). */
function rangeItems(range) {
  const step = Math.max(1, Math.abs(Number(range.step ?? 1)) || 1);
  let from = range.start;
  let to = range.end;
  if (typeof from === 'string' && typeof to === 'string') {
    from = from.charCodeAt(0);
    to = to.charCodeAt(0);
  } else if (typeof from !== 'number' || typeof to !== 'number') {
    return 0; // not a range just-bash expands: the text stays as written
  }
  const items = Math.floor(Math.abs(to - from) / step) + 1;
  return Number.isFinite(items) ? items : Number.POSITIVE_INFINITY;
}

/** The range as the script wrote it. */
function rangeText(range) {
  const from = range.startStr ?? String(range.start);
  const to = range.endStr ?? String(range.end);
  return `{${from}..${to}${range.step !== undefined ? `..${range.step}` : ''}}`;
}

/** `3000000`, `3k`, `2K`, `1M`, `1MB`, `512b` (GNU's suffixes: b = 512, kB/MB/GB = powers of 1000, K/M/G = of 1024). */
function byteCount(text) {
  const m = /^(\d+)(b|kB|K|k|KiB|MB|M|MiB|GB|G|GiB)?$/.exec(text);
  if (!m) return null;
  const unit =
    { b: 512, kB: 1e3, K: 1024, k: 1024, KiB: 1024, MB: 1e6, M: 1024 ** 2, MiB: 1024 ** 2, GB: 1e9, G: 1024 ** 3, GiB: 1024 ** 3 }[m[2] ?? ''] ?? 1;
  return Number(m[1]) * unit;
}

/** A word of the script as written, when it is plain text (no expansion); null otherwise. */
function literal(word) {
  if (!word || !Array.isArray(word.parts) || word.parts.length !== 1) return null;
  const part = word.parts[0];
  return part?.type === 'Literal' || part?.type === 'SingleQuoted' ? String(part.value) : null;
}

/** Every node of a parsed script, depth first. */
function* nodes(ast) {
  const stack = [ast];
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      for (const child of node) if (child && typeof child === 'object') stack.push(child);
      continue;
    }
    yield node;
    for (const value of Object.values(node)) if (value && typeof value === 'object') stack.push(value);
  }
}

/** The largest byte count a `head -c N` of the script asks for (0 for none). */
function deviceDemand(ast) {
  let most = 0;
  for (const node of nodes(ast)) {
    if (node.type !== 'SimpleCommand' || literal(node.name) !== 'head') continue;
    const args = (node.args ?? []).map(literal);
    for (let i = 0; i < args.length; i++) {
      const a = args[i];
      const given = a === '-c' || a === '--bytes' ? args[i + 1] : a?.startsWith('--bytes=') ? a.slice(8) : a?.startsWith('-c') ? a.slice(2) : null;
      const n = given ? byteCount(given) : null;
      if (n !== null) most = Math.max(most, n);
    }
  }
  return most;
}

/** The first brace range of a parsed script that gives more than BRACE_RANGE_MAX items, or null. */
function longRange(ast) {
  for (const node of nodes(ast)) {
    if (node.type !== 'BraceExpansion' || !Array.isArray(node.items)) continue;
    for (const item of node.items) {
      if (item?.type !== 'Range') continue;
      const items = rangeItems(item);
      if (items > BRACE_RANGE_MAX) return { range: rangeText(item), items: Number.isFinite(items) ? items : null, max: BRACE_RANGE_MAX };
    }
  }
  return null;
}

/** The first `keep` characters of an output, and its whole size. */
function bounded(text, keep) {
  const value = typeof text === 'string' ? text : String(text ?? '');
  let kept = value.length > keep ? value.slice(0, keep) : value;
  const last = kept.charCodeAt(kept.length - 1);
  if (kept.length < value.length && last >= 0xd800 && last <= 0xdbff) kept = kept.slice(0, -1);
  return { text: kept, bytes: Buffer.byteLength(value, 'utf8'), cut: kept.length < value.length };
}

/** The heap in use now: what the script left, garbage included (the engine does not reuse a process left near its limit). */
function heapBytes() {
  return getHeapStatistics().used_heap_size;
}

async function run(job) {
  const controller = new AbortController();
  current = { id: job.id, controller };
  for (const { reject } of pending.values()) reject(fsError('ECANCELED', 'ECANCELED: operation canceled'));
  pending.clear();
  /** A brace range too long for the shell, in the script or in one it runs (`bash -c`, `find -exec`). */
  let tooLong = null;
  try {
    const fs = new VfsFileSystem(job.id);
    const bash = new Bash({
      fs,
      cwd: job.cwd,
      env: { HOME: '/', ...job.env },
      commands: COMMANDS,
      executionLimits: {
        // One count for the bash loops and for the loops of awk, sed and jq programs and awk's records.
        maxLoopIterations: job.limits.loops,
        maxAwkIterations: job.limits.loops,
        maxSedIterations: job.limits.loops,
        maxJqIterations: job.limits.loops,
        maxCommandCount: job.limits.commands,
        maxExecutionTimeMs: job.limits.timeMs,
        maxOutputSize: job.limits.outputBytes,
      },
    });
    // Every script just-bash runs through its exec (this one, `bash -c`, `bash file`, `find -exec`,
    // xargs) is parsed and passed here before it runs. `eval` and `source` parse their text without it.
    bash.registerTransformPlugin({
      name: 'brace-range-limit',
      transform({ ast }) {
        const demand = deviceDemand(ast);
        if (demand > fs.deviceBytes) fs.deviceBytes = Math.min(demand, job.limits.outputBytes + 1);
        const found = longRange(ast);
        if (found) {
          tooLong ??= found;
          controller.abort();
          throw new Error(`brace range ${found.range}: more than ${BRACE_RANGE_MAX} items`);
        }
        return { ast };
      },
    });
    const options = { signal: controller.signal, rawScript: true };
    if (typeof job.stdin === 'string') options.stdin = job.stdin;
    let result;
    try {
      result = await bash.exec(job.script, options);
    } catch (error) {
      if (!tooLong) throw error;
    }
    if (tooLong) {
      post({ t: 'done', id: job.id, braceRange: tooLong, heapBytes: heapBytes() });
      return;
    }
    const stdout = bounded(result.stdout, job.keep);
    const stderr = bounded(result.stderr, job.keep);
    post({ t: 'done', id: job.id, exitCode: result.exitCode, stdout, stderr, heapBytes: heapBytes() });
  } catch (error) {
    post({ t: 'done', id: job.id, error: String(error?.message ?? error), heapBytes: heapBytes() });
  } finally {
    current = null;
  }
}

// Messages from the engine (the IPC channel gives them untyped).
process.on('message', (/** @type {any} */ message) => {
  if (message?.t === 'answer') {
    const waiter = pending.get(message.req);
    if (!waiter) return;
    pending.delete(message.req);
    if (message.ok) waiter.resolve(message.value);
    else waiter.reject(fsError(message.code, message.message));
  } else if (message?.t === 'run') {
    void run(message);
  } else if (message?.t === 'abort') {
    if (current?.id === message.id) current.controller.abort();
  }
});

if (Bash) post({ t: 'ready' });
