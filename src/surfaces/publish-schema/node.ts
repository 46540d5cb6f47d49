/** The JSON-Schema nodes the passes rewrite, and what they share: notes of the changes, hints in descriptions. */

export type Node = Record<string, unknown>;
export const isNode = (value: unknown): value is Node => value !== null && typeof value === 'object' && !Array.isArray(value);
export const own = (node: Node, key: string): unknown => (Object.hasOwn(node, key) ? node[key] : undefined);
/** Sets an own property whatever its name: `__proto__` from a definition is a property like any other. */
export function put(node: Node, key: string, value: unknown): void {
  Object.defineProperty(node, key, { value, enumerable: true, writable: true, configurable: true });
}
export const pointerKey = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');
/** A deep copy; JSON.parse makes `__proto__` an own property, never a prototype. */
export const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;
export const brief = (value: unknown) => {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
};

export class Unpublishable extends Error {
  constructor(
    readonly pointer: string,
    readonly keyword: string,
    message: string,
  ) {
    super(message);
  }
}

/** Collects the changes made, and the hints added to descriptions. */
export class Notes {
  readonly lines = new Set<string>();
  add(line: string): void {
    this.lines.add(line);
  }
}

export function hint(node: Node, text: string): void {
  const description = own(node, 'description');
  put(node, 'description', typeof description === 'string' && description !== '' ? `${description} (${text})` : text);
}
