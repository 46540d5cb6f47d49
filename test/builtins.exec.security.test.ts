import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXEC_UID_BASE, EXEC_UID_SLOTS } from '../runners/builtin/exec/service.js';
import type { Engine } from '../src/index.js';
import { execProject, execUnavailable, realPython } from './support/exec.js';

// system.exec against real attacks: each test runs a hostile program in the real sandbox and checks
// what actually happened — on the host, in the VFS and in the result.

const why = await execUnavailable();
const python = realPython();
if (why) console.log(`builtins.exec.security: skipped, ${why}`);
if (!python) console.log('builtins.exec.security: skipped, no python3 here');

type Data = Record<string, unknown> & {
  exit_code: number | null;
  stdout: string;
  stderr: string;
  changes: Array<Record<string, unknown>>;
  skipped: Array<{ path: string; reason: string }>;
};

/** Pids of processes running as one of system.exec's uids. */
function execProcesses(): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, 'utf8'))?.[1]);
      if (uid >= EXEC_UID_BASE && uid < EXEC_UID_BASE + EXEC_UID_SLOTS) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Waits (bounded) until no process of system.exec's uids is left; returns those still there. */
async function leftover(): Promise<number[]> {
  for (let i = 0; i < 50; i++) {
    const left = execProcesses();
    if (left.length === 0) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
  return execProcesses();
}

describe.runIf(why === null && python !== null)('system.exec security', () => {
  const py = python as string;
  let engine: Engine;
  let close: () => Promise<void>;
  let server: Server;
  let port = 0;
  let connections = 0;

  beforeAll(async () => {
    ({ engine, close } = await execProject({ allow: [py], limits: { file_bytes: 1024 * 1024 } }));
    server = createServer((socket) => {
      connections++;
      socket.end('hello from the host\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as { port: number }).port;
  });
  afterAll(async () => {
    server.close();
    await close();
  });

  const run = async (script: string, input: Record<string, unknown> = {}) => {
    const result = await engine.call<Data>('system.exec', { argv: [py, '-c', script], ...input });
    if (!result.ok) throw new Error(`system.exec failed: ${JSON.stringify(result.error)}`);
    return result.data;
  };

  it('runs as an unprivileged uid with no capabilities', async () => {
    const data = await run(
      'import os\nprint(os.getuid(), os.getgid(), os.getgroups())\nprint([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1])',
    );
    const [ids, caps] = data.stdout.trim().split('\n');
    const [uid] = (ids ?? '').split(' ').map(Number);
    expect(uid).toBeGreaterThanOrEqual(EXEC_UID_BASE);
    expect(uid).toBeLessThan(EXEC_UID_BASE + EXEC_UID_SLOTS);
    expect(ids).toMatch(/ \[\]$/);
    expect(caps).toBe('0000000000000000');
  });

  it('has no network: neither 1.1.1.1:53 nor a TCP server listening on the host', async () => {
    const script = [
      'import socket',
      `for host, port in (("1.1.1.1", 53), ("127.0.0.1", ${port})):`,
      '    s = socket.socket()',
      '    s.settimeout(3)',
      '    try:',
      '        s.connect((host, port))',
      '        print(host, "connected", s.recv(100))',
      '    except OSError as e:',
      '        print(host, "refused", type(e).__name__)',
    ].join('\n');
    const data = await run(script);
    expect(data.stdout).not.toContain('connected');
    expect(data.stdout).toMatch(/^1\.1\.1\.1 refused .*\n127\.0\.0\.1 refused .*\n$/);
    expect(connections).toBe(0);
  });

  it('cannot make a user namespace, and so cannot mount a tmpfs or reach netfilter', async () => {
    // In a user namespace of its own the program would hold every capability there: mounts, netfilter
    // and the rest of the kernel that only root reaches. Each step reports what happened.
    const script = [
      'import ctypes, os, socket, subprocess',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'def attempt(name, call):',
      '    try:',
      '        result = call()',
      '        print(name, "ok", result)',
      '    except OSError as e:',
      '        print(name, "failed", e.errno)',
      'def unshare():',
      '    if libc.unshare(0x10000000 | 0x00020000 | 0x40000000) != 0:',
      '        raise OSError(ctypes.get_errno(), "unshare")',
      '    uid = os.getuid()',
      '    open("/proc/self/setgroups", "w").write("deny")',
      '    open("/proc/self/uid_map", "w").write(f"0 {uid} 1")',
      '    open("/proc/self/gid_map", "w").write(f"0 {uid} 1")',
      '    return [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]',
      'def mount():',
      '    os.makedirs("/tmp/m", exist_ok=True)',
      '    if libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None) != 0:',
      '        raise OSError(ctypes.get_errno(), "mount")',
      '    return "mounted"',
      'def netfilter():',
      '    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)',
      '    s.bind((0, 0))',
      '    return "open"',
      'attempt("unshare", unshare)',
      'attempt("mount", mount)',
      'attempt("netfilter", netfilter)',
      'tool = subprocess.run(["unshare", "-U", "-r", "-m", "-n", "sh", "-c", "mount -t tmpfs none /tmp && echo mounted"], capture_output=True, text=True)',
      'print("unshare-command", tool.returncode, tool.stdout.strip() or "-")',
    ].join('\n');
    const data = await run(script);
    const lines = data.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^unshare failed \d+$/);
    expect(lines[1]).toMatch(/^mount failed \d+$/);
    expect(lines[2]).toMatch(/^netfilter failed \d+$/);
    expect(lines[3]).toMatch(/^unshare-command [1-9]\d* -$/);
  });

  it('cannot read /etc/shadow, or the host files around the interpreter', async () => {
    const script = [
      'import os',
      'for path in ("/etc/shadow", "/etc/passwd", "/root/.bash_history", "/root/.ssh", "/home", "/proc/1/environ"):',
      '    try:',
      '        data = open(path, "rb").read()',
      '        print(path, "READ", len(data))',
      '    except OSError as e:',
      '        print(path, "refused", type(e).__name__)',
    ].join('\n');
    const data = await run(script);
    expect(data.stdout).not.toContain('READ');
    expect(data.stdout).toContain('/etc/shadow refused');
  });

  it('writes outside cwd go nowhere: not into the VFS, not onto the host', async () => {
    engine.vfs.write('/outside/ro/data.txt', 'ro');
    engine.vfs.write('/outside/work/x.txt', 'x');
    const script = [
      'import os',
      'for path in ("/vfs/outside/ro/data.txt", "/vfs/outside/new.txt", "/vfs/new.txt", "/usr/arium-exec-probe", "/etc/arium-exec-probe", "/arium-exec-probe", "/tmp/t.txt"):',
      '    try:',
      '        open(path, "w").write("owned")',
      '        print(path, "WROTE")',
      '    except OSError as e:',
      '        print(path, "refused", type(e).__name__)',
    ].join('\n');
    const data = await run(script, { cwd: '/outside/work', read: ['/outside/ro'] });
    // /tmp is the call's own (a fresh tmpfs): writing there works, and is gone with the call.
    expect(data.stdout.split('\n').filter((l) => l.includes('WROTE'))).toEqual(['/tmp/t.txt WROTE']);
    expect(data.changes).toEqual([]);
    expect(engine.vfs.read('/outside/ro/data.txt').toString()).toBe('ro');
    expect(engine.vfs.exists('/outside/new.txt')).toBe(false);
    expect(engine.vfs.exists('/tmp/t.txt')).toBe(false);
    expect(() => readFileSync('/usr/arium-exec-probe')).toThrow();
    expect(() => readFileSync('/etc/arium-exec-probe')).toThrow();
  });

  it('a symbolic link to /etc/passwd made by the program is not brought back as host content', async () => {
    engine.vfs.write('/links/keep.txt', 'k');
    const script = [
      'import os',
      'os.symlink("/etc/passwd", "passwd")',
      'os.symlink("/etc", "etc")',
      'os.mkfifo("fifo")',
      'try:\n    os.link("/etc/passwd", "hard")\nexcept OSError as e:\n    print("link refused", type(e).__name__)',
      'open("real.txt", "w").write("mine")',
      'os.link("real.txt", "twin.txt")',
    ].join('\n');
    const data = await run(script, { cwd: '/links' });
    expect(data.exit_code).toBe(0);
    expect(engine.vfs.exists('/links/passwd')).toBe(false);
    expect(engine.vfs.exists('/links/etc')).toBe(false);
    expect(engine.vfs.exists('/links/fifo')).toBe(false);
    expect(engine.vfs.exists('/links/hard')).toBe(false);
    expect(engine.vfs.read('/links/real.txt').toString()).toBe('mine');
    // A hard link made inside the working copy comes back as a copy of the file.
    expect(engine.vfs.read('/links/twin.txt').toString()).toBe('mine');
    expect(data.skipped.map((s) => s.path).sort()).toEqual(['/links/etc', '/links/fifo', '/links/passwd']);
    expect(data.skipped.find((s) => s.path === '/links/passwd')?.reason).toContain('symbolic link (to /etc/passwd)');
    expect(JSON.stringify(data)).not.toContain('root:x:0:0');
  });

  it('a file past exec.limits.file_bytes is cut by RLIMIT_FSIZE and not brought back whole', async () => {
    const script =
      'import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\ntry:\n    open("big.bin", "wb").write(b"x" * (2 * 1024 * 1024))\nexcept OSError as e:\n    print("refused", e.errno)';
    const data = await run(script, { cwd: '/', diff: false });
    expect(data.stdout).toBe('refused 27\n');
    const size = engine.vfs.exists('/big.bin') ? engine.vfs.read('/big.bin').length : 0;
    expect(size).toBeLessThanOrEqual(1024 * 1024);
  });

  it('an endless loop ends in TIMEOUT, and no process of it is left', async () => {
    const result = await engine.call('system.exec', { argv: [py, '-c', 'import os\nos.fork()\nwhile True: pass'] }, { timeout_ms: 1500 });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error.code).toBe('TIMEOUT');
    expect(await leftover()).toEqual([]);
  });

  it('a fork bomb is bounded by RLIMIT_NPROC, and the call ends with nothing left', async () => {
    const script = [
      'import os, time',
      'n = 0',
      'try:',
      '    while n < 10000:',
      '        if os.fork() == 0:',
      '            time.sleep(60)',
      '            os._exit(0)',
      '        n += 1',
      'except OSError as e:',
      '    print("stopped", n, type(e).__name__)',
    ].join('\n');
    const data = await run(script);
    const match = /^stopped (\d+) BlockingIOError\n$/.exec(data.stdout);
    expect(match, data.stdout + data.stderr).not.toBeNull();
    expect(Number(match?.[1])).toBeLessThan(64);
    expect(await leftover()).toEqual([]);
  });

  it('/tmp is bounded (exec.limits.tmp_bytes): filling it ends in ENOSPC, not in the host memory', async () => {
    const script = [
      'import os',
      'n = 0',
      'try:',
      '    while n < 1000:',
      '        open(f"/tmp/f{n}", "wb").write(b"x" * (1024 * 1024))',
      '        n += 1',
      'except OSError as e:',
      '    print("full", n, e.errno)',
    ].join('\n');
    const data = await run(script);
    const match = /^full (\d+) 28\n$/.exec(data.stdout);
    expect(match, data.stdout + data.stderr).not.toBeNull();
    expect(Number(match?.[1])).toBeLessThanOrEqual(64);
  });

  it('more entries than exec.limits.copy_back_entries fail the call (OUTPUT_LIMIT) and nothing lands', async () => {
    const small = await execProject({ allow: [py], limits: { copy_back_entries: 10 } });
    try {
      small.engine.vfs.write('/w/keep.txt', 'k');
      const result = await small.engine.call('system.exec', { argv: [py, '-c', 'for i in range(20): open(f"f{i}", "w").write("x")'], cwd: '/w' });
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.error).toMatchObject({ code: 'OUTPUT_LIMIT', details: { limit_entries: 10 } });
      expect(small.engine.vfs.list('/w').entries.map((e) => e.name)).toEqual(['keep.txt']);
    } finally {
      await small.close();
    }
  });

  it('what a program writes past exec.limits.copy_back_bytes fails the call (OUTPUT_LIMIT) and nothing lands', async () => {
    const small = await execProject({ allow: [py], limits: { copy_back_bytes: 1000 } });
    try {
      small.engine.vfs.write('/w/keep.txt', 'k');
      const result = await small.engine.call('system.exec', {
        argv: [py, '-c', 'open("a.txt", "w").write("a" * 600)\nopen("b.txt", "w").write("b" * 600)'],
        cwd: '/w',
      });
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.error.code).toBe('OUTPUT_LIMIT');
      expect(small.engine.vfs.exists('/w/a.txt')).toBe(false);
      expect(small.engine.vfs.exists('/w/b.txt')).toBe(false);
    } finally {
      await small.close();
    }
  });
});
