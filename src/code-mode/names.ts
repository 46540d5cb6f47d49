/**
 * How a tool id is named in a code-mode program: `tools.<segment>.<segment>…`, one property per
 * dot-separated part of the id. Tool ids are lower case (`[a-z0-9][a-z0-9_-]*` parts, the registry's
 * TOOL_ID_PATTERN), so a JavaScript identifier can carry everything an id part holds and still be read
 * back without ambiguity:
 * - `-` before a letter becomes that letter in upper case (`word-freq` → `wordFreq`);
 * - any other `-` becomes `$` (`a-1` → `a$1`, `a--b` → `a$B`, `v2-` → `v2$`);
 * - a part that starts with a digit gets a leading `_` (`2fa` → `_2fa`; no id part starts with `_`).
 * The mapping is one to one both ways: `toolId(jsPath(id)) === id` for every valid id, and a path that
 * no id maps to is refused with why.
 */

const ID_PART = /^[a-z0-9][a-z0-9_-]*$/;
const JS_PART = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** One id part as a JavaScript identifier. */
export function jsName(part: string): string {
  if (!ID_PART.test(part)) throw new Error(`"${part}" is not a tool id part: lower-case letters, digits, "_" and "-", not starting with "_" or "-"`);
  let name = part.replace(/-([a-z])|-/g, (_, letter: string | undefined) => (letter ? letter.toUpperCase() : '$'));
  if (/^[0-9]/.test(name)) name = `_${name}`;
  return name;
}

/** The id part a JavaScript identifier names, or an error saying why no id part maps to it. */
export function idPart(name: string): string {
  if (!JS_PART.test(name)) throw new Error(`"${name}" is not a JavaScript identifier`);
  let body = name;
  if (body.startsWith('_')) {
    if (!/^_[0-9]/.test(body)) throw new Error(`"${name}": only a part starting with a digit is written with a leading "_"`);
    body = body.slice(1);
  }
  const part = body.replace(/\$|[A-Z]/g, (char) => (char === '$' ? '-' : `-${char.toLowerCase()}`));
  if (!ID_PART.test(part) || jsName(part) !== name) throw new Error(`"${name}" names no tool: ${part} is not a tool id part`);
  return part;
}

/** The property path of a tool in a program: `demo.word-freq` → `["demo", "wordFreq"]`. */
export function jsPath(id: string): string[] {
  return id.split('.').map(jsName);
}

/** The tool id a property path names (`["demo", "wordFreq"]` → `demo.word-freq`). */
export function toolId(path: readonly string[]): string {
  if (path.length === 0) throw new Error('an empty path names no tool');
  return path.map(idPart).join('.');
}
