import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Interpreter } from './interpreter.js';

// node:child_process, not execa: one short probe of the interpreter's libraries, as the runner starts. Importing execa takes 0.1-0.4 s on the
// 2-core development machine, which every engine start would pay (ARCHITECTURE.md, "What a start costs").

/**
 * The shared libraries an interpreter loads: those of its executable and of every extension module in
 * the folders it imports from (`ssl` needs libssl and libcrypto, `sqlite3` libsqlite3, `ctypes` libffi,
 * …), with the dynamic loader, by the paths the loader opens them at (`/lib/x86_64-linux-gnu/libz.so.1`,
 * a link, not only the file it names). Found by the interpreter itself: it loads each extension's
 * library lazily (its module is never initialized) and lists what the loader mapped (dl_iterate_phdr),
 * which also follows each library's own search path. About a second for a few hundred extensions, so
 * asked once per interpreter and only for a sandbox with namespaces. Null when it cannot tell: the
 * sandbox then shows the system's library folders whole.
 */

const LIBRARIES_TIMEOUT_MS = 60_000;
/** Files looked through for extension modules, and how many are loaded at most (a large virtualenv has thousands). */
const MAX_FILES = 200_000;
const MAX_EXTENSIONS = 5_000;

const SCRIPT = `
import ctypes, json, os, sys, _ctypes
folders, extensions, seen = json.loads(sys.argv[1]), [], 0
for top in folders:
    for folder, _, files in os.walk(top):
        seen += len(files)
        extensions += [os.path.join(folder, f) for f in files if f.endswith(".so") or ".so." in f]
        if seen > ${MAX_FILES}:
            break
for path in list(dict.fromkeys(extensions))[:${MAX_EXTENSIONS}] + ["libgcc_s.so.1"]:
    try:
        _ctypes.dlopen(path, os.RTLD_LAZY | os.RTLD_LOCAL)
    except OSError:
        pass  # built for another interpreter, or missing a library: a tool cannot load it either
class Info(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]
names = []
@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)
def each(info, size, data):
    names.append(info.contents.name)
    return 0
ctypes.CDLL(None).dl_iterate_phdr(each, None)
print(json.dumps(sorted({os.fsdecode(n) for n in names if n and n.startswith(b"/")})))
`;

const found = new Map<string, Promise<string[] | null>>();

/**
 * The answer is also kept on disk, in the user's cache folder (`$XDG_CACHE_HOME/arium` or
 * `~/.cache/arium`): finding it took 0.6 s here, the largest part of a fresh process's first Python
 * answer. It is keyed by the interpreter (its path and the identity of its file) and by the folders it
 * imports from and their direct subfolders (path and modification time): installing, removing or
 * upgrading a package renames files in one of them, which changes the key. The cache is the engine's
 * own: a file or folder another user could have written is not read (it lists what each sandbox shows).
 */
function cacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'arium');
}

function cacheKey(interpreter: Interpreter): string | null {
  try {
    const hash = createHash('sha256');
    const exe = statSync(interpreter.executable);
    hash.update(`${interpreter.executable}\0${exe.dev}:${exe.ino}:${exe.size}:${exe.mtimeMs}\0`);
    for (const folder of interpreter.needs) {
      const st = statSync(folder, { throwIfNoEntry: false });
      hash.update(`${folder}\0${st?.mtimeMs ?? 'missing'}\0`);
      if (!st?.isDirectory()) continue;
      for (const entry of readdirSync(folder, { withFileTypes: true })) {
        if (entry.isDirectory()) hash.update(`${entry.name}\0${statSync(join(folder, entry.name), { throwIfNoEntry: false })?.mtimeMs ?? ''}\0`);
      }
    }
    return hash.digest('hex');
  } catch {
    return null;
  }
}

/** Only what this user alone could have written. */
function ownedOnly(path: string): boolean {
  const st = statSync(path, { throwIfNoEntry: false });
  return st !== undefined && st.uid === process.getuid?.() && (st.mode & 0o022) === 0;
}

function readCached(key: string): string[] | null {
  const dir = cacheDir();
  const file = join(dir, `python-libraries-${key}.json`);
  try {
    if (!ownedOnly(dir) || !ownedOnly(file)) return null;
    const paths = JSON.parse(readFileSync(file, 'utf8')) as unknown;
    return Array.isArray(paths) && paths.length > 0 && paths.every((p) => typeof p === 'string' && p.startsWith('/')) ? (paths as string[]) : null;
  } catch {
    return null;
  }
}

function writeCached(key: string, paths: string[]): void {
  const dir = cacheDir();
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (!ownedOnly(dir)) return;
    const file = join(dir, `python-libraries-${key}.json`);
    const temporary = `${file}.${process.pid}.tmp`;
    writeFileSync(temporary, JSON.stringify(paths), { mode: 0o600 });
    renameSync(temporary, file);
  } catch {
    // No cache: the next process asks the interpreter again.
  }
}

export function sharedLibraries(interpreter: Interpreter): Promise<string[] | null> {
  let promise = found.get(interpreter.executable);
  if (!promise) {
    const key = cacheKey(interpreter);
    const cached = key === null ? null : readCached(key);
    if (cached) {
      promise = Promise.resolve(cached);
      found.set(interpreter.executable, promise);
      return promise;
    }
    promise = new Promise((resolve) => {
      execFile(
        interpreter.executable,
        ['-I', '-S', '-c', SCRIPT, JSON.stringify(interpreter.needs)],
        { timeout: LIBRARIES_TIMEOUT_MS, env: {}, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout) => {
          if (error) return resolve(null);
          try {
            const paths = JSON.parse(stdout) as unknown;
            const list = Array.isArray(paths) && paths.length > 0 ? paths.map(String) : null;
            if (list && key !== null) writeCached(key, list);
            resolve(list);
          } catch {
            resolve(null);
          }
        },
      );
    });
    found.set(interpreter.executable, promise);
  }
  return promise;
}

/** For tests: forget what this process found, as a fresh process would. */
export function forgetSharedLibraries(): void {
  found.clear();
}
