import { readFileSync } from 'node:fs';

/**
 * The script every fresh context runs before any tool code: wasm-guard.js and prelude.js, each a single
 * expression, wrapped in one strict-mode function. Its completion value is
 * `(send, done, memoryMb, logCap) => entry` (see prelude.js). Both files are read once per worker.
 */
export function setupSource() {
  const read = (name) =>
    readFileSync(new URL(name, import.meta.url), 'utf8')
      .trimEnd()
      .replace(/;$/, '');
  return [
    '(function () {',
    "'use strict';",
    `const guardWasm = ${read('./wasm-guard.js')};`,
    `const install = ${read('./prelude.js')};`,
    'return (send, done, memoryMb, logCap) => install(send, done, memoryMb, logCap, guardWasm);',
    '})();',
  ].join('\n');
}

/** The name isolate stacks show for the setup code; frames carrying it are cut from tool stacks. */
export const SETUP_FILENAME = 'arium:sandbox';
