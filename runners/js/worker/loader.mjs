import { closeSync, constants, fstatSync, openSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, extname, isAbsolute, relative, resolve, sep } from 'node:path';
import { ASYNC_COMPILE_CHARS } from './link.mjs';

/**
 * Loads a tool's module graph: its entry and every file it imports, all of them inside the tools folder.
 * Each file is read once, transpiled when it is TypeScript, parsed by V8 to learn its imports, and its
 * compiled code cached (V8 code cache data made here, never taken from anywhere else). A graph is
 * reused until one of its files changes on disk (checked with a stat per file per call).
 *
 * Messages name files relative to the project ("tools/lib/util.js"): they reach callers, host paths must not.
 */

const EXTENSIONS = new Set(['.js', '.mjs', '.ts', '.mts']);
const MAX_FILE_BYTES = 8 * 1024 * 1024;
const MAX_MODULES = 1000;
/** Heap for the isolate that transpiles a large TypeScript file (see #transpileElsewhere). */
const TRANSPILE_MEMORY_MB = 1024;
/**
 * transpileModule with the sandbox's options: [true, code], or [false, ":line:col: message"] for the
 * first error. Runs in this process for small files and, as its source text, inside the isolate that
 * transpiles large ones (#transpileElsewhere), so it uses nothing but its arguments.
 */
function transpileWith(ts, text, name) {
  const out = ts.transpileModule(text, {
    fileName: name,
    reportDiagnostics: true,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, isolatedModules: true, sourceMap: false },
  });
  const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (errors.length === 0) return [true, out.outputText];
  const first = errors[0];
  const where = first.file && first.start !== undefined ? first.file.getLineAndCharacterOfPosition(first.start) : null;
  return [false, `${where ? `:${where.line + 1}:${where.character + 1}` : ''}: ${ts.flattenDiagnosticMessageText(first.messageText, '\n')}`];
}

/**
 * Two generated modules start a call in a single isolate task. "arium:main" imports "arium:start" first
 * (so it is evaluated before any tool code), then the tool; its body runs once the tool's module has
 * finished evaluating, top-level await included, and hands the tool's exports to the prelude.
 */
/** How a code-mode program's module is named in its errors and stack frames. */
export const PROGRAM_NAME = 'program.ts';

export const GENERATED = Object.freeze({
  main: "import { start } from 'arium:start';\nimport * as tool from 'arium:entry';\nstart(tool);\n",
  start: 'const start = globalThis.__ariumStart;\ndelete globalThis.__ariumStart;\nexport { start };\n',
});

/**
 * A problem with the tool's code or its imports: the call fails with TOOL_ERROR and this message.
 * `intrusion` names an attempt to reach outside the tools folder (`import node:fs`): the engine
 * reports it as a SecurityEvent too.
 */
export class LoadError extends Error {
  constructor(message, intrusion = null) {
    super(message);
    this.intrusion = intrusion;
  }
}

function isInside(root, path) {
  const rel = relative(root, path);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
}

function stamp(path) {
  const st = statSync(path, { throwIfNoEntry: false });
  return st ? `${st.mtimeMs}:${st.size}:${st.ino}` : 'missing';
}

export class ModuleLoader {
  #compiler;
  #ivm;
  #graphs = new Map();
  /** Loads under way: entry -> { root, promise }. */
  #loading = new Map();
  #typescript = null;
  #typescriptPath;
  #generated = null;

  /**
   * `compiler`: an isolate used only to parse modules and make their code cache.
   * `typescriptPath`: where the host found the typescript package (the worker does not search for it).
   */
  constructor(ivm, compiler, typescriptPath) {
    this.#ivm = ivm;
    this.#compiler = compiler;
    this.#typescriptPath = typescriptPath;
  }

  /**
   * The graph of the tool whose entry is `entry` (real path) inside `root` (real path of the tools
   * folder). A large module is parsed on the compiler isolate's own thread (see ASYNC_COMPILE_CHARS),
   * so this process's thread goes on serving other calls meanwhile; calls that want a graph being
   * loaded wait for that one load.
   */
  async graph(entry, root) {
    const known = this.#graphs.get(entry);
    if (known && known.root === root && known.files.every((f) => stamp(f.path) === f.stamp)) return known;
    const pending = this.#loading.get(entry);
    if (pending && pending.root === root) return pending.promise;
    const promise = this.#load(entry, root).finally(() => {
      if (this.#loading.get(entry)?.promise === promise) this.#loading.delete(entry);
    });
    this.#loading.set(entry, { root, promise });
    const graph = await promise;
    const old = this.#graphs.get(entry);
    if (old && old !== graph) this.#release(old);
    this.#graphs.set(entry, graph);
    return graph;
  }

  /**
   * The graph of a code-mode program (code.run): the body of an async function of `tools`, in
   * TypeScript or JavaScript, made into one module that imports nothing. The function's head is a line
   * of its own, which the module's line offset takes back, so that stacks give the program's own lines
   * (TypeScript's output keeps a program's lines, except those of types it removes).
   */
  async program(code) {
    const name = PROGRAM_NAME;
    const wrapped = `export default async function program(tools) {\n${code}\n}\n`;
    const source = wrapped.length > ASYNC_COMPILE_CHARS ? await this.#transpileElsewhere(wrapped, name) : this.#transpile(wrapped, name);
    let compiled;
    try {
      compiled = this.#compiler.compileModuleSync(source, { filename: name, lineOffset: -1, produceCachedData: true });
    } catch (error) {
      throw new LoadError(`${error?.name ?? 'SyntaxError'} in the program: ${error?.message ?? String(error)}`);
    }
    const imports = compiled.dependencySpecifiers;
    const cachedData = compiled.cachedData ?? null;
    compiled.release();
    if (imports.length > 0) {
      throw new LoadError(
        `The program imports "${imports[0]}": a program imports nothing; it calls tools through \`tools\` (await tools.fs.read({ path }))`,
        `import ${imports[0]}`,
      );
    }
    const modules = new Map([[PROGRAM_NAME, { key: PROGRAM_NAME, name, source, cachedData, deps: new Map(), lineOffset: -1 }]]);
    return { root: '', entryKey: PROGRAM_NAME, modules, files: [], bytes: source.length };
  }

  forget(entry) {
    const known = this.#graphs.get(entry);
    if (known) this.#release(known);
    this.#graphs.delete(entry);
  }

  /** Source and code cache of the generated modules (see GENERATED). */
  generated() {
    if (!this.#generated) {
      const make = (name, source) => {
        const module = this.#compiler.compileModuleSync(source, { filename: name, produceCachedData: true });
        const code = { name, source, cachedData: module.cachedData };
        module.release();
        return code;
      };
      this.#generated = { main: make('arium:main', GENERATED.main), start: make('arium:start', GENERATED.start) };
    }
    return this.#generated;
  }

  #release(graph) {
    for (const mod of graph.modules.values()) mod.cachedData?.release();
  }

  async #load(entry, root) {
    const modules = new Map();
    const files = [];
    const queue = [entry];
    const keyOf = (path) => relative(root, path).split(sep).join('/');
    while (queue.length > 0) {
      const path = queue.shift();
      const key = keyOf(path);
      if (modules.has(key)) continue;
      if (modules.size >= MAX_MODULES) throw new LoadError(`the tool imports more than ${MAX_MODULES} modules`);
      const name = `tools/${key}`;
      files.push({ path, stamp: stamp(path) });
      const source = await this.#source(path, name);
      let compiled;
      try {
        const options = { filename: name, produceCachedData: true };
        compiled =
          source.length > ASYNC_COMPILE_CHARS
            ? await this.#compiler.compileModule(source, options)
            : this.#compiler.compileModuleSync(source, options);
      } catch (error) {
        throw new LoadError(`${error?.name ?? 'SyntaxError'} in ${name}: ${error?.message ?? String(error)}`);
      }
      const deps = new Map();
      for (const specifier of compiled.dependencySpecifiers) {
        const target = this.#resolve(specifier, path, root, name);
        deps.set(specifier, keyOf(target));
        queue.push(target);
      }
      modules.set(key, { key, name, source, cachedData: compiled.cachedData ?? null, deps });
      compiled.release();
    }
    let bytes = 0;
    for (const mod of modules.values()) bytes += mod.source.length;
    return { root, entryKey: keyOf(entry), modules, files, bytes };
  }

  async #source(path, name) {
    let text;
    let fd = -1;
    try {
      // Opened without blocking, and read only if it is a regular file: a FIFO put where the file was
      // would otherwise hold this process's one thread, and with it every call, until a writer came.
      fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
      const info = fstatSync(fd);
      if (!info.isFile()) throw new LoadError(`${name} is not a regular file`);
      if (info.size > MAX_FILE_BYTES) throw new LoadError(`${name} is ${info.size} bytes, over the limit of ${MAX_FILE_BYTES} for a module`);
      text = readFileSync(fd, 'utf8');
    } catch (error) {
      if (error instanceof LoadError) throw error;
      throw new LoadError(`${name} could not be read (${error?.code ?? 'error'})`);
    } finally {
      if (fd >= 0) closeSync(fd);
    }
    const ext = extname(path).toLowerCase();
    if (ext !== '.ts' && ext !== '.mts') return text;
    return text.length > ASYNC_COMPILE_CHARS ? this.#transpileElsewhere(text, name) : this.#transpile(text, name);
  }

  /** Relative specifiers only; the target must be a JS or TS file whose real path stays inside the tools folder. */
  #resolve(specifier, from, root, fromName) {
    if (!specifier.startsWith('./') && !specifier.startsWith('../')) {
      throw new LoadError(
        `${fromName} imports "${specifier}": tools can import only their own files, by a relative path such as "./lib.js"; Node built-ins and packages are not available in the sandbox`,
        `import ${specifier}`,
      );
    }
    if (specifier.includes('\u0000')) throw new LoadError(`${fromName} imports a path with a NUL byte`);
    const target = resolve(dirname(from), specifier);
    if (!isInside(root, target)) throw new LoadError(`${fromName} imports "${specifier}", which is outside the tools folder`, `import ${specifier}`);
    const ext = extname(target).toLowerCase();
    // TypeScript sources import each other by the name of the compiled file ("./util.js" for util.ts).
    const candidates = [target];
    if (ext === '.js') candidates.push(`${target.slice(0, -3)}.ts`);
    if (ext === '.mjs') candidates.push(`${target.slice(0, -4)}.mts`);
    for (const candidate of candidates) {
      let real;
      try {
        real = realpathSync(candidate);
      } catch {
        continue;
      }
      if (!isInside(root, real)) {
        throw new LoadError(`${fromName} imports "${specifier}", a link that leads outside the tools folder`, `import ${specifier}`);
      }
      if (!statSync(real).isFile()) continue;
      if (!EXTENSIONS.has(extname(real).toLowerCase())) {
        throw new LoadError(`${fromName} imports "${specifier}": only .js, .mjs, .ts and .mts files can be imported`);
      }
      return real;
    }
    throw new LoadError(`${fromName} imports "${specifier}", which was not found in the tools folder`);
  }

  /**
   * A large TypeScript file (over ASYNC_COMPILE_CHARS) is transpiled the same way but in an isolate of
   * its own, on that isolate's thread: transpiling 6.5 MB takes about 6 s, which on this process's
   * thread would hold every other call. The isolate loads the `typescript` package's single-file build
   * (about 0.2 s) and is disposed afterwards.
   */
  async #transpileElsewhere(text, name) {
    let file;
    try {
      file = createRequire(import.meta.url).resolve(this.#typescriptPath ?? 'typescript');
    } catch {
      throw new LoadError(`${name} is TypeScript, but the "typescript" package is not installed; run \`npm install typescript\``);
    }
    const isolate = new this.#ivm.Isolate({ memoryLimit: TRANSPILE_MEMORY_MB });
    try {
      const context = await isolate.createContext();
      // typescript.js is a CommonJS module: it gets a module object, and a require that has nothing.
      const wrapped = `(function () { const module = { exports: {} }; const exports = module.exports; const require = (id) => { throw new Error('no ' + id); };\n${readFileSync(file, 'utf8')}\n;globalThis.ts = module.exports; })();`;
      await (await isolate.compileScript(wrapped, { filename: 'typescript.js' })).run(context);
      const transpile = await context.eval(`(${transpileWith}).bind(null, globalThis.ts)`, { reference: true });
      const [ok, out] = await transpile.apply(undefined, [text, name], { arguments: { copy: true }, result: { copy: true } });
      if (!ok) throw new LoadError(`TypeScript error in ${name}${out}`);
      return out;
    } catch (error) {
      if (error instanceof LoadError) throw error;
      throw new LoadError(`${name} could not be transpiled: ${error?.message ?? error}`);
    } finally {
      isolate.dispose();
    }
  }

  /**
   * TypeScript is compiled with the `typescript` package's transpileModule: types are removed, syntax is
   * kept as ES2022 modules. It is loaded on the first .ts file only (it takes a few hundred ms to load).
   */
  #transpile(text, name) {
    if (!this.#typescript) {
      try {
        this.#typescript = createRequire(import.meta.url)(this.#typescriptPath ?? 'typescript');
      } catch {
        throw new LoadError(`${name} is TypeScript, but the "typescript" package is not installed; run \`npm install typescript\``);
      }
    }
    const [ok, out] = transpileWith(this.#typescript, text, name);
    if (!ok) throw new LoadError(`TypeScript error in ${name}${out}`);
    return out;
  }
}
