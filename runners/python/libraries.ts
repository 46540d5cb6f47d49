import { execFile } from 'node:child_process';
import type { Interpreter } from './interpreter.js';

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

export function sharedLibraries(interpreter: Interpreter): Promise<string[] | null> {
  let promise = found.get(interpreter.executable);
  if (!promise) {
    promise = new Promise((resolve) => {
      execFile(
        interpreter.executable,
        ['-I', '-S', '-c', SCRIPT, JSON.stringify(interpreter.needs)],
        { timeout: LIBRARIES_TIMEOUT_MS, env: {}, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout) => {
          if (error) return resolve(null);
          try {
            const paths = JSON.parse(stdout) as unknown;
            resolve(Array.isArray(paths) && paths.length > 0 ? paths.map(String) : null);
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
