import { executionAsyncId } from 'node:async_hooks';
import { execFileSync, spawnSync } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Engine, EngineEvent, ErrResult, SecurityEvent, ToolResult } from '../src/index.js';
import { openEngine, recordEvents, type TempProject, tempProject } from './support/project.js';

/** shell.run: what a script cannot reach — paths outside its grants, the host, the network, processes. */

interface ShellData {
  exit_code: number;
  stdout: string;
  stderr: string;
  changes: Array<{ path: string }>;
}

let project: TempProject;

beforeEach(() => {
  project = tempProject();
});

afterEach(() => project.remove());

async function withEngine(grants: readonly string[] | null, fn: (engine: Engine, events: EngineEvent[]) => Promise<void>): Promise<void> {
  const engine = await openEngine(project, grants ? { grants } : {});
  try {
    engine.vfs.write('/docs/a.md', '# a\nline\n');
    engine.vfs.write('/secret.txt', 'secret');
    engine.vfs.write('/out/keep.txt', 'keep');
    await fn(engine, recordEvents(engine));
  } finally {
    await engine.close();
  }
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 300)}`);
  return result.error;
}

function data(result: ToolResult): ShellData {
  if (!result.ok) throw new Error(`shell.run failed: ${result.error.code} ${result.error.message}`);
  return result.data as ShellData;
}

const security = (events: EngineEvent[]) => events.filter((e): e is SecurityEvent => e.type === 'SecurityEvent');

describe('shell.run: permissions, path by path', () => {
  const OUT_ONLY = ['vfs.read', 'vfs.write:/out/**'];

  it('writes inside its granted paths', async () => {
    await withEngine(OUT_ONLY, async (engine, events) => {
      const r = data(await engine.call('shell.run', { script: 'echo a > /out/a.txt && cat /out/a.txt' }));
      expect(r.stdout).toBe('a\n');
      expect(engine.vfs.read('/out/a.txt').toString()).toBe('a\n');
      expect(security(events)).toEqual([]);
    });
  });

  it('a write outside them: DENIED (stage permission), one SecurityEvent, and nothing written, not even what came before', async () => {
    await withEngine(OUT_ONLY, async (engine, events) => {
      const r = await engine.call('shell.run', { script: 'echo a > /out/ok.txt; echo b > /etc/evil; echo c > /out/after.txt' });
      const error = failed(r);
      expect(error).toMatchObject({
        stage: 'permission',
        code: 'DENIED',
        details: { permission: 'vfs.write', operation: 'write', path: '/etc/evil' },
      });
      expect(engine.vfs.exists('/out/ok.txt')).toBe(false);
      expect(engine.vfs.exists('/out/after.txt')).toBe(false);
      expect(engine.vfs.exists('/etc/evil')).toBe(false);
      expect(security(events)).toEqual([
        expect.objectContaining({
          tool: 'shell.run',
          action: 'denied',
          permission: 'vfs.write',
          operation: 'write /etc/evil',
          run_id: r.meta.run_id,
        }),
      ]);
      expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'SecurityEvent', 'ToolErrorEvent']);
    });
  });

  it('a script cannot swallow the denial and carry on', async () => {
    await withEngine(OUT_ONLY, async (engine, events) => {
      for (const script of [
        'echo b > /etc/evil 2>/dev/null || true; echo c > /out/c.txt',
        'if ! echo b > /etc/evil; then echo caught > /out/c.txt; fi',
        '( echo b > /etc/evil ) ; echo c > /out/c.txt',
      ]) {
        expect(failed(await engine.call('shell.run', { script })).code, script).toBe('DENIED');
        expect(engine.vfs.exists('/out/c.txt'), script).toBe(false);
      }
      expect(security(events)).toHaveLength(3);
    });
  });

  it.each([
    ['rm', 'rm /secret.txt', 'delete /secret.txt'],
    ['mv out of the scope', 'mv /out/keep.txt /moved.txt', 'move /moved.txt'],
    ['cp into a path outside', 'cp /docs/a.md /copy.md', 'write /copy.md'],
    ['sed -i', "sed -i 's/secret/public/' /secret.txt", 'write /secret.txt'],
    ['mkdir', 'mkdir /newdir', 'mkdir /newdir'],
    ['a relative path that climbs out of cwd', 'cd /out && echo x > ../../../etc/x', 'write /etc/x'],
    ['tee', 'echo x | tee /out/t.txt /t.txt', 'write /t.txt'],
  ])('%s outside the write scope is DENIED', async (_name, script, operation) => {
    await withEngine(OUT_ONLY, async (engine, events) => {
      const error = failed(await engine.call('shell.run', { script }));
      expect(error.code).toBe('DENIED');
      expect(security(events).map((e) => e.operation)).toEqual([operation]);
      expect(engine.vfs.read('/secret.txt').toString()).toBe('secret');
      expect(engine.vfs.exists('/out/t.txt')).toBe(false);
    });
  });

  it('with read scoped to /docs, commands still run (their lookup in /usr/bin is no denial), and reading elsewhere is DENIED', async () => {
    await withEngine(['vfs.read:/docs/**', 'vfs.write:/docs/**'], async (engine, events) => {
      const r = data(await engine.call('shell.run', { script: 'cat /docs/a.md | wc -l; nosuchcommand; echo $?', cwd: '/docs' }));
      expect(r.stdout).toBe('2\n127\n');
      expect(security(events)).toEqual([]);
      for (const [script, operation] of [
        ['cat /secret.txt', 'read /secret.txt'],
        ['ls /', 'stat /'],
        ['grep -r secret /', 'stat /'],
      ] as const) {
        const before = security(events).length;
        expect(failed(await engine.call('shell.run', { script })).code, script).toBe('DENIED');
        expect(
          security(events)
            .slice(before)
            .map((e) => e.operation),
          script,
        ).toEqual([operation]);
      }
    });
  });

  it('a caller without vfs.write cannot call it at all (the gate)', async () => {
    await withEngine(['vfs.read'], async (engine) => {
      const error = failed(await engine.call('shell.run', { script: 'ls /' }));
      expect(error).toMatchObject({ stage: 'permission', code: 'DENIED', details: { permission: 'vfs.write' } });
    });
  });
});

describe('shell.run: the host stays out of reach', () => {
  it('cat /etc/passwd reads the VFS, not the host', async () => {
    await withEngine(null, async (engine) => {
      const missing = data(await engine.call('shell.run', { script: 'cat /etc/passwd' }));
      expect(missing).toMatchObject({ exit_code: 1, stdout: '', stderr: 'cat: /etc/passwd: No such file or directory\n' });
      engine.vfs.write('/etc/passwd', 'vfs-user:x:0:0\n');
      expect(data(await engine.call('shell.run', { script: 'cat /etc/passwd' })).stdout).toBe('vfs-user:x:0:0\n');
    });
  });

  it('cd /.. and ../.. stay at the root of the VFS', async () => {
    await withEngine(null, async (engine) => {
      const r = data(await engine.call('shell.run', { script: 'cd /..; pwd; cd ../../..; pwd; ls; cat ../../../../secret.txt', cwd: '/docs' }));
      expect(r.stdout).toBe('/\n/\ndocs\nout\nsecret.txt\nsecret');
    });
  });

  it('symbolic and hard links are refused (the VFS has none): nothing is created', async () => {
    await withEngine(null, async (engine) => {
      const r = data(await engine.call('shell.run', { script: 'ln -s /etc/passwd /link; echo $?; ln /secret.txt /hard; echo $?; ls /' }));
      expect(r.stdout).toBe('1\n1\ndocs\nout\nsecret.txt\n');
      expect(r.stderr).toContain('ln: ENOTSUP: operation not supported, symlink');
      expect(r.changes).toEqual([]);
    });
  });

  it('has no network: curl and wget do not exist', async () => {
    await withEngine(null, async (engine) => {
      for (const command of ['curl -s https://example.com', 'wget https://example.com']) {
        const r = data(await engine.call('shell.run', { script: command }));
        expect(r.exit_code, command).toBe(127);
        expect(r.stderr, command).toMatch(/command not found/);
      }
    });
  });

  it('starts no processes and runs no other language: python3, node, js-exec, sqlite3 do not exist', async () => {
    await withEngine(null, async (engine) => {
      for (const command of ['python3 -c "print(1)"', 'python -c "print(1)"', 'node -e 1', 'js-exec -c "1"', 'sqlite3 :memory: "select 1"']) {
        const r = data(await engine.call('shell.run', { script: command }));
        expect(r.exit_code, command).toBe(127);
      }
    });
  });

  it('sees none of the host environment', async () => {
    process.env.ARIUM_SHELL_TEST_SECRET = 'host-only';
    try {
      await withEngine(null, async (engine) => {
        const r = data(await engine.call('shell.run', { script: 'env; echo "[$ARIUM_SHELL_TEST_SECRET]"' }));
        expect(r.stdout).not.toContain('host-only');
        expect(r.stdout).toContain('HOME=/\n');
        expect(r.stdout).toContain('[]\n');
      });
    } finally {
      delete process.env.ARIUM_SHELL_TEST_SECRET;
    }
  });

  it.each([
    ['head -c 3000000 /dev/zero | wc -c', '3000000\n'],
    ['head -c 3000000 /dev/urandom | wc -c', '3000000\n'],
    ['head --bytes=100000 /dev/zero | tr "\\0" a | wc -c', '100000\n'],
    ['bash -c "head -c 200000 /dev/urandom | wc -c"', '200000\n'],
    ['tr -dc a-z < /dev/urandom | head -c 16 | wc -c', '16\n'],
  ])('reads of its devices give what head -c asks for, as in bash: %s', async (script, stdout) => {
    await withEngine(null, async (engine) => {
      const r = await engine.call('shell.run', { script });
      expect(r).toMatchObject({ ok: true, data: { stdout, exit_code: 0 } });
    });
  });

  it('a head -c past the output limit is the output-limit error, not a shorter answer', async () => {
    await withEngine(null, async (engine) => {
      const r = await engine.call('shell.run', { script: 'head -c 40000000 /dev/zero | wc -c' });
      expect(r).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR' } });
      if (!r.ok) expect(r.error.message).toMatch(/output size limit/);
    });
  });

  it('has its own /dev/null and /dev/urandom: they are not VFS files', async () => {
    await withEngine(null, async (engine) => {
      const r = data(
        await engine.call('shell.run', { script: 'echo x > /dev/null; cat /missing 2>/dev/null; cat /dev/null; head -c 16 /dev/urandom | wc -c' }),
      );
      expect(r.stdout).toBe('16\n');
      expect(r.changes).toEqual([]);
      expect(engine.vfs.exists('/dev')).toBe(false);
    });
  });
});

describe('shell.run: no script can end the engine', () => {
  // Doubling a string until the shell's string limit stops it leaves a heap past memory_mb; in a worker
  // thread, V8 then aborted the whole engine process ("FATAL ERROR: Reached heap limit", SIGABRT),
  // during the script or in a collection after it. Run in a fresh engine process, so that an abort
  // shows as that process's end instead of the test runner's.
  const DOUBLING = 's=x; for i in $(seq 40); do s="$s$s"; done';
  const ATTACK = `while :; do echo y; done | head -n 5; ${DOUBLING}`;

  it('the attack, alone and among concurrent calls, fails with a limit code; the engine process lives on and the next call works', () => {
    const script = `
      import { mkdtempSync, mkdirSync } from 'node:fs';
      import { tmpdir } from 'node:os';
      import { join } from 'node:path';
      const { createEngine } = await import(${JSON.stringify(new URL('../dist/src/index.js', import.meta.url).href)});
      const dir = mkdtempSync(join(tmpdir(), 'arium-shell-abort-'));
      mkdirSync(join(dir, 'p', 'tools'), { recursive: true });
      const engine = await createEngine({ workspace: dir, project: 'p', watch: false, persist: false });
      const outcome = (r) => (r.ok ? { ok: true, stdout: r.data.stdout } : { ok: false, code: r.error.code, message: r.error.message });
      const call = async (script, extra) => outcome(await engine.call('shell.run', { script, ...extra }));
      const out = { attacks: [], others: [], next: [] };
      // The endless loop runs until the command limit (head does not end it): a lower one keeps it short.
      out.attacks.push(await call(${JSON.stringify(ATTACK)}, { max_commands: 20000 }));
      out.next.push(await call('echo next'));
      for (let round = 0; round < 4; round++) {
        const [attack, ...others] = await Promise.all([
          call(${JSON.stringify(DOUBLING)}),
          ...[1, 2, 3].map((i) => call('echo "call ' + i + '" > /f' + i + '.txt; cat /f' + i + '.txt')),
        ]);
        out.attacks.push(attack);
        out.others.push(...others);
        out.next.push(await call('echo next'));
      }
      await engine.close();
      process.stdout.write(JSON.stringify(out));
    `;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      cwd: new URL('..', import.meta.url),
      maxBuffer: 16 * 1024 * 1024,
    });
    expect({ status: child.status, signal: child.signal, stderr: child.stderr.slice(0, 500) }).toEqual({ status: 0, signal: null, stderr: '' });
    const out = JSON.parse(child.stdout) as {
      attacks: Array<{ ok: boolean; code?: string; message?: string }>;
      others: Array<{ ok: boolean; stdout?: string }>;
      next: Array<{ ok: boolean; stdout?: string }>;
    };
    expect(out.attacks).toHaveLength(5);
    for (const attack of out.attacks) {
      expect(attack.ok).toBe(false);
      // The shell's own limits (commands, string length) or its heap: which comes first depends on timing.
      if (attack.code === 'TOOL_ERROR') expect(attack.message).toMatch(/execution limits/);
      else expect(attack.code).toBe('MEMORY_LIMIT');
    }
    expect(out.others.map((o) => o.stdout)).toEqual(Array.from({ length: 4 }, () => ['call 1\n', 'call 2\n', 'call 3\n']).flat());
    expect(out.next).toEqual(Array.from({ length: 5 }, () => ({ ok: true, stdout: 'next\n' })));
  }, 180_000);

  it('a shell process that dies of memory fails only its call (MEMORY_LIMIT); concurrent calls land, and the next call gets a fresh process', async () => {
    await withEngine(null, async (engine) => {
      engine.vfs.mkdir('/par');
      // just-bash holds a pipe's bytes several times over: 30 MB through a pipe is far past 128 MB of heap.
      const [attack, ...others] = await Promise.all([
        engine.call('shell.run', { script: "echo start > /started.txt; printf '%30000000s' x | wc -c" }),
        ...[1, 2, 3].map((i) => engine.call('shell.run', { script: `echo "call ${i}" > /par/f${i}.txt; sleep 0.2; cat /par/f${i}.txt` })),
      ]);
      expect(failed(attack)).toMatchObject({ code: 'MEMORY_LIMIT', details: { memory_mb: 128 } });
      expect(engine.vfs.exists('/started.txt')).toBe(false);
      expect(others.map((r) => data(r).stdout)).toEqual(['call 1\n', 'call 2\n', 'call 3\n']);
      expect(engine.vfs.list('/par').entries.map((e) => e.name)).toEqual(['f1.txt', 'f2.txt', 'f3.txt']);
      expect(data(await engine.call('shell.run', { script: 'echo next' })).stdout).toBe('next\n');
    });
  }, 60_000);

  it('a process whose heap a script left near its limit is not reused: the next call gets a fresh one', async () => {
    await withEngine(null, async (engine) => {
      data(await engine.call('shell.run', { script: 'true' }));
      const status = async () => (await engine.status()).runners.builtin?.shell as { started: number; idle: number };
      expect(await status()).toMatchObject({ started: 1, idle: 1 });
      // The string limit stops the script with a heap of large strings well past half of memory_mb.
      expect(failed(await engine.call('shell.run', { script: DOUBLING })).code).toMatch(/^(TOOL_ERROR|MEMORY_LIMIT)$/);
      expect(data(await engine.call('shell.run', { script: 'echo next' })).stdout).toBe('next\n');
      expect(await status()).toMatchObject({ started: 2, idle: 1 });
      // An ordinary script leaves its process warm for the next call.
      data(await engine.call('shell.run', { script: 'echo again' }));
      expect(await status()).toMatchObject({ started: 2, idle: 1 });
    });
  }, 60_000);
});

describe('shell.run: the engine thread is left as it was', () => {
  // just-bash runs each script inside an AsyncLocalStorage context; on Node 20 that turns on the
  // process's promise hooks for good (every await then costs several times more). With the hooks on,
  // a promise reaction runs with an async id of its own; with them off, its async id is 0.
  const promiseHooksOn = async () => (await Promise.resolve().then(() => executionAsyncId())) !== 0;

  it('after shell calls, the engine process has no promise hooks on (checked in a fresh process), and just-bash in-process would turn them on where AsyncLocalStorage does', () => {
    const script = `
      import { executionAsyncId } from 'node:async_hooks';
      import { mkdtempSync, mkdirSync } from 'node:fs';
      import { tmpdir } from 'node:os';
      import { join } from 'node:path';
      const { createEngine } = await import(${JSON.stringify(new URL('../dist/src/index.js', import.meta.url).href)});
      const hooksOn = async () => (await Promise.resolve().then(() => executionAsyncId())) !== 0;
      const dir = mkdtempSync(join(tmpdir(), 'arium-shell-iso-'));
      mkdirSync(join(dir, 'p', 'tools'), { recursive: true });
      const engine = await createEngine({ workspace: dir, project: 'p', watch: false, persist: false });
      const before = await hooksOn();
      for (let i = 0; i < 3; i++) {
        const r = await engine.call('shell.run', { script: 'echo hi | grep h > /f.txt; cat /f.txt' });
        if (!r.ok) throw new Error(r.error.message);
      }
      const after = await hooksOn();
      await engine.close();
      // The control: the same library run in this thread.
      const { Bash } = await import('just-bash');
      await new Bash().exec('echo hi | grep h');
      const control = await hooksOn();
      process.stdout.write(JSON.stringify({ before, after, control }));
    `;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', cwd: new URL('..', import.meta.url) });
    // Whether AsyncLocalStorage itself turns the hooks on in this Node (it does on Node 20; Node 24 builds
    // it on AsyncContextFrame instead), asked of a fresh process: the control must match it.
    const als = `
      import { AsyncLocalStorage, executionAsyncId } from 'node:async_hooks';
      await new AsyncLocalStorage().run(1, async () => { await null; });
      process.stdout.write(String((await Promise.resolve().then(() => executionAsyncId())) !== 0));
    `;
    const alsTurnsHooksOn = execFileSync(process.execPath, ['--input-type=module', '-e', als], { encoding: 'utf8' }) === 'true';
    expect(JSON.parse(out)).toEqual({ before: false, after: false, control: alsTurnsHooksOn });
  });

  it('in this process too: shell calls turn no promise hooks on', async () => {
    const before = await promiseHooksOn();
    await withEngine(null, async (engine) => {
      data(await engine.call('shell.run', { script: 'echo hi | grep h' }));
    });
    expect(await promiseHooksOn()).toBe(before);
  });

  it('engine.close() ends the shell processes', async () => {
    const engine = await openEngine(project);
    data(await engine.call('shell.run', { script: 'true' }));
    expect((await engine.status()).runners.builtin?.shell).toMatchObject({ workers: 1, idle: 1 });
    await engine.close();
    expect((await engine.status()).runners.builtin?.shell).toMatchObject({ workers: 0, idle: 0 });
  });

  it('a call while the engine closes fails cleanly, and its process ends too', async () => {
    const engine = await openEngine(project);
    const call = engine.call('shell.run', { script: 'sleep 5; echo late > /late.txt' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await engine.close();
    expect(failed(await call).code).toBe('UNAVAILABLE');
    expect((await engine.status()).runners.builtin?.shell).toMatchObject({ workers: 0 });
  });
});
