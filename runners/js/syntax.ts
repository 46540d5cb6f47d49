import { readFileSync, statSync } from 'node:fs';
import { dirname, extname, relative, resolve } from 'node:path';
import ts from 'typescript';
import type { CodeProblem } from '../../src/runner.js';

/** Files of one tool's import graph that a check reads at most. */
const MAX_FILES = 200;

/**
 * The first syntax error in a JS tool's module or the files it imports relatively (resolved as the
 * sandbox's loader does: `./x.js` also finds `x.ts`), found with TypeScript's parser, in process: no
 * sandbox is started to parse. TypeScript's parser misses a few errors V8 reports (`await` outside an
 * async function, `let let`): those are still found when the tool is called.
 */
export function jsSyntaxProblem(entry: string, toolsDir: string): CodeProblem | null {
  const queue = [entry];
  const seen = new Set<string>();
  while (queue.length > 0 && seen.size < MAX_FILES) {
    const file = queue.shift() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue; // a missing import is the loader's to report, with its own message
    }
    const shown = relative(toolsDir, file);
    let result: ts.TranspileOutput;
    try {
      result = ts.transpileModule(text, {
        fileName: file,
        reportDiagnostics: true,
        compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
      });
    } catch (error) {
      // The parser is recursive: a file nested deeper than its stack allows is no module V8 would take either.
      return { file: shown, line: 1, column: 1, message: `could not be parsed (${(error as Error).message})` };
    }
    const first = result.diagnostics?.find((d) => d.file !== undefined && d.start !== undefined);
    if (first?.file && first.start !== undefined) {
      const at = first.file.getLineAndCharacterOfPosition(first.start);
      return { file: shown, line: at.line + 1, column: at.character + 1, message: ts.flattenDiagnosticMessageText(first.messageText, ' ') };
    }
    for (const imported of ts.preProcessFile(text, true, true).importedFiles) {
      const specifier = imported.fileName;
      if (!specifier.startsWith('./') && !specifier.startsWith('../')) continue;
      const target = resolve(dirname(file), specifier);
      if (relative(toolsDir, target).startsWith('..')) continue;
      const candidates = [target];
      if (extname(target) === '.js') candidates.push(`${target.slice(0, -3)}.ts`);
      if (extname(target) === '.mjs') candidates.push(`${target.slice(0, -4)}.mts`);
      const found = candidates.find((c) => {
        try {
          return statSync(c).isFile();
        } catch {
          return false;
        }
      });
      if (found) queue.push(found);
    }
  }
  return null;
}
