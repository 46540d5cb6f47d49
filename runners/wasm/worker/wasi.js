// Over 500 lines: WASI preview 1 is one interface of some forty functions over one table of open
// files; they are kept together so each is read beside the descriptors it checks.
// WASI preview 1 for one call, evaluated inside a wasm isolate (not in the sandbox process's own
// isolate). It has no Node APIs: the only ways out are the host function `host(op, args)`, which
// blocks this isolate's thread until the engine answers (isolated-vm's applySyncPromise), and the
// result it returns. Files are whole VFS files: read when opened, written back when closed (or when
// the module ends), so a call's writes land in its transaction and commit only if it succeeds.
/* global __arium_modules */

const E = {
  SUCCESS: 0,
  ACCES: 2,
  BADF: 8,
  EXIST: 20,
  FBIG: 22,
  INVAL: 28,
  IO: 29,
  ISDIR: 31,
  NOENT: 44,
  NOSPC: 51,
  NOSYS: 52,
  NOTDIR: 54,
  NOTEMPTY: 55,
  SPIPE: 70,
  NOTCAPABLE: 76,
};
const VFS_ERRNO = {
  NOT_FOUND: E.NOENT,
  DENIED: E.ACCES,
  ALREADY_EXISTS: E.EXIST,
  IS_A_DIRECTORY: E.ISDIR,
  NOT_A_DIRECTORY: E.NOTDIR,
  NOT_EMPTY: E.NOTEMPTY,
  INVALID_PATH: E.INVAL,
  QUOTA_EXCEEDED: E.NOSPC,
};
const FILETYPE = { CHAR: 2, DIR: 3, FILE: 4 };
const ALL_RIGHTS = 0x1fffffffn;
const WASI = 'wasi_snapshot_preview1';

class Exit {
  constructor(code) {
    this.code = code;
  }
}
/** Thrown out of the module when the call must end now (a limit, a refusal): carries the outcome. */
class Stop {
  constructor(outcome) {
    this.outcome = outcome;
  }
}
class Errno {
  constructor(code) {
    this.code = code;
  }
}

// A bare V8 context has no TextEncoder, TextDecoder or performance: UTF-8 for names and paths is done
// with the escape functions V8 keeps, and stdout and stderr leave as bytes for the worker to decode.
const encoder = {
  encode(text) {
    const binary = unescape(encodeURIComponent(text));
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  },
};
const decoder = {
  decode(bytes) {
    let binary = '';
    for (let i = 0; i < bytes.length; i += 8192) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
    try {
      return decodeURIComponent(escape(binary));
    } catch {
      // Not UTF-8: no such name exists in the VFS, whose paths are text.
      return null;
    }
  },
};
let lastNs = 0n;

const modules = new Map();
globalThis.__arium_modules = modules;

/** Compiles a module's bytes once per isolate; later calls only instantiate it. */
function compile(hash, bytes) {
  if (modules.has(hash)) return null;
  try {
    modules.set(hash, new WebAssembly.Module(bytes));
    return null;
  } catch (error) {
    return String(error?.message);
  }
}

function forget(hash) {
  modules.delete(hash);
}

function run(hash, cfg, host) {
  const module = modules.get(hash);
  if (!module) return { kind: 'missing' };
  let memory = null;
  const view = () => new DataView(memory.buffer);
  const u8 = () => new Uint8Array(memory.buffer);
  const stdout = [];
  let stdoutBytes = 0;
  const stderr = [];
  let stderrBytes = 0;
  let stderrDropped = 0;
  let hostMs = 0;
  let hostCalls = 0;

  const call = (op, args) => {
    const t = Date.now();
    hostCalls++;
    const answer = host.applySyncPromise(undefined, [op, args], { arguments: { copy: true } });
    hostMs += Date.now() - t;
    const parsed = answer;
    if (parsed.stop) throw new Stop(parsed.stop);
    if (!parsed.ok) throw new Errno(VFS_ERRNO[parsed.error?.code] ?? E.IO);
    return parsed.value;
  };

  const fds = new Map();
  fds.set(0, { kind: 'stdin', data: cfg.input, pos: 0 });
  fds.set(1, { kind: 'stdout' });
  fds.set(2, { kind: 'stderr' });
  let nextFd = 3;
  for (const dir of cfg.preopens) fds.set(nextFd++, { kind: 'dir', path: dir, root: dir, preopen: dir });

  const str = (ptr, len) => {
    const text = decoder.decode(u8().subarray(ptr, ptr + len));
    if (text === null) throw new Errno(E.INVAL);
    return text;
  };
  /** The VFS path of `path` below directory fd `dirfd`; ".." may not climb above the directory's preopen. */
  const resolve = (dirfd, ptr, len) => {
    const dir = fds.get(dirfd);
    if (!dir) throw new Errno(E.BADF);
    if (dir.kind !== 'dir') throw new Errno(E.NOTDIR);
    const text = str(ptr, len);
    if (text.startsWith('/') || text.includes('\0')) throw new Errno(E.NOTCAPABLE);
    const rootParts = dir.root.split('/').filter(Boolean);
    const parts = dir.path.split('/').filter(Boolean);
    for (const seg of text.split('/')) {
      if (seg === '' || seg === '.') continue;
      if (seg === '..') {
        if (parts.length <= rootParts.length) throw new Errno(E.NOTCAPABLE);
        parts.pop();
      } else parts.push(seg);
    }
    return { path: `/${parts.join('/')}`, root: dir.root };
  };

  const flush = (file) => {
    if (!file.dirty) return;
    if (file.appendOnly) {
      // Only what was added is held (the file was never read): it is appended to the VFS file.
      call('write', [file.path, file.data.subarray(0, file.size), { append: true }]);
      file.size = 0;
      file.pos = 0;
    } else call('write', [file.path, file.data.subarray(0, file.size)]);
    file.dirty = false;
  };
  const ensure = (file, size) => {
    if (size <= file.data.length) return;
    const next = new Uint8Array(Math.max(size, file.data.length * 2, 4096));
    next.set(file.data.subarray(0, file.size));
    file.data = next;
  };
  const stat = (path) => {
    const s = call('stat', [path]);
    return { type: s.type === 'dir' || s.type === 'directory' ? FILETYPE.DIR : FILETYPE.FILE, size: s.size, mtime: Date.parse(s.mtime) || 0 };
  };
  const writeFilestat = (ptr, type, size, mtimeMs) => {
    const v = view();
    for (let i = 0; i < 64; i += 8) v.setBigUint64(ptr + i, 0n, true);
    v.setUint8(ptr + 16, type);
    v.setBigUint64(ptr + 24, 1n, true);
    v.setBigUint64(ptr + 32, BigInt(size), true);
    const ns = BigInt(Math.max(0, Math.floor(mtimeMs))) * 1000000n;
    v.setBigUint64(ptr + 40, ns, true);
    v.setBigUint64(ptr + 48, ns, true);
    v.setBigUint64(ptr + 56, ns, true);
  };
  const iovs = (ptr, count) => {
    const v = view();
    const out = [];
    for (let i = 0; i < count; i++) out.push([v.getUint32(ptr + i * 8, true), v.getUint32(ptr + i * 8 + 4, true)]);
    return out;
  };
  const list = (name, value) => ({
    sizes(countPtr, sizePtr) {
      const v = view();
      v.setUint32(countPtr, value.length, true);
      v.setUint32(
        sizePtr,
        value.reduce((n, s) => n + encoder.encode(s).length + 1, 0),
        true,
      );
      return E.SUCCESS;
    },
    get(ptrs, buf) {
      const v = view();
      let at = buf;
      value.forEach((s, i) => {
        const bytes = encoder.encode(s);
        v.setUint32(ptrs + i * 4, at, true);
        u8().set(bytes, at);
        u8()[at + bytes.length] = 0;
        at += bytes.length + 1;
      });
      return E.SUCCESS;
    },
    name,
  });
  const args = list('args', cfg.args);
  const env = list('env', cfg.env);

  const writeOut = (fd, bytes) => {
    if (fd === 1) {
      stdoutBytes += bytes.length;
      if (stdoutBytes > cfg.outputBytes) {
        throw new Stop({ code: 'OUTPUT_LIMIT', message: `wrote more than ${cfg.outputBytes} bytes on stdout (output_bytes)` });
      }
      stdout.push(bytes.slice());
    } else {
      const room = cfg.logBytes - stderrBytes;
      if (room <= 0) stderrDropped += bytes.length;
      else {
        stderr.push(bytes.slice(0, room));
        stderrBytes += Math.min(room, bytes.length);
        if (bytes.length > room) stderrDropped += bytes.length - room;
      }
    }
  };

  const guard =
    (fn) =>
    (...a) => {
      try {
        return fn(...a);
      } catch (error) {
        if (error instanceof Errno) return error.code;
        throw error;
      }
    };

  const wasi = {
    args_sizes_get: (c, s) => args.sizes(c, s),
    args_get: (p, b) => args.get(p, b),
    environ_sizes_get: (c, s) => env.sizes(c, s),
    environ_get: (p, b) => env.get(p, b),
    clock_res_get: (_id, out) => {
      view().setBigUint64(out, 1000n, true);
      return E.SUCCESS;
    },
    clock_time_get: (id, _precision, out) => {
      let ns;
      if (id === 0) ns = BigInt(Date.now()) * 1000000n;
      else if (id <= 3) {
        // Monotonic from the wall clock: never backwards within the isolate.
        ns = BigInt(Date.now()) * 1000000n;
        if (ns <= lastNs) ns = lastNs + 1n;
        lastNs = ns;
      } else return E.INVAL;
      view().setBigUint64(out, ns, true);
      return E.SUCCESS;
    },
    random_get: guard((buf, len) => {
      const bytes = call('random', [len]);
      u8().set(bytes.subarray(0, len), buf);
      return E.SUCCESS;
    }),
    proc_exit: (code) => {
      throw new Exit(code >>> 0);
    },
    sched_yield: () => E.SUCCESS,
    fd_write: guard((fd, iovPtr, count, nwritten) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      let total = 0;
      for (const [ptr, len] of iovs(iovPtr, count)) {
        const bytes = u8().subarray(ptr, ptr + len);
        if (f.kind === 'stdout' || f.kind === 'stderr') writeOut(fd, bytes);
        else if (f.kind === 'file') {
          if (!f.writable) return E.BADF;
          const at = f.append ? f.size : f.pos;
          if (at + len > cfg.maxFileBytes) return E.FBIG;
          ensure(f, at + len);
          f.data.set(bytes, at);
          f.pos = at + len;
          f.size = Math.max(f.size, f.pos);
          f.dirty = true;
        } else return f.kind === 'dir' ? E.ISDIR : E.BADF;
        total += len;
      }
      view().setUint32(nwritten, total, true);
      return E.SUCCESS;
    }),
    fd_read: guard((fd, iovPtr, count, nread) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === 'dir') return E.ISDIR;
      if (f.kind !== 'stdin' && f.kind !== 'file') return E.BADF;
      if (f.kind === 'file' && !f.readable) return E.BADF;
      const size = f.kind === 'file' ? f.size : f.data.length;
      let total = 0;
      for (const [ptr, len] of iovs(iovPtr, count)) {
        const n = Math.max(0, Math.min(len, size - f.pos));
        u8().set(f.data.subarray(f.pos, f.pos + n), ptr);
        f.pos += n;
        total += n;
        if (n < len) break;
      }
      view().setUint32(nread, total, true);
      return E.SUCCESS;
    }),
    fd_seek: guard((fd, offset, whence, out) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind !== 'file') return f.kind === 'dir' ? E.ISDIR : E.SPIPE;
      const base = whence === 0 ? 0 : whence === 1 ? f.pos : whence === 2 ? f.size : -1;
      if (base < 0) return E.INVAL;
      const next = base + Number(offset);
      if (next < 0 || !Number.isSafeInteger(next)) return E.INVAL;
      f.pos = next;
      view().setBigUint64(out, BigInt(next), true);
      return E.SUCCESS;
    }),
    fd_tell: (fd, out) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind !== 'file') return E.SPIPE;
      view().setBigUint64(out, BigInt(f.pos), true);
      return E.SUCCESS;
    },
    fd_close: guard((fd) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === 'file') flush(f);
      fds.delete(fd);
      return E.SUCCESS;
    }),
    fd_sync: guard((fd) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === 'file') flush(f);
      return E.SUCCESS;
    }),
    fd_fdstat_get: (fd, out) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      const v = view();
      const type = f.kind === 'dir' ? FILETYPE.DIR : f.kind === 'file' ? FILETYPE.FILE : FILETYPE.CHAR;
      v.setUint8(out, type);
      v.setUint16(out + 2, f.append ? 1 : 0, true);
      v.setBigUint64(out + 8, ALL_RIGHTS, true);
      v.setBigUint64(out + 16, ALL_RIGHTS, true);
      return E.SUCCESS;
    },
    fd_fdstat_set_flags: () => E.SUCCESS,
    fd_filestat_get: guard((fd, out) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind === 'file') writeFilestat(out, FILETYPE.FILE, f.size, f.mtime);
      else if (f.kind === 'dir') writeFilestat(out, FILETYPE.DIR, 0, 0);
      else writeFilestat(out, FILETYPE.CHAR, 0, 0);
      return E.SUCCESS;
    }),
    fd_prestat_get: (fd, out) => {
      const f = fds.get(fd);
      if (!f?.preopen) return E.BADF;
      view().setUint8(out, 0);
      view().setUint32(out + 4, encoder.encode(f.preopen).length, true);
      return E.SUCCESS;
    },
    fd_prestat_dir_name: (fd, ptr, len) => {
      const f = fds.get(fd);
      if (!f?.preopen) return E.BADF;
      const bytes = encoder.encode(f.preopen);
      if (len < bytes.length) return E.INVAL;
      u8().set(bytes, ptr);
      return E.SUCCESS;
    },
    fd_readdir: guard((fd, buf, len, cookie, out) => {
      const f = fds.get(fd);
      if (!f) return E.BADF;
      if (f.kind !== 'dir') return E.NOTDIR;
      const listed = call('list', [f.path, { limit: 100000 }]).entries;
      const all = [
        { name: '.', type: FILETYPE.DIR },
        { name: '..', type: FILETYPE.DIR },
        ...listed.map((e) => ({ name: e.name, type: e.type === 'file' ? FILETYPE.FILE : FILETYPE.DIR })),
      ];
      const v = view();
      let used = 0;
      for (let i = Number(cookie); i < all.length && used < len; i++) {
        const name = encoder.encode(all[i].name);
        const entry = new Uint8Array(24 + name.length);
        const ev = new DataView(entry.buffer);
        ev.setBigUint64(0, BigInt(i + 1), true);
        ev.setBigUint64(8, BigInt(i + 1), true);
        ev.setUint32(16, name.length, true);
        ev.setUint8(20, all[i].type);
        entry.set(name, 24);
        const n = Math.min(entry.length, len - used);
        u8().set(entry.subarray(0, n), buf + used);
        used += n;
      }
      v.setUint32(out, used, true);
      return E.SUCCESS;
    }),
    path_open: guard((dirfd, _dirflags, ptr, len, oflags, rightsBase, _inheriting, fdflags, out) => {
      const { path, root } = resolve(dirfd, ptr, len);
      const creat = (oflags & 1) !== 0;
      const directory = (oflags & 2) !== 0;
      const excl = (oflags & 4) !== 0;
      const trunc = (oflags & 8) !== 0;
      // FD_READ is bit 1, FD_WRITE bit 6 of the rights; wasi-libc asks for exactly what open() was given.
      const wantsWrite = (BigInt(rightsBase) & 0x40n) !== 0n || creat || trunc;
      const wantsRead = (BigInt(rightsBase) & 0x2n) !== 0n;
      const append = (fdflags & 1) !== 0;
      const open = (fields) => {
        const fd = nextFd++;
        fds.set(fd, { kind: 'file', path, pos: 0, readable: wantsRead, writable: wantsWrite, append, dirty: false, mtime: Date.now(), ...fields });
        view().setUint32(out, fd, true);
        return E.SUCCESS;
      };
      // Opening to replace or to add to a file needs no read of it: a tool allowed only vfs.write can do both.
      if (!directory && !wantsRead && (trunc || (creat && excl))) {
        call('write', [path, new Uint8Array(0), { exclusive: creat && excl }]);
        return open({ data: new Uint8Array(0), size: 0 });
      }
      if (!directory && !wantsRead && append && creat) return open({ data: new Uint8Array(0), size: 0, appendOnly: true });
      let found = null;
      try {
        found = stat(path);
      } catch (error) {
        if (!(error instanceof Errno) || error.code !== E.NOENT) throw error;
      }
      if (found && excl && creat) return E.EXIST;
      if (!found && !creat) return E.NOENT;
      if (found && found.type === FILETYPE.DIR) {
        if (wantsWrite && !directory) return E.ISDIR;
        const fd = nextFd++;
        fds.set(fd, { kind: 'dir', path, root });
        view().setUint32(out, fd, true);
        return E.SUCCESS;
      }
      if (directory) return found ? E.NOTDIR : E.NOENT;
      const data = found && !trunc ? call('read', [path, { encoding: 'bytes' }]) : new Uint8Array(0);
      if (!found || trunc) call('write', [path, new Uint8Array(0)]);
      return open({ data, size: data.length, mtime: found ? found.mtime : Date.now() });
    }),
    path_filestat_get: guard((dirfd, _flags, ptr, len, out) => {
      const { path } = resolve(dirfd, ptr, len);
      const s = stat(path);
      writeFilestat(out, s.type, s.size, s.mtime);
      return E.SUCCESS;
    }),
    path_create_directory: guard((dirfd, ptr, len) => {
      call('mkdir', [resolve(dirfd, ptr, len).path]);
      return E.SUCCESS;
    }),
    path_unlink_file: guard((dirfd, ptr, len) => {
      const { path } = resolve(dirfd, ptr, len);
      if (stat(path).type === FILETYPE.DIR) return E.ISDIR;
      call('delete', [path]);
      return E.SUCCESS;
    }),
    path_remove_directory: guard((dirfd, ptr, len) => {
      const { path } = resolve(dirfd, ptr, len);
      if (stat(path).type !== FILETYPE.DIR) return E.NOTDIR;
      call('delete', [path]);
      return E.SUCCESS;
    }),
    path_rename: guard((fromFd, fromPtr, fromLen, toFd, toPtr, toLen) => {
      call('move', [resolve(fromFd, fromPtr, fromLen).path, resolve(toFd, toPtr, toLen).path, { overwrite: true }]);
      return E.SUCCESS;
    }),
  };

  const imports = {};
  for (const { module: name, name: field, kind } of WebAssembly.Module.imports(module)) {
    if (name !== WASI || kind !== 'function') continue;
    // Every other WASI preview 1 call (sockets, links, times of files, polling) is refused as unsupported.
    imports[field] = wasi[field] ?? (() => E.NOSYS);
  }
  let instance;
  try {
    instance = new WebAssembly.Instance(module, { [WASI]: imports });
  } catch (error) {
    return { kind: 'link', message: String(error?.message) };
  }
  memory = instance.exports.memory;
  if (!(memory instanceof WebAssembly.Memory)) return { kind: 'link', message: 'the module does not export its memory as "memory"' };
  if (typeof instance.exports._start !== 'function') {
    return { kind: 'link', message: 'the module has no "_start" function: build it as a WASI command (a program with main)' };
  }
  if (instance.exports.__arium_cap) instance.exports.__arium_cap.value = cfg.capPages;

  let exit = 0;
  let trap = null;
  let stop = null;
  try {
    instance.exports._start();
  } catch (error) {
    if (error instanceof Exit) exit = error.code;
    else if (error instanceof Stop) stop = error.outcome;
    else {
      // A trap of the module, or its stack overflowing; any other error is this layer's own failure.
      const ours = !(error instanceof WebAssembly.RuntimeError || error instanceof RangeError);
      trap = { name: String(error?.name), message: String(error?.message), stack: String(error?.stack), ours };
    }
  }
  if (!stop && !trap) {
    try {
      for (const f of fds.values()) if (f.kind === 'file') flush(f);
    } catch (error) {
      if (error instanceof Stop) stop = error.outcome;
      else if (error instanceof Errno)
        trap = { name: 'Error', message: `a file could not be written back when the module ended (errno ${error.code})` };
      else throw error;
    }
  }
  const joined = (chunks, total) => {
    const out = new Uint8Array(total);
    let at = 0;
    for (const c of chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  };
  return {
    kind: 'ran',
    exit,
    trap,
    stop,
    stdout: joined(
      stdout,
      stdout.reduce((n, c) => n + c.length, 0),
    ),
    stderr: joined(stderr, stderrBytes),
    stderrDropped,
    over: instance.exports.__arium_over ? instance.exports.__arium_over.value : 0,
    pages: memory.buffer.byteLength / 65536,
    hostMs,
    hostCalls,
  };
}

globalThis.__arium = { compile, forget, run };
