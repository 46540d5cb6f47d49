/**
 * YAML read as the JSON it stands for: what a `tools/*.yaml` definition and a skill's front matter are.
 * Everything YAML has beyond JSON's data is refused rather than guessed at: tags (`!!js/function`,
 * `!custom`; YAML's own core tags `!!str`, `!!int`… are allowed), merge keys (`<<`, a YAML 1.1
 * extension whose result a reader of the file cannot see), keys that are not strings, numbers JSON has
 * no form for (`.inf`, `.nan`), several documents in one file, keys given twice. Booleans are those of
 * YAML 1.2's core schema (`true`/`false`): `yes`, `no`, `on`, `off` stay strings. Aliases are allowed,
 * bounded in how much they expand (billion laughs), and one that contains itself is refused.
 *
 * Depth is bounded twice. The `yaml` package builds documents recursively, and a 400 kB line of `[`
 * overflows its stack (measured: 200,000 levels; with the package's default pretty errors the process
 * even died of a fatal OOM while the message quoted the line); so the text is first walked with its
 * lexer, which is iterative and cheap, and refused past the bound before any document is built. That count is an
 * estimate (a block sequence at its parent key's indentation counts no level), so the value is then
 * measured exactly, after aliases are expanded, together with its size as JSON.
 */

import { CST, type Document, isAlias, isMap, isScalar, isSeq, Lexer, LineCounter, type Node, parseDocument } from 'yaml';
import { lineColumn } from './text-position.js';

/** What a YAML text may expand to. */
export interface YamlBounds {
  /** Bytes of the value written as JSON, after aliases are expanded. */
  max_bytes: number;
  /** Nesting of arrays and objects. */
  max_depth: number;
}

/**
 * Alias expansions the `yaml` package allows in one document (its `maxAliasCount`, counted with the
 * size of what each alias stands for): enough to reuse a schema fragment, far below an exponential
 * blow-up. Past it the file is refused.
 */
export const MAX_YAML_ALIAS_COUNT = 100;

export class YamlDataError extends Error {
  constructor(
    message: string,
    /** `line:column`, 1-based. */
    readonly at?: string,
  ) {
    super(message);
  }
}

export interface YamlData {
  value: unknown;
  /** `line:column` of the node a JSON pointer names (of its nearest existing parent), if any. */
  locate(pointer: string): string | undefined;
}

const CORE_TAGS: ReadonlySet<string> = new Set(['str', 'int', 'float', 'bool', 'null', 'seq', 'map'].map((name) => `tag:yaml.org,2002:${name}`));

/**
 * Parses `text` (one YAML document) as JSON data within `bounds`; throws `YamlDataError` with a
 * position. `firstLine` is the line of the file the text starts on (front matter starts on line 2).
 */
export function parseYamlData(text: string, bounds: YamlBounds, firstLine = 1): YamlData {
  const lines = new LineCounter();
  const shifted = (at: string) => {
    const [line, column] = at.split(':');
    return `${Number(line) + firstLine - 1}:${column}`;
  };
  const position = (offset: number) => {
    const { line, col } = lines.linePos(offset);
    return shifted(`${line}:${col}`);
  };
  const deep = estimatedDepthPast(text, bounds.max_depth);
  if (deep !== null) {
    throw new YamlDataError(
      `nested deeper than ${bounds.max_depth} levels of arrays and objects, the most a definition may have`,
      shifted(lineColumn(text, deep)),
    );
  }
  const doc = parseDocument(text, {
    version: '1.2',
    schema: 'core',
    merge: false,
    uniqueKeys: false,
    strict: true,
    prettyErrors: false,
    lineCounter: lines,
  });
  const [error] = doc.errors;
  if (error) throw new YamlDataError(`malformed YAML: ${yamlMessage(error.message)}`, position(error.pos[0]));
  const [warning] = doc.warnings;
  if (warning) {
    const message =
      warning.code === 'TAG_RESOLVE_FAILED'
        ? `${yamlMessage(warning.message)}: tags are not read here (the file is plain data, as its JSON form); remove it`
        : yamlMessage(warning.message);
    throw new YamlDataError(message, position(warning.pos[0]));
  }
  if (doc.contents === null) throw new YamlDataError('the file is empty (a half-written file?); expected a YAML mapping');
  checkNodes(doc, doc.contents as Node, '', [], position);
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: MAX_YAML_ALIAS_COUNT });
  } catch (error) {
    if (/alias count/i.test((error as Error).message)) {
      throw new YamlDataError(
        `its aliases expand past the bound of ${MAX_YAML_ALIAS_COUNT} (a file that reuses a part this often is refused, like a billion-laughs attack)`,
      );
    }
    throw new YamlDataError(`could not be read as data: ${(error as Error).message}`);
  }
  measure(value, bounds);
  return {
    value,
    locate: (pointer) => {
      const path = pointer
        .split('/')
        .slice(1)
        .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
      for (let n = path.length; n >= 0; n--) {
        const node = doc.getIn(path.slice(0, n).map(segmentKey), true) as Node | undefined;
        if (node && (isScalar(node) || isMap(node) || isSeq(node) || isAlias(node)) && node.range) return position(node.range[0]);
      }
      return undefined;
    },
  };
}

/** A pointer segment as `getIn` takes it: a sequence index as a number. */
const segmentKey = (segment: string): string | number => (/^(0|[1-9]\d*)$/.test(segment) ? Number(segment) : segment);

/** The first line of a `yaml` message, without its own " at line 3, column 4" (the problem says where). */
function yamlMessage(message: string): string {
  return (message.split('\n')[0] ?? message).replace(/ at line \d+, column \d+:?$/, '');
}

const escapeSegment = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');

/** Walks the document's nodes (aliases not followed) for what JSON has no form for. */
function checkNodes(doc: Document, node: Node, pointer: string, open: Node[], position: (offset: number) => string): void {
  const at = () => position(node.range?.[0] ?? 0);
  if (isAlias(node)) {
    const target = node.resolve(doc);
    if (!target) throw new YamlDataError(`the alias *${node.source} names no anchor set before it`, at());
    if (open.includes(target)) {
      throw new YamlDataError(`the alias *${node.source} refers to a collection that contains it: a recursive structure JSON cannot express`, at());
    }
    return;
  }
  if (node.tag !== undefined && !CORE_TAGS.has(node.tag)) {
    throw new YamlDataError(`the tag ${node.tag} is not read here (the file is plain data, as its JSON form); remove it`, at());
  }
  if (isScalar(node)) {
    if (typeof node.value === 'number' && !Number.isFinite(node.value)) {
      throw new YamlDataError(`${String(node.source ?? node.value)} is not a number JSON can hold`, at());
    }
    return;
  }
  open.push(node);
  if (isMap(node)) {
    const seen = new Map<string, string>();
    for (const pair of node.items) {
      const key = pair.key as Node | null;
      const keyAt = position(key?.range?.[0] ?? node.range?.[0] ?? 0);
      if (!isScalar(key) || typeof key.value !== 'string') {
        throw new YamlDataError(
          `a key must be a string, as in JSON (${isScalar(key) ? `${String(key.value)} is a ${key.value === null ? 'null' : typeof key.value}: quote it` : 'not a collection or an alias'})`,
          keyAt,
        );
      }
      if (key.value === '<<' && key.type === 'PLAIN') {
        throw new YamlDataError('merge keys (<<) are not read here: write the keys out, or quote "<<" for a key of that name', keyAt);
      }
      const first = seen.get(key.value);
      if (first !== undefined) {
        const where = pointer === '' ? 'the top-level mapping' : `the mapping at ${pointer}`;
        throw new YamlDataError(`the key ${JSON.stringify(key.value)} appears twice in ${where} (first at ${first}); remove one`, keyAt);
      }
      seen.set(key.value, keyAt);
      if (pair.value) checkNodes(doc, pair.value as Node, `${pointer}/${escapeSegment(key.value)}`, open, position);
    }
  } else if (isSeq(node)) {
    node.items.forEach((item, i) => {
      checkNodes(doc, item as Node, `${pointer}/${i}`, open, position);
    });
  }
  open.pop();
}

/** The value's depth and its size as JSON (roughly: every byte but insignificant ones), after aliases. */
function measure(value: unknown, bounds: YamlBounds): void {
  let bytes = 0;
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (stack.length > 0) {
    const { value: v, depth } = stack.pop() as { value: unknown; depth: number };
    if (typeof v === 'string') bytes += v.length + 2;
    else if (v === null || typeof v !== 'object') bytes += String(v).length;
    else {
      if (depth + 1 > bounds.max_depth) {
        throw new YamlDataError(
          `nested deeper than ${bounds.max_depth} levels of arrays and objects once its aliases are expanded, the most a definition may have`,
        );
      }
      const entries = Array.isArray(v) ? v : Object.entries(v as object).flat();
      bytes += 2 + entries.length;
      for (const item of entries) stack.push({ value: item, depth: depth + 1 });
    }
    if (bytes > bounds.max_bytes) {
      throw new YamlDataError(`its aliases expand it past ${bounds.max_bytes} bytes as JSON, the limit for a definition`);
    }
  }
}

/**
 * The offset where the text's nesting, as its lexer sees it, first passes `max`; null if it never does.
 * Flow collections (`[`, `{`) count exactly; block nesting counts one level per deeper indentation and
 * one per `-` or `?` on a line (a sequence at its key's indentation is missed, so it is an estimate).
 */
export function estimatedDepthPast(text: string, max: number): number | null {
  const indents: number[] = [];
  let flow = 0;
  let offset = 0;
  let lineStart = true;
  let indent = 0;
  let markers = 0;
  for (const token of new Lexer().lex(text)) {
    const type = CST.tokenType(token);
    const control = token.length === 1 && token.charCodeAt(0) < 0x20 && token !== '\n' && token !== '\t';
    if (type === 'newline') {
      lineStart = true;
      indent = 0;
      markers = 0;
    } else if (type === 'space') {
      // A block scalar's content comes as one token that starts with spaces: it is text, not nesting.
      if (lineStart && !token.includes('\n')) indent = token.length;
    } else if (!control && type !== 'comment' && type !== 'byte-order-mark' && type !== 'doc-mode') {
      if (lineStart && flow === 0) {
        while (indents.length > 0 && (indents[indents.length - 1] as number) >= indent) indents.pop();
        indents.push(indent);
      }
      lineStart = false;
      if (type === 'flow-seq-start' || type === 'flow-map-start') flow++;
      else if (type === 'flow-seq-end' || type === 'flow-map-end') flow = Math.max(0, flow - 1);
      else if (flow === 0 && (type === 'seq-item-ind' || type === 'explicit-key-ind')) markers++;
      if (indents.length + markers + flow > max) return offset;
    }
    if (!control) offset += token.length;
  }
  return null;
}
