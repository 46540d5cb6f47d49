/**
 * Caps the linear memory of a WebAssembly module at a size set per call, by rewriting the module once.
 *
 * V8 does not count linear memory against an isolate's heap limit (a module grew to 1 GB in an isolate
 * limited to 32 MB), and `memory.grow` past a declared maximum only returns -1, which C's malloc turns
 * into NULL and a loop that writes through NULL never ends. So every `memory.grow` is replaced by a call
 * to a function added at the end of the module: it compares the growth with the exported global
 * `__arium_cap` (pages, set by the host before the module starts) and, past it, records the request in
 * `__arium_over` and traps. The host reads that global to tell a memory limit from any other trap.
 *
 * Functions and globals are added after the existing ones, so no index in the module changes; only the
 * code section is re-encoded. Instructions are decoded by their immediates (MVP, sign extension,
 * bulk memory, reference types, SIMD, threads, exceptions, tail calls); an opcode outside those is
 * refused with its offset rather than guessed at.
 */

export const CAP_GLOBAL = '__arium_cap';
export const OVER_GLOBAL = '__arium_over';
export const PAGE = 65536;

export class ModuleFormatError extends Error {
  name = 'ModuleFormatError';
}

const VALTYPES = new Set([0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f]);

class Reader {
  constructor(bytes, at = 0, end = bytes.length) {
    this.bytes = bytes;
    this.at = at;
    this.end = end;
  }
  byte() {
    if (this.at >= this.end) throw new ModuleFormatError(`unexpected end of the module at byte ${this.at}`);
    return this.bytes[this.at++];
  }
  u32() {
    let result = 0;
    let shift = 0;
    for (;;) {
      const b = this.byte();
      if (shift < 32) result += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if ((b & 0x80) === 0) return result;
      if (shift > 70) throw new ModuleFormatError(`malformed LEB128 number at byte ${this.at}`);
    }
  }
  /** Any LEB128 number, signed or not, whose value is not needed. */
  skipLeb() {
    for (let n = 0; n < 11; n++) if ((this.byte() & 0x80) === 0) return;
    throw new ModuleFormatError(`malformed LEB128 number at byte ${this.at}`);
  }
  skip(n) {
    if (this.at + n > this.end) throw new ModuleFormatError(`unexpected end of the module at byte ${this.at}`);
    this.at += n;
  }
  limits() {
    const flags = this.byte();
    if (flags > 0x07) throw new ModuleFormatError(`unknown limits flags 0x${flags.toString(16)} at byte ${this.at - 1}`);
    const min = this.u32();
    const max = flags & 0x01 ? this.u32() : null;
    return { flags, min, max };
  }
}

function leb(value) {
  const out = [];
  do {
    let b = value & 0x7f;
    value = Math.floor(value / 128);
    if (value !== 0) b |= 0x80;
    out.push(b);
  } while (value !== 0);
  return out;
}

function vecSection(id, count, body) {
  const content = [...leb(count), ...body];
  return Uint8Array.from([id, ...leb(content.length), ...content]);
}

/** A section whose content is a vector: its count and its entries' bytes (copied, not decoded). */
function entries(bytes, section) {
  const r = new Reader(bytes, section.start, section.end);
  const count = r.u32();
  return { count, body: bytes.subarray(r.at, section.end) };
}

/**
 * Reads the module's sections and what the cap needs: its memory, its imports, its function and global
 * counts. Throws ModuleFormatError for what it cannot read (V8 then reports a precise compile error).
 */
export function describe(bytes) {
  if (bytes.length < 8 || bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) {
    throw new ModuleFormatError('the file is not a WebAssembly module (it does not start with "\\0asm")');
  }
  if (bytes[4] !== 1 || bytes[5] !== 0 || bytes[6] !== 0 || bytes[7] !== 0) {
    throw new ModuleFormatError('the file is not a WebAssembly core module of version 1 (a component is not a module)');
  }
  const sections = [];
  const r = new Reader(bytes, 8);
  while (r.at < bytes.length) {
    const headerStart = r.at;
    const id = r.byte();
    const size = r.u32();
    const start = r.at;
    r.skip(size);
    sections.push({ id, start, end: r.at, headerStart });
  }
  const find = (id) => sections.find((s) => s.id === id);
  const info = { sections, importedFunctions: 0, importedGlobals: 0, memories: [], importedMemory: null, imports: [] };
  const imports = find(2);
  if (imports) {
    const ir = new Reader(bytes, imports.start, imports.end);
    const decoder = new TextDecoder();
    const name = () => {
      const n = ir.u32();
      const start = ir.at;
      ir.skip(n);
      return decoder.decode(bytes.subarray(start, ir.at));
    };
    for (let n = ir.u32(); n > 0; n--) {
      const module = name();
      const field = name();
      const kind = ir.byte();
      info.imports.push({ module, name: field, kind: ['function', 'table', 'memory', 'global', 'tag'][kind] ?? 'unknown' });
      if (kind === 0) {
        ir.u32();
        info.importedFunctions++;
      } else if (kind === 1) {
        ir.byte();
        ir.limits();
      } else if (kind === 2) {
        info.importedMemory = { module, name: field, ...ir.limits() };
      } else if (kind === 3) {
        ir.byte();
        ir.byte();
        info.importedGlobals++;
      } else if (kind === 4) {
        ir.byte();
        ir.u32();
      } else throw new ModuleFormatError(`unknown import kind ${kind}`);
    }
  }
  const memory = find(5);
  if (memory) {
    const mr = new Reader(bytes, memory.start, memory.end);
    for (let n = mr.u32(); n > 0; n--) info.memories.push(mr.limits());
  }
  info.definedFunctions = find(3) ? entries(bytes, find(3)).count : 0;
  info.definedGlobals = find(6) ? entries(bytes, find(6)).count : 0;
  info.types = find(1) ? entries(bytes, find(1)).count : 0;
  return info;
}

/** Skips one block type: empty, a value type, or a type index (s33). */
function blockType(r) {
  const b = r.bytes[r.at];
  if (b === 0x40 || VALTYPES.has(b)) r.skip(1);
  else r.skipLeb();
}

function memarg(r) {
  const align = r.u32();
  if (align & 0x40) r.u32();
  r.skipLeb();
}

const SIMD_LANE = new Set([21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34]);

/** Skips the immediates of the instruction whose opcode was just read (at `r.at - 1`). */
function immediates(r, op) {
  if (op <= 0x01 || op === 0x05 || op === 0x0b || op === 0x0f || op === 0x19 || op === 0x1a || op === 0x1b) return;
  if (op >= 0x45 && op <= 0xc4) return;
  switch (op) {
    case 0x02:
    case 0x03:
    case 0x04:
    case 0x06:
      return blockType(r);
    case 0x07:
    case 0x08:
    case 0x09:
    case 0x0c:
    case 0x0d:
    case 0x10:
    case 0x12:
    case 0x18:
    case 0x20:
    case 0x21:
    case 0x22:
    case 0x23:
    case 0x24:
    case 0x25:
    case 0x26:
    case 0x3f:
    case 0x40:
    case 0xd2:
      r.u32();
      return;
    case 0x0e:
      for (let n = r.u32(); n >= 0; n--) r.u32();
      return;
    case 0x11:
    case 0x13:
      r.u32();
      r.u32();
      return;
    case 0x1c:
      r.skip(r.u32());
      return;
    case 0x41:
    case 0x42:
    case 0xd0:
      r.skipLeb();
      return;
    case 0x43:
      r.skip(4);
      return;
    case 0x44:
      r.skip(8);
      return;
    case 0xd1:
      return;
    case 0xfc: {
      const sub = r.u32();
      if (sub <= 7) return;
      if (sub === 8 || sub === 10 || sub === 12 || sub === 14) {
        r.u32();
        r.u32();
        return;
      }
      if (sub <= 17) {
        r.u32();
        return;
      }
      break;
    }
    case 0xfd: {
      const sub = r.u32();
      if (sub <= 11 || sub === 92 || sub === 93) return memarg(r);
      if (sub === 12 || sub === 13) return r.skip(16);
      if (SIMD_LANE.has(sub)) return r.skip(1);
      if (sub >= 84 && sub <= 91) {
        memarg(r);
        r.skip(1);
        return;
      }
      return;
    }
    case 0xfe: {
      const sub = r.u32();
      if (sub === 0x03) return r.skip(1);
      return memarg(r);
    }
    default:
      if (op >= 0x28 && op <= 0x3e) return memarg(r);
  }
  throw new ModuleFormatError(`instruction 0x${op.toString(16)} at byte ${r.at - 1} is not one this runner can check`);
}

/**
 * The module with its memory growth capped (see above), plus what the host checks before it runs:
 * the initial size of its memory in pages, and its imports.
 */
export function instrument(bytes) {
  const info = describe(bytes);
  if (info.importedMemory) {
    throw new ModuleFormatError(
      `the module imports its memory (${info.importedMemory.module}.${info.importedMemory.name}); build it to define its own (the default of wasm-ld without --import-memory)`,
    );
  }
  if (info.memories.length > 1) throw new ModuleFormatError(`the module defines ${info.memories.length} memories; one is supported`);
  const mem = info.memories[0];
  if (mem && mem.flags & 0x04) throw new ModuleFormatError('the module uses a 64-bit memory, which this runner does not run');
  const initialPages = mem ? mem.min : 0;
  const funcIndex = info.importedFunctions + info.definedFunctions;
  const capIndex = info.importedGlobals + info.definedGlobals;
  const overIndex = capIndex + 1;
  const typeIndex = info.types;
  const find = (id) => info.sections.find((s) => s.id === id);

  // The helper: (param $delta i32) (result i32).
  const helper = [
    0x00, // no locals
    0x20,
    0x00, // local.get $delta
    0x23,
    ...leb(capIndex), // global.get $cap
    0x3f,
    0x00, // memory.size
    0x6b, // i32.sub: pages left
    0x4b, // i32.gt_u
    0x04,
    0x40, // if
    0x20,
    0x00,
    0x24,
    ...leb(overIndex), // global.set $over $delta
    0x00, // unreachable
    0x0b,
    0x20,
    0x00,
    0x40,
    0x00, // memory.grow $delta
    0x0b,
  ];

  let grows = 0;
  const code = find(10);
  let codeSection = null;
  if (code && mem) {
    const cr = new Reader(bytes, code.start, code.end);
    const count = cr.u32();
    const parts = [];
    const call = Uint8Array.from([0x10, ...leb(funcIndex)]);
    for (let f = 0; f < count; f++) {
      const size = cr.u32();
      const end = cr.at + size;
      const r = new Reader(bytes, cr.at, end);
      for (let groups = r.u32(); groups > 0; groups--) {
        r.u32();
        r.skipLeb();
      }
      const pieces = [];
      let copied = cr.at;
      while (r.at < end) {
        const at = r.at;
        const op = r.byte();
        immediates(r, op);
        if (op === 0x40) {
          pieces.push(bytes.subarray(copied, at), call);
          copied = r.at;
          grows++;
        }
      }
      pieces.push(bytes.subarray(copied, end));
      const length = pieces.reduce((n, p) => n + p.length, 0);
      parts.push(Uint8Array.from(leb(length)), ...pieces);
      cr.at = end;
    }
    parts.push(Uint8Array.from([...leb(helper.length), ...helper]));
    const content = concat([Uint8Array.from(leb(count + 1)), ...parts]);
    codeSection = concat([Uint8Array.from([10, ...leb(content.length)]), content]);
  }
  if (!mem) return { bytes, initialPages, imports: info.imports, grows: 0, capped: false };

  const append = (id, extraCount, extra) => {
    const s = find(id);
    const old = s ? entries(bytes, s) : { count: 0, body: new Uint8Array() };
    return vecSection(id, old.count + extraCount, [...old.body, ...extra]);
  };
  const enc = new TextEncoder();
  const exportName = (name) => [...leb(enc.encode(name).length), ...enc.encode(name)];
  const replaced = new Map([
    [1, append(1, 1, [0x60, 1, 0x7f, 1, 0x7f])],
    [3, append(3, 1, leb(typeIndex))],
    [6, append(6, 2, [0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41, 0x00, 0x0b])],
    [7, append(7, 2, [...exportName(CAP_GLOBAL), 0x03, ...leb(capIndex), ...exportName(OVER_GLOBAL), 0x03, ...leb(overIndex)])],
    [10, codeSection ?? vecSection(10, 1, [...leb(helper.length), ...helper])],
  ]);
  // Sections in their required order; a section the module lacks goes where the order puts it.
  const ORDER = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];
  const rank = (id) => ORDER.indexOf(id);
  const out = [bytes.subarray(0, 8)];
  const pending = new Map(replaced);
  for (const s of info.sections) {
    if (s.id !== 0) {
      for (const [id, section] of pending) {
        if (id !== s.id && rank(id) < rank(s.id)) {
          out.push(section);
          pending.delete(id);
        }
      }
    }
    if (pending.has(s.id)) {
      out.push(pending.get(s.id));
      pending.delete(s.id);
    } else if (!replaced.has(s.id)) out.push(bytes.subarray(s.headerStart, s.end));
  }
  for (const section of pending.values()) out.push(section);
  return { bytes: concat(out), initialPages, imports: info.imports, grows, capped: true };
}

function concat(parts) {
  const total = parts.reduce((n, p) => n + p.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
