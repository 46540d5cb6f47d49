import { visit } from 'jsonc-parser';

export interface DuplicateKey {
  key: string;
  /** JSON pointer of the object holding the key twice. */
  pointer: string;
  /** 1-based line and column of the second occurrence. */
  line: number;
  column: number;
  /** 1-based line and column of the first occurrence. */
  first: { line: number; column: number };
}

const escapeSegment = (segment: string | number) => String(segment).replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * The first key that appears twice in one object of a JSON text, or null. `JSON.parse` keeps the last
 * of two equal keys, so a reader of the file and the engine would see different values: files people
 * review (tool definitions, arium.json) must not have any. Keys compare after unescaping (`"a"` and
 * `"\u0061"` are the same key). The text must already be valid JSON.
 */
export function findDuplicateKey(text: string): DuplicateKey | null {
  const open: Map<string, { line: number; column: number }>[] = [];
  let found: DuplicateKey | null = null;
  visit(
    text,
    {
      onObjectBegin: () => {
        open.push(new Map());
      },
      onObjectEnd: () => {
        open.pop();
      },
      onObjectProperty: (key, _offset, _length, line, character, pathSupplier) => {
        const keys = open[open.length - 1];
        if (!keys || found) return;
        const first = keys.get(key);
        if (first) {
          const path = pathSupplier();
          found = { key, pointer: path.map((s) => `/${escapeSegment(s)}`).join(''), line: line + 1, column: character + 1, first };
        } else keys.set(key, { line: line + 1, column: character + 1 });
      },
    },
    { disallowComments: true, allowTrailingComma: false },
  );
  return found;
}

/** "key \"x\" appears twice in /schema (first at 3:5)": the message every loader gives. */
export function describeDuplicate(duplicate: DuplicateKey): string {
  const where = duplicate.pointer === '' ? 'the top-level object' : `the object at ${duplicate.pointer}`;
  return `the key ${JSON.stringify(duplicate.key)} appears twice in ${where} (first at ${duplicate.first.line}:${duplicate.first.column}); JSON keeps only the last, so remove one`;
}
