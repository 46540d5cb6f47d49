import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findInterpreter, harnessDir } from '../runners/python/interpreter.js';

// The Python harness's own functions, run in the real interpreter (the one the engine would use).

const interpreter = await findInterpreter(undefined, process.cwd());

/** Runs `body` (Python, after the harness is importable) and returns what it printed as JSON. */
function python(body: string): unknown {
  const script = ['import json, os, sys', `sys.path.insert(0, ${JSON.stringify(harnessDir())})`, 'import arium_server, arium_fork', body].join('\n');
  // -B, as the fork server runs: no bytecode written into the harness's folder.
  return JSON.parse(execFileSync(interpreter.executable, ['-I', '-S', '-B', '-c', script], { encoding: 'utf8', timeout: 20_000 }));
}

/** Python: forks with the zygote's bare fork; the child runs `child` and sends what it returns back. */
const FORK_HELPER = `
def in_child(child, reseed=True):
    r, w = os.pipe()
    pid = arium_fork.bare_fork(reseed)
    if pid == 0:
        try:
            out = child()
        except BaseException as error:
            out = {"error": repr(error)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)
`;

describe('the harness', () => {
  it('a call process closes the descriptors it must not keep: exactly the range asked, wide ranges in one system call', () => {
    const out = python(`
import arium_confine
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
fds = [fd for _ in range(40) for fd in os.pipe()]
low, high = fds[0], fds[-1] + 1
arium_confine.close_from(low + 2, low + 5)          # narrow: os.closerange
after_narrow = [fd for fd in range(low, high) if not is_open(fd)]
arium_confine.close_from(low + 10, low + 200)       # wide: close_range(2)
after_wide = [fd for fd in range(low, high) if not is_open(fd)]
arium_confine.close_from(low + 1, 1 << 20)          # up to the server's limit
left = [fd for fd in range(low, high) if is_open(fd)]
print(json.dumps({"low": low, "narrow": after_narrow, "wide": after_wide, "left": left}))
`) as { low: number; narrow: number[]; wide: number[]; left: number[] };
    const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => out.low + from + i);
    expect(out.narrow).toEqual(range(2, 5));
    expect(out.wide).toEqual([...range(2, 5), ...range(10, 80)]);
    expect(out.left).toEqual([out.low]);
  });
});

// A compile process sends the zygote a tool's code (arium_child.compile_main); the zygote keeps it for
// the call processes it forks, which then run it without compiling the tool again (warm_up, load).
describe('the code of a tool compiled ahead', () => {
  it('reaches the zygote whole, and a call process forked after it runs that code without compiling', () => {
    const out = python(`
import marshal, selectors, signal, socket, tempfile, time
import arium_child, arium_zygote
tools = tempfile.mkdtemp()
with open(os.path.join(tools, "doubled.py"), "w") as f:
    f.write("def run(input, ctx):\\n    return input * 2\\n")
config = {"namespaces": True, "tools_dir": tools, "tools_prefix": "/tools/", "compile_wait_s": 15}
class Server:
    pass
server = Server()
server.config = config
zygote = arium_zygote.Zygote(server, None, os.getpid())
zygote.selector = selectors.DefaultSelector()
def fork(uid, workdir, entries, compile_only=False):
    # The compile process unconfined (confining needs privileges): what it sends is the same.
    parent, child = socket.socketpair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        arium_child.compile_main(config, child.fileno(), entries[0])
    child.close()
    os.close(out_w)
    os.close(err_w)
    return pid, [parent.detach(), out_r, err_r]
zygote.fork = fork
zygote.refresh_code(["doubled.py"], None)
started = len(zygote.compiling)
deadline = time.monotonic() + 15
while zygote.compiling and time.monotonic() < deadline:
    for key, _ in zygote.selector.select(zygote.compile_timeout()):
        zygote.on_compile(key.fd)
for pid in zygote.compile_pids:
    os.waitpid(pid, 0)
key, marshalled = zygote.code["doubled.py"]
# In a call process: warm_up takes the zygote's code; load finds it and compiles nothing.
arium_child.warm_up(["doubled.py"], config, dict(zygote.code))
handed = "doubled.py" in arium_child._compiled
compiled = []
sys.addaudithook(lambda event, args: compiled.append(args[1]) if event == "compile" else None)
module = {}
exec(arium_child.load("doubled.py", config), module)
print(json.dumps({"started": started, "kept": marshalled is not None, "handed": handed, "compiled": compiled, "run": module["run"](21, None)}))
`) as { started: number; kept: boolean; handed: boolean; compiled: string[]; run: number };
    expect(out).toEqual({ started: 1, kept: true, handed: true, compiled: [], run: 42 });
  });

  // An unusable answer would otherwise show nowhere but in each call's CPU (every call of the tool
  // compiles it itself): the zygote tells the server, which the runner's status() counts.
  it.each([
    [
      'the code under "blob", as compile processes once sent it',
      '{"t": "code", "key": key, "blob": code}',
      /its frame was refused: a frame announcing a blob/,
    ],
    ['a frame of another shape', '{"t": "code", "key": key, "code": code}', /a frame of another shape \(keys code, key, t\)/],
    ['code that is not base64', '{"t": "code", "key": key, "marshalled": "not base64!"}', /its code is not base64/],
  ])('a compile answer the zygote cannot use (%s) is reported to the server, and the tool left to its calls', (_, frame, why) => {
    const out = python(`
import base64, marshal, selectors, socket, tempfile, time
import arium_child, arium_proto, arium_zygote
tools = tempfile.mkdtemp()
with open(os.path.join(tools, "doubled.py"), "w") as f:
    f.write("def run(input, ctx):\\n    return input * 2\\n")
with open(os.path.join(tools, "broken.py"), "w") as f:
    f.write("def run(input, ctx)\\n")
config = {"namespaces": True, "tools_dir": tools, "tools_prefix": "/tools/", "compile_wait_s": 15}
class Server:
    pass
server = Server()
server.config = config
to_server, from_zygote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
zygote = arium_zygote.Zygote(server, to_server, os.getpid())
zygote.selector = selectors.DefaultSelector()
def fork(uid, workdir, entries, compile_only=False):
    parent, child = socket.socketpair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if entries[0] == "broken.py":
            arium_child.compile_main(config, child.fileno(), entries[0])  # a tool that does not compile
        stat = os.stat(os.path.join(tools, entries[0]))
        key = [stat.st_mtime_ns, stat.st_size, stat.st_ino]
        code = base64.b64encode(marshal.dumps(compile("x = 1", "x", "exec"))).decode()
        arium_proto.send(child.fileno(), ${frame})
        os._exit(0)
    child.close()
    os.close(out_w)
    os.close(err_w)
    return pid, [parent.detach(), out_r, err_r]
zygote.fork = fork
zygote.refresh_code(["doubled.py", "broken.py"], None)
deadline = time.monotonic() + 15
while zygote.compiling and time.monotonic() < deadline:
    for key, _ in zygote.selector.select(zygote.compile_timeout()):
        zygote.on_compile(key.fd)
for pid in zygote.compile_pids:
    os.waitpid(pid, 0)
from_zygote.setblocking(False)
told = []
while True:
    try:
        told.append(json.loads(from_zygote.recv(65536)))
    except BlockingIOError:
        break
print(json.dumps({"told": told, "kept": {entry: code[1] is not None for entry, code in zygote.code.items()}}))
`) as { told: { t: string; entry: string; message: string }[]; kept: Record<string, boolean> };
    // Only the unusable answer: a tool that does not compile is its calls' to report.
    expect(out.told).toEqual([{ t: 'compile-refused', entry: 'doubled.py', message: expect.stringMatching(why) }]);
    expect(out.kept).toEqual({ 'doubled.py': false, 'broken.py': false });
  });
});

// The zygote forks call processes with fork(2) itself, without CPython's fork hooks, when it has one
// thread (arium_fork.bare_fork_problem): when that is allowed, and that a child forked so draws
// random numbers of its own and can still use threads and fork.
describe('the zygote forks without CPython fork hooks only where nothing needs them', () => {
  it('allows it with one thread, refuses it with two and says why', () => {
    const out = python(`
import threading
alone = arium_fork.bare_fork_problem()
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
crowded = arium_fork.bare_fork_problem()
stop.set()
thread.join()
first, last = arium_fork.BARE_FORK_PYTHONS
print(json.dumps([alone, crowded, first <= sys.version_info[:2] <= last]))
`) as [string | null, string | null, boolean];
    const [alone, crowded, supported] = out;
    if (supported) expect(alone).toBeNull();
    else expect(alone).toMatch(/not CPython/);
    expect(crowded).toBe(supported ? '2 threads' : alone);
  });

  it('a child forked so draws random numbers of its own (without the reseed it repeats the parent)', () => {
    const out = python(`${FORK_HELPER}
import random
draw = lambda: [random.getrandbits(64) for _ in range(4)]
a = in_child(draw)
b = in_child(draw)
unseeded = in_child(draw, reseed=False)
print(json.dumps({"a": a, "b": b, "unseeded": unseeded, "parent": draw()}))
`) as Record<string, number[]>;
    expect(out.a).not.toEqual(out.b);
    expect(out.a).not.toEqual(out.parent);
    expect(out.b).not.toEqual(out.parent);
    // The control: a child that skips the reseed draws exactly what the parent draws next.
    expect(out.unseeded).toEqual(out.parent);
  });

  it('a child forked so can start and join threads, fork, and reap its own child', () => {
    const out = python(`${FORK_HELPER}
import threading
def child():
    seen = []
    threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    return {"seen": sorted(seen), "grandchild_exit": os.WEXITSTATUS(status), "main": threading.current_thread() is threading.main_thread()}
print(json.dumps(in_child(child)))
`);
    expect(out).toEqual({ seen: [0, 1, 2], grandchild_exit: 7, main: true });
  });
});
