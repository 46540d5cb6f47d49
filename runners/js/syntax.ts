import { readFileSync, statSync } from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { dirname, extname, relative, resolve } from 'node:path';
import type { parse as Parse } from 'acorn';
import type { CodeProblem } from '../../src/runner.js';

/** Files of one tool's import graph that a check reads at most. */
const MAX_FILES = 200;
/**
 * A larger file is not checked here (its call reports any error): parsing runs on the engine's thread,
 * and a megabyte of TypeScript takes seconds. The sandbox compiles such files off its main thread too.
 */
const MAX_CHECKED_BYTES = 256 * 1024;

/** What checking a file found, by path, with the size and time it had then: a scan re-reads only files that changed. */
const checked = new Map<string, { stamp: string; found: Found }>();

type Found = { problem: CodeProblem } | { imports: string[] };

/** acorn, required by the first JavaScript file checked: a project without one (or a CLI command that loads no tools) does not load it. */
let acornParse: typeof Parse | null = null;
const parse: typeof Parse = (text, options) => {
  acornParse ??= (createRequire(import.meta.url)('acorn') as { parse: typeof Parse }).parse;
  return acornParse(text, options);
};

/**
 * A JavaScript module's syntax error, or its relative imports: acorn parses it as V8 would (the latest
 * ECMAScript, as a module), in the engine, in a few milliseconds, so no sandbox is started to check it.
 */
function checkJs(text: string, shown: string): Found {
  let program: ReturnType<typeof Parse>;
  try {
    program = parse(text, { ecmaVersion: 'latest', sourceType: 'module', locations: true });
  } catch (error) {
    const loc = (error as { loc?: { line: number; column: number } }).loc;
    // acorn's message ends with "(line:column)", which the problem carries on its own.
    const message = String((error as Error).message).replace(/ \(\d+:\d+\)$/, '');
    return { problem: { file: shown, line: loc?.line ?? 1, column: (loc?.column ?? 0) + 1, message } };
  }
  const imports: string[] = [];
  for (const node of program.body) {
    if ((node.type === 'ImportDeclaration' || node.type === 'ExportAllDeclaration' || node.type === 'ExportNamedDeclaration') && node.source) {
      imports.push(String(node.source.value));
    }
  }
  return { imports };
}

/** TypeScript's parser is loaded (about 400 ms) only for a project that has TypeScript tools. */
let typescript: typeof import('typescript') | null = null;

async function checkTs(text: string, file: string, shown: string): Promise<Found> {
  typescript ??= (await import('typescript')).default;
  const ts = typescript;
  const result = ts.transpileModule(text, {
    fileName: file,
    reportDiagnostics: true,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const first = result.diagnostics?.find((d) => d.file !== undefined && d.start !== undefined);
  if (first?.file && first.start !== undefined) {
    const at = first.file.getLineAndCharacterOfPosition(first.start);
    return {
      problem: { file: shown, line: at.line + 1, column: at.character + 1, message: ts.flattenDiagnosticMessageText(first.messageText, ' ') },
    };
  }
  return { imports: ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName) };
}

/**
 * The first syntax error in a JS tool's module or the files it imports relatively, resolved as the
 * sandbox's loader does (`./x.js` also finds `x.ts`): JavaScript parsed by acorn, TypeScript by
 * TypeScript's parser (which misses a few errors V8 reports in TypeScript files; the call still does).
 */
export async function jsSyntaxProblem(entry: string, toolsDir: string): Promise<CodeProblem | null> {
  return (await scanTool(entry, toolsDir)).problem;
}

/** A bare specifier naming a package, not a Node built-in (`node:fs`, `fs`, `fs/promises`). */
export function isPackageSpecifier(specifier: string): boolean {
  if (specifier.startsWith('./') || specifier.startsWith('../') || specifier.startsWith('/') || specifier.includes(':')) return false;
  return !isBuiltin(specifier);
}

/** The packages a tool's files import (bare specifiers, built-ins left out), with its first syntax error. */
export async function scanTool(entry: string, toolsDir: string): Promise<{ problem: CodeProblem | null; packages: string[]; files: string[] }> {
  const packages = new Set<string>();
  const queue = [entry];
  const seen = new Set<string>();
  while (queue.length > 0 && seen.size < MAX_FILES) {
    const file = queue.shift() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    let stamp: string;
    try {
      const st = statSync(file);
      if (!st.isFile() || st.size > MAX_CHECKED_BYTES) continue;
      stamp = `${st.size}:${st.mtimeMs}:${st.ino}`;
    } catch {
      continue; // a missing import is the loader's to report, with its own message
    }
    const shown = relative(toolsDir, file);
    let found = checked.get(file)?.stamp === stamp ? (checked.get(file)?.found as Found) : null;
    if (!found) {
      const text = readFileSync(file, 'utf8');
      // The loader takes extensions in any case (.TS is TypeScript).
      const ext = extname(file).toLowerCase();
      try {
        found = ext === '.ts' || ext === '.mts' ? await checkTs(text, file, shown) : checkJs(text, shown);
      } catch (error) {
        // Both parsers recurse: a file nested deeper than the stack allows is no module V8 would take either.
        found = { problem: { file: shown, line: 1, column: 1, message: `could not be parsed (${(error as Error).message})` } };
      }
      if (checked.size >= 5000) checked.clear();
      checked.set(file, { stamp, found });
    }
    if ('problem' in found) return { problem: found.problem, packages: [...packages], files: [...seen] };
    for (const specifier of found.imports) {
      if (isPackageSpecifier(specifier)) packages.add(specifier);
      if (!specifier.startsWith('./') && !specifier.startsWith('../')) continue;
      const target = resolve(dirname(file), specifier);
      if (relative(toolsDir, target).startsWith('..')) continue;
      const candidates = [target];
      if (extname(target) === '.js') candidates.push(`${target.slice(0, -3)}.ts`);
      if (extname(target) === '.mjs') candidates.push(`${target.slice(0, -4)}.mts`);
      const match = candidates.find((c) => {
        try {
          return statSync(c).isFile();
        } catch {
          return false;
        }
      });
      if (match) queue.push(match);
    }
  }
  return { problem: null, packages: [...packages], files: [...seen] };
}
