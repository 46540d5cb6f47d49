/**
 * Scrubbing: every form of a secret's value the engine could hand out — as is, base64 (standard and
 * URL-safe), URL-encoded, JSON-escaped — becomes `[secret:NAME]` in whatever leaves the engine: results,
 * errors, logs, events (and so the audit log and every surface). A tool that transforms a value before
 * printing it (reversed, hashed, one character per line) is not caught: see THREAT_MODEL.md.
 */

/** Values shorter than this would scrub ordinary text ("test", "1234"): they are refused. */
export const MIN_SECRET_LENGTH = 8;

export class Scrubber {
  readonly #pattern: RegExp | null;
  readonly #names = new Map<string, string>();
  /** The forms, longest first. */
  readonly #forms: string[];

  constructor(secrets: ReadonlyMap<string, string>) {
    const forms: string[] = [];
    for (const [name, value] of secrets) {
      if (value.length < MIN_SECRET_LENGTH) continue;
      for (const form of encodings(value)) {
        if (!this.#names.has(form)) {
          this.#names.set(form, name);
          forms.push(form);
        }
      }
    }
    // Longest first, so a form that contains another is replaced whole.
    forms.sort((a, b) => b.length - a.length);
    this.#forms = forms;
    this.#pattern = forms.length === 0 ? null : new RegExp(forms.map(escapeRegExp).join('|'), 'g');
  }

  /** False when there is nothing to scrub: callers skip the walk. */
  get active(): boolean {
    return this.#pattern !== null;
  }

  text(value: string): string {
    if (this.#pattern === null || value.length < MIN_SECRET_LENGTH) return value;
    this.#pattern.lastIndex = 0;
    return value.replace(this.#pattern, (form) => `[secret:${this.#names.get(form)}]`);
  }

  /**
   * The beginning of a longer text, cut off at its end: a secret the cut went through has only its
   * first characters here, which no whole form matches, so besides the whole forms anything the text
   * ends with that begins a form is taken off. (Scrubbing after the cut, the whole forms alone left
   * those characters in.)
   */
  head(value: string): string {
    if (this.#pattern === null) return value;
    const scrubbed = this.text(value);
    const longest = (this.#forms[0] as string).length;
    for (let at = Math.max(0, scrubbed.length - longest + 1); at < scrubbed.length; at++) {
      const tail = scrubbed.slice(at);
      if (this.#forms.some((form) => form.length > tail.length && form.startsWith(tail))) return scrubbed.slice(0, at);
    }
    return scrubbed;
  }

  /** A copy of a JSON-like value with every string (keys too) scrubbed; the value itself when nothing matched. */
  value<T>(value: T): T {
    if (this.#pattern === null) return value;
    return this.#walk(value, 0) as T;
  }

  #walk(value: unknown, depth: number): unknown {
    if (typeof value === 'string') return this.text(value);
    if (value === null || typeof value !== 'object' || depth > 200) return value;
    if (Buffer.isBuffer(value) || value instanceof Uint8Array) return value;
    if (Array.isArray(value)) {
      let changed = false;
      const out = value.map((item) => {
        const next = this.#walk(item, depth + 1);
        if (next !== item) changed = true;
        return next;
      });
      return changed ? out : value;
    }
    let changed = false;
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      const k = this.text(key);
      const next = this.#walk(item, depth + 1);
      if (next !== item || k !== key) changed = true;
      // A tool's output may hold an own "__proto__" key (JSON.parse makes one): assigned, it would set the
      // copy's prototype instead, and readers of the result would see the tool's fields as inherited ones.
      if (k === '__proto__') Object.defineProperty(out, k, { value: next, enumerable: true, writable: true, configurable: true });
      else out[k] = next;
    }
    return changed ? out : value;
  }

  /**
   * Log lines, where a value may be printed in pieces across consecutive lines: matches are looked for
   * in the lines joined without separators too, and every line a match touches has its part replaced.
   */
  lines<T extends { message: string }>(lines: readonly T[]): T[] {
    if (this.#pattern === null || lines.length === 0) return [...lines];
    const joined = lines.map((l) => l.message).join('');
    const starts: number[] = [];
    let at = 0;
    for (const l of lines) {
      starts.push(at);
      at += l.message.length;
    }
    const cuts: Array<{ from: number; to: number; name: string }> = [];
    this.#pattern.lastIndex = 0;
    for (let m = this.#pattern.exec(joined); m !== null; m = this.#pattern.exec(joined)) {
      cuts.push({ from: m.index, to: m.index + m[0].length, name: this.#names.get(m[0]) as string });
    }
    if (cuts.length === 0) return [...lines];
    return lines.map((line, i) => {
      const begin = starts[i] as number;
      const end = begin + line.message.length;
      let message = '';
      let pos = begin;
      for (const cut of cuts) {
        if (cut.to <= begin || cut.from >= end) continue;
        const from = Math.max(cut.from, begin);
        message += joined.slice(pos, from);
        // The marker goes where the value starts; the lines it continues on lose their part of it.
        if (cut.from >= begin) message += `[secret:${cut.name}]`;
        pos = Math.min(cut.to, end);
      }
      message += joined.slice(pos, end);
      return message === line.message ? line : { ...line, message };
    });
  }
}

function encodings(value: string): string[] {
  const bytes = Buffer.from(value, 'utf8');
  const forms = new Set<string>([
    value,
    bytes.toString('base64'),
    bytes.toString('base64url'),
    encodeURIComponent(value),
    JSON.stringify(value).slice(1, -1),
  ]);
  // base64 of the value inside a longer text is shifted by its offset: the three alignments, less the
  // edge characters that depend on the neighbours, are what can appear.
  forms.add(bytes.toString('base64').slice(0, -4));
  for (let shift = 1; shift <= 2; shift++) {
    const shifted = Buffer.concat([Buffer.alloc(shift), bytes]).toString('base64');
    const inner = shifted.slice(4, -4);
    if (inner.length >= MIN_SECRET_LENGTH) forms.add(inner);
  }
  return [...forms].filter((form) => form.length >= MIN_SECRET_LENGTH);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
