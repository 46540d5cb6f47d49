import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PythonRunner, type PythonRunnerOptions } from '../runners/python/index.js';
import { bwrapProblem, unshareProblem } from '../runners/python/isolation.js';
import { DEFAULT_GRANTS, type Engine, type ErrorInfo, type SecurityEvent, type ToolResult } from '../src/index.js';
import { copyFixtureProject, definition, openEngine, type TempProject } from './support/project.js';
import { pythonRunnerOptions, remote, runnerStatus, track } from './support/target.js';

// The Python runner, end to end: every test runs real tool files from fixtures/python/tools through
// the engine: with bubblewrap, with the same sandbox built by the fork server itself (unshare), and
// with rlimits only. CI installs bubblewrap, so there a missing bubblewrap is a failure, not a skip.
// test/remote.py-suite.test.ts runs the same tests on a remote worker (support/target.ts), once, in the
// strongest sandbox here; tests that look into the runner's own processes or status run only here.

const bwrap = await bwrapProblem();
const unshare = await unshareProblem();
if (bwrap !== null && process.env.CI) throw new Error(`CI must test the full Python sandbox, but ${bwrap}`);
const asRoot = process.getuid?.() === 0;
const available = [...(bwrap === null ? (['bubblewrap'] as const) : []), ...(unshare === null ? (['unshare'] as const) : []), 'rlimits'] as const;
const modes = remote() ? available.slice(0, 1) : available;
const local = !remote();
const namespaced = modes.filter((m) => m !== 'rlimits');

/** A cgroup (v1) pids hierarchy this test process may make groups in, to make a zygote's forks fail for real. */
const PIDS_ROOT = '/sys/fs/cgroup/pids';
const pidsCgroup = ((): string | null => {
  const probe = join(PIDS_ROOT, `arium-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return null;
  } catch (error) {
    return `no writable cgroup pids hierarchy at ${PIDS_ROOT} (${(error as NodeJS.ErrnoException).code})`;
  }
})();
if (pidsCgroup) console.log(`py-runner: the fork-failure test is skipped: ${pidsCgroup}`);

function ok<T>(result: ToolResult): T {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data as T;
}

function failed(result: ToolResult): ErrorInfo {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)}`);
  return result.error;
}

/**
 * Live processes on this machine named `comm` (the name a tool's process gives itself with PR_SET_NAME).
 * Not zombies: a killed process keeps its name until its new parent reaps it, but runs nothing.
 */
function processesNamed(comm: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (stat.includes(`(${comm})`) && state !== 'Z' && state !== 'X') found.push(Number(name));
    } catch {}
  }
  return found;
}

/**
 * The zygote of the one fork server `engine` runs, found below the process the runner started for it
 * (status `server_pids`: bwrap, unshare or Python itself). Every process of a fork server runs the
 * server script: the server (with unshare, below the process that made its namespaces and waits for
 * it), its zygote, and the call processes the zygote forks. The zygote is the one that many steps
 * below the first process running the script.
 */
async function zygoteOf(engine: Engine, mode: 'bubblewrap' | 'unshare' | 'rlimits'): Promise<number> {
  const roots = (await engine.status()).runners['py-runner']?.server_pids as number[];
  expect(roots).toHaveLength(1);
  const root = roots[0] as number;
  const rows = execFileSync('ps', ['-e', '-o', 'pid=,ppid=,args='], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .map((f) => ({
      pid: Number(f[0]),
      ppid: Number(f[1]),
      server: !String(f[2]).includes('bwrap') && f.slice(2).join(' ').includes('arium_server.py'),
    }));
  const byPid = new Map(rows.map((row) => [row.pid, row]));
  const below = (pid: number): boolean => {
    for (let row = byPid.get(pid); row; row = byPid.get(row.ppid)) if (row.ppid === root) return true;
    return false;
  };
  const depth = mode === 'unshare' ? 2 : 1;
  const found: number[] = [];
  for (const row of rows) {
    let top = row;
    let steps = 0;
    while (byPid.get(top.ppid)?.server) {
      top = byPid.get(top.ppid) as typeof row;
      steps++;
    }
    if (row.server && steps === depth && below(row.pid)) found.push(row.pid);
  }
  expect(found).toHaveLength(1);
  return found[0] as number;
}

/** An engine on `project` whose Python tools go through one fork server (so every call meets the same one), closed after `body`. */
async function withOneServer(project: TempProject, options: PythonRunnerOptions, body: (engine: Engine) => Promise<void>): Promise<void> {
  const engine = track(await openEngine(project, await pythonRunnerOptions({ ...options, servers: 1 })));
  try {
    // The server is up before the body runs: a call that holds for a time set against its timeout is not
    // also timed from the server's start (about 0.4 s, more on a loaded machine).
    ok(await engine.call('py.echo', { warm: true }));
    await body(engine);
  } finally {
    await engine.close();
  }
}

describe.each(modes)('Python runner (%s)', (mode) => {
  let project: TempProject;
  let engine: Engine;
  const security: SecurityEvent[] = [];

  beforeAll(async () => {
    project = copyFixtureProject('python');
    // sys.exec granted, so that py.spawn (which declares it) may run programs; py.attack does not declare it.
    engine = track(await openEngine(project, { ...(await pythonRunnerOptions({ isolation: mode })), grants: [...DEFAULT_GRANTS, 'sys.exec'] }));
    engine.events.on('security', (event) => security.push(event));
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  describe('the tool contract', () => {
    it('runs run(input, ctx) and returns its JSON, with the isolation in force in meta', async () => {
      const result = await engine.call('py.echo', { text: 'héllo ✓', n: [1, 2.5, null, true] });
      const data = ok<{ input: unknown; tool: string; run_id: string }>(result);
      expect(data.input).toEqual({ text: 'héllo ✓', n: [1, 2.5, null, true] });
      expect(data.tool).toBe('py.echo');
      expect(data.run_id).toBe(result.meta.run_id);
      expect(result.meta.isolation).toBe(mode);
    });

    it('awaits an async result', async () => {
      expect(ok(await engine.call('py.echo', { async: true, text: 'ab' }))).toEqual({ doubled: 'abab' });
    });

    it('gives a tool ssl when it imports it, and shows it nothing of the tools compiled ahead for it', async () => {
      // Warm processes get the code of the tools called last; a call's process must not reveal which ones.
      failed(await engine.call('py.fail', { kind: 'exception' }));
      for (let i = 0; i < 6; i++) {
        const found = ok<{ ssl: string; compiled: string[]; handed: string[] }>(await engine.call('py.echo', { probe: true }));
        expect(found.ssl).toMatch(/^OpenSSL/);
        expect(found.compiled).toEqual([]);
        expect(found.handed).toEqual([]);
      }
    });

    it('runs the new code of a tool edited on disk, not the code compiled ahead for the old file', async () => {
      const write = (version: number) => {
        writeFileSync(join(project.dir, 'tools', 'versioned.py'), `def run(input, ctx):\n    return {"version": ${version}}\n`);
        // Same size, same inode: only the modification time tells the files apart.
        const at = new Date(Date.now() + version * 1000);
        utimesSync(join(project.dir, 'tools', 'versioned.py'), at, at);
      };
      write(1);
      writeFileSync(
        join(project.dir, 'tools', 'versioned.json'),
        definition({ id: 'py.versioned', runner: 'py-runner', entry: 'versioned.py', permissions: ['exec.py'] }),
      );
      await engine.refresh();
      for (let i = 0; i < 4; i++) expect(ok(await engine.call('py.versioned', {}))).toEqual({ version: 1 });
      write(2);
      for (let i = 0; i < 4; i++) expect(ok(await engine.call('py.versioned', {}))).toEqual({ version: 2 });
    });

    it.runIf(mode !== 'rlimits' && local)(
      'with no time to wait for compile processes, each call compiles its tool: results, edits and errors as before, and the zygote carries on',
      async () => {
        // compileWaitMs 0: the zygote gives up on every compile process before it can answer (its
        // deadline has passed at the first look), so this runs the path of a compile that takes too long.
        await withOneServer(project, { isolation: mode, compileWaitMs: 0 }, async (single) => {
          const servers = async () => (await single.status()).runners['py-runner'];
          for (let i = 0; i < 4; i++) expect(ok<{ input: unknown }>(await single.call('py.echo', { i })).input).toEqual({ i });
          expect(await servers()).toMatchObject({ server_starts: 1, server_crashes: 0 });
          writeFileSync(join(project.dir, 'tools', 'slowcompiled.py'), 'def run(input, ctx):\n    return {"v": 1}\n');
          writeFileSync(
            join(project.dir, 'tools', 'slowcompiled.json'),
            definition({ id: 'py.slowcompiled', runner: 'py-runner', entry: 'slowcompiled.py', permissions: ['exec.py'] }),
          );
          await single.refresh();
          for (let i = 0; i < 3; i++) expect(ok(await single.call('py.slowcompiled', {}))).toEqual({ v: 1 });
          writeFileSync(join(project.dir, 'tools', 'slowcompiled.py'), 'def run(input, ctx):\n    return {"v": 22}\n');
          for (let i = 0; i < 3; i++) expect(ok(await single.call('py.slowcompiled', {}))).toEqual({ v: 22 });
          for (let i = 0; i < 2; i++) expect(failed(await single.call('py.broken', {})).message).toMatch(/SyntaxError.*line 2|line 2.*SyntaxError/s);
          // The same server, and so the same zygote (a server whose zygote dies is replaced), served every
          // call: giving up on its compile processes did not break it. (Counted through the runner's
          // status, not by listing processes: other engines of this file start servers meanwhile.)
          expect(await servers()).toMatchObject({ server_starts: 1, server_crashes: 0 });
        });
      },
    );

    it('a call’s process holds nothing of another call running at the same time: not through the server’s objects, not in its memory', async () => {
      // One fork server, so both calls go through the same one; the victim's job is in it while the
      // attacker's processes are forked.
      await withOneServer(project, { isolation: mode }, async (single) => {
        const secret = `victim-secret-${randomUUID()}`;
        const victim = single.call('py.attack.patient', { attack: 'hold', secret, seconds: 1.0 });
        await sleep(300);
        for (let i = 0; i < 4; i++) {
          const parts = [secret.slice(0, 12), secret.slice(12)];
          const found = ok<{ calls_seen: number; memory_hits: number }>(await single.call('py.attack', { attack: 'peek-other-calls', parts }));
          expect(found).toEqual({ calls_seen: 0, memory_hits: 0 });
        }
        expect(ok(await victim)).toEqual({ held: true });
      });
    });

    it.runIf(local)('a killed zygote fails the call running then (its process dies with it), and the runner replaces the server', async () => {
      await withOneServer(project, { isolation: mode }, async (single) => {
        ok(await single.call('py.echo', { i: 0 }));
        const zygote = await zygoteOf(single, mode);
        const running = single.call('py.attack', { attack: 'hold', seconds: 0.5 });
        await sleep(100);
        process.kill(zygote, 'SIGKILL');
        const error = failed(await running);
        expect(error.code).toBe('UNAVAILABLE');
        expect(error.retryable).toBe(true);
        for (let i = 0; i < 3; i++) expect(ok(await single.call('py.echo', { i }))).toMatchObject({ input: { i } });
      });
    });

    it.runIf(pidsCgroup === null && local)(
      'when its zygote cannot fork (a real cgroup pids limit), calls fail at once with BUSY, and run again once it can',
      async () => {
        const group = join(PIDS_ROOT, `arium-test-${randomUUID()}`);
        mkdirSync(group);
        try {
          await withOneServer(project, { isolation: mode }, async (single) => {
            ok(await single.call('py.echo', { i: 0 }));
            const zygote = await zygoteOf(single, mode);
            writeFileSync(join(group, 'pids.max'), '1');
            writeFileSync(join(group, 'cgroup.procs'), String(zygote));
            // The processes forked ahead run the next calls; after them every fork fails.
            let busy: ErrorInfo | null = null;
            for (let i = 0; i < 6 && busy === null; i++) {
              const result = await single.call('py.echo', { i });
              if (!result.ok) busy = result.error;
            }
            expect(busy).toMatchObject({ code: 'BUSY', retryable: true, stage: 'execution' });
            expect(busy?.message).toMatch(/no call process could be started \(.*Resource temporarily unavailable.*\); retry/);
            writeFileSync(join(group, 'pids.max'), 'max');
            await sleep(300); // the server orders forks again 100 ms after a failure
            for (let i = 0; i < 3; i++) expect(ok(await single.call('py.echo', { i }))).toMatchObject({ input: { i } });
            writeFileSync(join(PIDS_ROOT, 'cgroup.procs'), String(zygote));
          });
        } finally {
          // Empty once the engine is closed (its processes are gone, or were moved back above).
          for (let i = 0; i < 50; i++) {
            try {
              rmdirSync(group);
              break;
            } catch {
              await sleep(20);
            }
          }
        }
      },
    );

    it(`a SysV shared memory segment a call leaves is ${mode === 'rlimits' ? 'still there (no IPC namespace without namespaces)' : 'gone with it'}`, async () => {
      const key = 0x41520000 + Math.floor(Math.random() * 0xffff);
      expect(ok(await engine.call('py.attack', { attack: 'ipc-leave', key }))).toEqual({ created: true });
      expect(ok(await engine.call('py.attack', { attack: 'ipc-find', key }))).toEqual({ found: mode === 'rlimits' });
    });

    it.runIf(mode === modes[0] && local)(
      'runs calls that wait for their process, and drops one cancelled while it waits without the server being killed for it',
      async () => {
        // No process forked ahead: every call waits for the zygote. A stopped zygote keeps a call waiting.
        await withOneServer(project, { isolation: mode, warm: 0 }, async (single) => {
          for (let i = 0; i < 3; i++) expect(ok(await single.call('py.echo', { i }))).toMatchObject({ input: { i } });
          const zygote = await zygoteOf(single, mode);
          process.kill(zygote, 'SIGSTOP');
          const cancel = new AbortController();
          const waiting = single.call('py.echo', { i: 'never' }, { signal: cancel.signal });
          await sleep(100);
          cancel.abort();
          expect(failed(await waiting).code).toBe('CANCELLED');
          // Past the 3 s the engine gives a server to answer for a call it stopped.
          await sleep(3_500);
          process.kill(zygote, 'SIGCONT');
          expect(ok(await single.call('py.echo', { i: 4 }))).toMatchObject({ input: { i: 4 } });
          // The same zygote served the call: the server was not replaced.
          expect(await zygoteOf(single, mode)).toBe(zygote);
        });
      },
    );

    it('captures print(), stderr and ctx.log in meta.logs', async () => {
      const result = await engine.call('py.echo', { print: ['out one', 'out two'], stderr: ['err'], log: ['a', 'b'] });
      ok(result);
      const logs = result.meta.logs ?? [];
      expect(logs).toEqual(
        expect.arrayContaining([
          { level: 'stdout', message: 'out one' },
          { level: 'stdout', message: 'out two' },
          { level: 'stderr', message: 'err' },
          { level: 'warn', message: 'a' },
        ]),
      );
    });

    it('imports a module next to it in the tools folder', async () => {
      expect(ok(await engine.call('py.helper', { text: 'hi' }))).toEqual({ said: 'HI!' });
    });

    it('reports an exception as TOOL_ERROR with the tool’s own traceback and no host path', async () => {
      const error = failed(await engine.call('py.fail', { kind: 'exception' }));
      expect(error.code).toBe('TOOL_ERROR');
      expect(error.message).toBe('ValueError: the tool failed on purpose');
      expect(error.stack).toMatch(/File "fail\.py", line \d+, in helper/);
      expect(error.stack).not.toMatch(/arium_child|arium_server|\/tools\/|\/tmp\/|\/work\//);
      expect(error.stack).not.toContain(project.dir);
    });

    it.each([
      ['nan', 'INVALID_OUTPUT'],
      ['bytes', 'INVALID_OUTPUT'],
      ['set', 'INVALID_OUTPUT'],
      ['cycle', 'INVALID_OUTPUT'],
      ['deep', 'INVALID_OUTPUT'],
      ['big', 'OUTPUT_LIMIT'],
      ['exit', 'TOOL_ERROR'],
      ['hostile-str', 'TOOL_ERROR'],
      ['nested-nan', 'INVALID_OUTPUT'],
    ])('a tool returning or raising %s ends as %s', async (kind, code) => {
      const error = failed(await engine.call('py.fail', { kind }));
      expect(error.code).toBe(code);
      expect(error.stage).toBe('execution');
    });

    it.each([
      ['nested-nan', '/a/1/b~1c', 'inf is not a JSON number'],
      ['nested-object', '/a/1/when', 'a value of type object, which JSON has not'],
      ['cycle', '/0', 'a cycle: the value contains itself'],
      ['set', '/x', 'a value of type set, which JSON has not'],
    ])('an output that is not JSON (%s) is INVALID_OUTPUT naming its JSON pointer', async (kind, pointer, reason) => {
      const error = failed(await engine.call('py.fail', { kind }));
      expect(error).toMatchObject({ code: 'INVALID_OUTPUT', details: { pointer, reason } });
      expect(error.message).toBe(`The output is not plain JSON at "${pointer}": ${reason}`);
    });

    it('a tool file replaced by a FIFO after it loaded fails its call at once, as not a regular file (it would hold the open)', async () => {
      const file = join(project.dir, 'tools', 'piped.py');
      writeFileSync(file, 'def run(input, ctx):\n    return {}\n');
      writeFileSync(
        join(project.dir, 'tools', 'piped.json'),
        definition({ id: 'py.piped', runner: 'py-runner', entry: 'piped.py', permissions: ['exec.py'], limits: { timeout_ms: 3000 } }),
      );
      await engine.refresh();
      ok(await engine.call('py.piped', {}));
      rmSync(file);
      execFileSync('mkfifo', [file]);
      for (let i = 0; i < 2; i++) {
        const error = failed(await engine.call('py.piped', {}));
        expect(error.code).toBe('TOOL_ERROR');
        expect(error.message).toContain('piped.py is not a regular file');
      }
    });

    it('reports a syntax error with its line, on every call', async () => {
      // The later calls meet a zygote that tried to compile the tool ahead and could not.
      for (let i = 0; i < 3; i++) {
        const error = failed(await engine.call('py.broken', {}));
        expect(error.code).toBe('TOOL_ERROR');
        expect(error.message).toMatch(/SyntaxError/);
        expect(error.message).toMatch(/line 2/);
        expect(error.message).not.toContain(project.dir);
      }
    });

    it('ctx.vfs reads, writes, lists and moves files through the engine', async () => {
      const steps = [
        ['mkdir', ['/data']],
        ['write', ['/data/a.txt', 'alpha']],
        ['write_bytes', ['/data/b.bin', [0, 255, 7]]],
        ['read', ['/data/a.txt']],
        ['read', ['/data/b.bin'], { encoding: 'bytes' }],
        ['exists', ['/data/none']],
        ['list', ['/data']],
        ['move', ['/data/a.txt', '/data/c.txt']],
        ['read', ['/nope.txt']],
      ];
      const out = ok<Array<{ ok?: unknown; error?: string }>>(await engine.call('py.vfs', { steps }));
      expect(out[3]).toEqual({ ok: 'alpha' });
      expect(out[4]).toEqual({ ok: [0, 255, 7] });
      expect(out[5]).toEqual({ ok: false });
      expect(JSON.stringify(out[6]?.ok)).toContain('a.txt');
      expect(out[8]?.error).toBe('NOT_FOUND');
      expect(engine.vfs.read('/data/c.txt').toString()).toBe('alpha');
    });

    it('a VFS access outside the grants is DENIED at the permission stage, with one SecurityEvent, and ends the call', async () => {
      const before = security.length;
      const result = await engine.call(
        'py.vfs',
        {
          steps: [
            ['write', ['/secret/x', 'no']],
            ['write', ['/after.txt', 'kept going']],
          ],
        },
        { grants: ['exec.py', 'vfs.write:/out/**'] },
      );
      const error = failed(result);
      expect(error.code).toBe('DENIED');
      expect(error.stage).toBe('permission');
      expect(security.slice(before).filter((e) => e.run_id === result.meta.run_id)).toHaveLength(1);
      expect(engine.vfs.exists('/after.txt')).toBe(false);
    });

    it('a call that fails leaves none of its writes', async () => {
      const error = failed(await engine.call('py.vfs', { steps: [['write', ['/atomic.txt', 'x']]], then_fail: true }));
      expect(error.code).toBe('TOOL_ERROR');
      expect(engine.vfs.exists('/atomic.txt')).toBe(false);
    });

    it('runs calls at the same time, each with its own result', async () => {
      const results = await Promise.all(Array.from({ length: 12 }, (_, i) => engine.call('py.echo', { i })));
      expect(results.map((r) => ok<{ input: { i: number } }>(r).input.i)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    });
  });

  it('keeps up under load: 240 calls, 8 in flight, none lost or mixed up', async () => {
    let next = 0;
    const failures: string[] = [];
    const worker = async () => {
      while (next < 240) {
        const i = next++;
        const result = await engine.call('py.echo', { i });
        if (!result.ok) failures.push(result.error.message);
        else if ((result.data as { input: { i: number } }).input.i !== i) failures.push(`call ${i} got another call's result`);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    expect(failures).toEqual([]);
  });

  describe('protocol integrity', () => {
    it('frames printed on stdout and stderr are only logs', async () => {
      const result = await engine.call('py.attack', { attack: 'forge-stdout' });
      expect(ok(result)).toEqual({ real: true });
    });

    it('a frame forged on its own channel is only its output: the engine owns run id and envelope', async () => {
      const result = await engine.call('py.attack', { attack: 'forge-channel' });
      expect(ok(result)).toEqual({ forged: true });
      expect(result.meta.run_id).not.toBe('forged');
      expect(Object.keys(result).sort()).toEqual(['data', 'meta', 'ok']);
    });

    it('garbage written to every descriptor fails only that call', async () => {
      const [error, other] = await Promise.all([engine.call('py.attack', { attack: 'garbage-fds' }), engine.call('py.echo', { still: 'fine' })]);
      expect(failed(error).code).toBe('TOOL_ERROR');
      expect(failed(error).message).toMatch(/broke the protocol on its channel: it sent a frame header announcing 4294967295 bytes/);
      expect(ok<{ input: unknown }>(other).input).toEqual({ still: 'fine' });
    });

    it('an output flood is capped and the call still answers', async () => {
      const result = await engine.call('py.attack', { attack: 'flood-stdout' });
      expect(ok(result)).toEqual({ flooded: true });
      const text = (result.meta.logs ?? []).map((l) => l.message).join('');
      expect(text.length).toBeLessThan(300 * 1024);
    });

    it('closing stdio does not stop the reply', async () => {
      expect(ok(await engine.call('py.attack', { attack: 'close-stdio' }))).toEqual({ closed: true });
    });

    it.each([
      ['json-line', /frame header announcing 2065855522 bytes \(7b 22 74 22 '\{"t"'\)/],
      ['bad-body', /a frame of 64 bytes whose body starts with 6e 6f 74 20 6a 73 6f 6e 'not json'/],
      ['empty-frame', /a frame header announcing 0 bytes/],
      ['blob-on-result', /a frame announcing a blob it may not carry \(3 on a 'result' frame\)/],
      ['blob-too-big', /a frame announcing a blob it may not carry \(1099511627776 on a 'vfs' frame\)/],
      ['blob-not-a-number', /a frame announcing a blob it may not carry \('all' on a 'vfs' frame\)/],
    ])('%s written on its channel is a protocol error at once: TOOL_ERROR naming it', async (attack, shown) => {
      // The tool sleeps 5 s after writing, past its 1.5 s timeout: only a refusal at once is not TIMEOUT.
      const error = failed(await engine.call('py.attack', { attack }));
      expect(error.code).toBe('TOOL_ERROR');
      expect(error.message).toMatch(/the tool's process broke the protocol on its channel/);
      expect(error.message).toMatch(shown);
      expect(ok(await engine.call('py.echo', { after: attack }))).toBeTruthy();
    });

    it('exec-ing another program (with sys.exec) ends as a clear error', async () => {
      const error = failed(await engine.call('py.spawn', { attack: 'exec' }));
      expect(error.code).toBe('TOOL_ERROR');
      expect(error.message).toMatch(/without a reply/);
    });

    it('holds no descriptor but /dev/null, its stdout and stderr pipes and its channel', async () => {
      const { fds, channel } = ok<{ fds: Record<string, string>; channel: number }>(await engine.call('py.attack', { attack: 'fds' }));
      expect(Object.keys(fds).sort()).toEqual(['0', '1', '2', String(channel)].sort());
      expect(fds['0']).toBe('/dev/null');
      expect(fds['1']).toMatch(/^pipe:/);
      expect(fds['2']).toMatch(/^pipe:/);
      expect(fds[String(channel)]).toMatch(/^socket:/);
    });

    it('dying in the middle of a reply ends as a clear error', async () => {
      const error = failed(await engine.call('py.attack', { attack: 'die-mid-reply' }));
      expect(error.code).toBe('TOOL_ERROR');
      expect(error.message).toMatch(/middle of its reply|without a reply/);
    });
  });

  describe('limits', () => {
    it('a memory bomb is MEMORY_LIMIT', async () => {
      const error = failed(await engine.call('py.attack', { attack: 'memory' }));
      expect(error.code).toBe('MEMORY_LIMIT');
    });

    it.each(['cpu', 'sleep', 'sigterm'])('%s ends as TIMEOUT, and the runner keeps working', async (attack) => {
      const started = Date.now();
      const error = failed(await engine.call('py.attack', { attack }));
      expect(error.code).toBe('TIMEOUT');
      // A bound on the test, not a speed claim: the timeout is 1.5 s.
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(ok(await engine.call('py.echo', { after: attack }))).toBeTruthy();
    });

    it('open files are limited', async () => {
      const { opened } = ok<{ opened: number }>(await engine.call('py.attack', { attack: 'open-files' }));
      expect(opened).toBeLessThan(64);
      expect(opened).toBeGreaterThan(0);
    });

    it('file size is limited', async () => {
      const data = ok<{ big_error: number | null }>(await engine.call('py.attack', { attack: 'tmp' }));
      expect(data.big_error).not.toBeNull();
    });
  });

  describe('running programs needs sys.exec', () => {
    it('a tool without sys.exec runs no program by any route: a PermissionError naming sys.exec, and a SecurityEvent for each attempt', async () => {
      const before = security.length;
      const result = await engine.call('py.attack', { attack: 'run-programs' });
      const found = ok<Record<string, { ran?: string; raised?: string; errno?: number; message?: string }>>(result);
      const refused = {
        raised: 'PermissionError',
        errno: 1,
        message: expect.stringMatching(/needs the sys\.exec permission, which py\.attack does not declare/),
      };
      for (const route of [
        'subprocess.run',
        'subprocess.check_output',
        'os.system',
        'os.popen',
        'os.execv',
        'os.execve',
        'os.posix_spawn',
        'os.posix_spawnp',
        'pty.spawn',
        'asyncio',
        'ctypes.execve',
        'ctypes.system',
      ]) {
        expect(found[route], route).toMatchObject(refused);
      }
      // os.spawnv's child cannot exec: it exits 127, as os.spawnv's own code does when exec fails.
      expect(found['os.spawnv']).toEqual({ ran: '127' });
      // The system call itself, past every Python-level check: refused by the seccomp filter.
      expect(found['raw execve']).toMatchObject({ raised: 'PermissionError', errno: 1, message: expect.stringMatching(/execve returned -1/) });
      const operations = security
        .slice(before)
        .filter((e) => e.run_id === result.meta.run_id)
        .map((e) => {
          expect(e).toMatchObject({ action: 'intrusion', tool: 'py.attack', permission: null, reason: expect.stringMatching(/sys\.exec/) });
          return e.operation;
        });
      for (const shown of ['subprocess.Popen', 'os.system', 'os.exec', 'os.posix_spawn', 'pty.spawn', "ctypes.dlsym 'ctypes' 'execve'"]) {
        expect(
          operations.some((operation) => operation?.startsWith(shown)),
          shown,
        ).toBe(true);
      }
      expect(operations.length).toBeLessThanOrEqual(16);
    });

    it(`a tool with sys.exec declared and granted runs programs: ${mode === 'rlimits' ? 'any the engine user may' : 'only the interpreter is there'}`, async () => {
      const found = ok<{ printed: string; id: { ran?: string; raised?: string } }>(await engine.call('py.spawn', { attack: 'run-self' }));
      expect(found.printed).toBe('42');
      if (mode === 'rlimits') expect(found.id.ran).toBeDefined();
      else expect(found.id.raised).toBe('FileNotFoundError');
    });

    it('a caller not granted sys.exec cannot call a tool that declares it', async () => {
      const error = failed(await engine.call('py.spawn', { attack: 'run-self' }, { grants: ['exec.py', 'vfs.write'] }));
      expect(error).toMatchObject({ code: 'DENIED', stage: 'permission', details: { permission: 'sys.exec' } });
    });
  });

  describe('nothing survives a call', () => {
    /** True when each call runs as a uid of its own (the engine runs as root and the interpreter is readable by others). */
    async function ownUid(): Promise<boolean> {
      await engine.call('py.echo', {});
      return (await runnerStatus(engine, 'py-runner'))?.uid === 'a uid of its own per call';
    }

    it('a bounded fork bomb is stopped by the process limit, and its processes are gone', async () => {
      const marker = String(10000 + Math.floor(Math.random() * 5000));
      const data = ok<{ started: number }>(await engine.call('py.procs', { attack: 'fork-bomb', marker }));
      const left = processesNamed(`ar${marker}`);
      for (const pid of left) process.kill(pid, 'SIGKILL');
      // RLIMIT_NPROC binds an unprivileged uid only; as root without one, the process group kill ends them.
      if (mode !== 'rlimits' || (await ownUid())) expect(data.started).toBeLessThan(40);
      expect(data.started).toBeGreaterThan(0);
      expect(left).toEqual([]);
    });

    it('a setsid + double-fork daemon is gone when the call returns (with namespaces, or a uid of its own)', async () => {
      const marker = String(4000 + Math.floor(Math.random() * 5000));
      ok(await engine.call('py.procs', { attack: 'daemon', marker }));
      const left = processesNamed(`ar${marker}`);
      for (const pid of left) process.kill(pid, 'SIGKILL');
      if (mode !== 'rlimits' || (await ownUid())) expect(left).toEqual([]);
      // rlimits only, no uid of its own: the documented gap (THREAT_MODEL.md) — the daemon escaped the group kill.
      else expect(left.length).toBe(1);
    });

    it('work a thread left running cannot touch the VFS after the call', async () => {
      ok(await engine.call('py.attack', { attack: 'late-thread' }));
      await new Promise((r) => setTimeout(r, 600));
      expect(engine.vfs.exists('/late.txt')).toBe(false);
    });

    it('no state of one call is seen by the next', async () => {
      const first = ok<{ marker_existed: boolean }>(await engine.call('py.attack', { attack: 'tmp' }));
      const second = ok<{ marker_existed: boolean }>(await engine.call('py.attack', { attack: 'tmp' }));
      expect(first.marker_existed).toBe(false);
      expect(second.marker_existed).toBe(false);
    });
  });
});

describe.each(namespaced)('Python sandbox isolation (%s)', (mode) => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = copyFixtureProject('python');
    engine = track(await openEngine(project, await pythonRunnerOptions({ isolation: mode })));
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  it('a file a call writes anywhere it can is gone for the next call', async () => {
    const input = { name: `left-${randomUUID()}` };
    const left = ok<{ left: string[] }>(await engine.call('py.attack', { attack: 'leave-files', ...input })).left;
    expect(left).toContain('/tmp');
    expect(ok(await engine.call('py.attack', { attack: 'find-files', ...input }))).toEqual({ found: [] });
  });

  it('sees none of the host’s files, processes or environment', async () => {
    process.env.ARIUM_TEST_SECRET = 'do-not-leak';
    const paths = ['/etc/passwd', '/etc/shadow', '/root/.bashrc', project.dir, `${project.tools}/echo.json`, '/home', '/var/log'];
    const data = ok<{ readable: string[]; env: Record<string, string>; init_env: string[]; processes: number; root: string[]; cwd: string[] }>(
      await engine.call('py.attack', { attack: 'host-files', paths }),
    );
    expect(data.readable).toEqual([]);
    expect(JSON.stringify(data.env)).not.toContain('do-not-leak');
    expect(Object.keys(data.env).sort()).toEqual(['HOME', 'LANG', 'PATH', 'TMPDIR']);
    // PID 1 is the call's own process; its start-up environment is what bubblewrap passed (PWD alone),
    // unreadable once it has changed uid.
    expect(data.init_env.filter((entry) => entry !== 'PWD=/')).toEqual([]);
    expect(data.processes).toBe(1);
    expect(data.cwd).toEqual([]);
    expect(data.root).not.toContain('home');
    expect(data.root).not.toContain('work');
  });

  it('shows no program but the interpreter, and the whole standard library still imports', async () => {
    expect(ok(await engine.call('py.attack', { attack: 'programs-in-view' }))).toEqual({ programs: [], shells: [] });
    expect(ok(await engine.call('py.stdlib', {}))).toEqual({
      sqlite: 42,
      decimal: '3.3',
      zlib: 'arium',
      lzma: 'arium',
      bz2: 'arium',
      sha256: '53d1fdc4',
      re: '<a> <b>',
      json: { a: [1] },
      ssl: 'OpenSSL',
      uuid: 36,
      ctypes: 5,
      zoneinfo: 'Europe/Paris',
    });
  });

  it('has no network at all', async () => {
    const data = ok<{ outcomes: string[]; interfaces: string[] }>(await engine.call('py.attack', { attack: 'network' }));
    expect(data.outcomes).not.toContain('connected');
    expect(data.interfaces).toEqual(['lo']);
  });

  it('opens no socket but Unix ones: loopback and netlink would be shared with the calls running at the same time', async () => {
    expect(ok(await engine.call('py.attack', { attack: 'socket-families' }))).toEqual({
      inet: 'EAFNOSUPPORT',
      inet6: 'EAFNOSUPPORT',
      netlink: 'EAFNOSUPPORT',
      unix: 'opened',
      'unix-pair': 'opened',
    });
  });

  it('a call reaches its own abstract Unix sockets, and where the kernel scopes them (Landlock), no other call reaches them', async () => {
    await withOneServer(project, { isolation: mode }, async (single) => {
      const name = `arium-test-${randomUUID()}`;
      const listener = single.call('py.attack.patient', { attack: 'abstract-listen', name, seconds: 1.0 });
      await sleep(300);
      const sent = ok<{ dgram: string; stream: string }>(await single.call('py.attack', { attack: 'abstract-send', name }));
      const heard = ok<{ reached_own: boolean; received: string[] }>(await listener);
      expect(heard.reached_own).toBe(true);
      const scoping = String((await runnerStatus(single, 'py-runner', 'abstract_sockets'))?.abstract_sockets);
      if (scoping.startsWith('scoped per call')) {
        expect(sent).toEqual({ dgram: 'EPERM', stream: 'EPERM' });
        expect(heard.received).toEqual([]);
      } else {
        // An older kernel: the gap THREAT_MODEL.md states, and status() reports.
        expect(scoping).toMatch(/^shared by the calls running at the same time/);
        expect(sent).toEqual({ dgram: 'sent', stream: 'sent' });
      }
    });
  });

  it('runs unprivileged: no capabilities, no new privileges, seccomp, no nested user namespace, no mounts', async () => {
    const data = ok<{ uid: number; groups: number[]; status: Record<string, string>; unshare_user: [number, number]; mount: number }>(
      await engine.call('py.attack', { attack: 'identity' }),
    );
    if (asRoot) expect(data.uid).not.toBe(0);
    expect(data.groups).toEqual([]);
    expect(data.status.CapEff).toBe('0000000000000000');
    expect(data.status.CapPrm).toBe('0000000000000000');
    expect(data.status.CapBnd).toBe('0000000000000000');
    expect(data.status.NoNewPrivs).toBe('1');
    expect(data.status.Seccomp).toBe('2');
    expect(data.unshare_user[0]).toBe(-1);
    expect(data.mount).toBe(-1);
  });

  it('has a fresh, size-limited /tmp of its own', async () => {
    const data = ok<{ tmp_before: string[]; marker_existed: boolean; big_error: number }>(await engine.call('py.attack', { attack: 'tmp' }));
    expect(data.tmp_before).toEqual([]);
    expect(data.marker_existed).toBe(false);
    expect(data.big_error).toBeGreaterThan(0);
  });

  it('zombies and children are gone with the call’s namespace', async () => {
    ok(await engine.call('py.attack', { attack: 'zombies' }));
    expect((await runnerStatus(engine, 'py-runner'))?.isolation).toBe(mode);
  });
});

describe.runIf(local)('Python runner availability', () => {
  it('a missing interpreter is a clear MISCONFIGURED (not retryable), not a crash', async () => {
    const project = copyFixtureProject('python');
    const engine = await openEngine(project, { runners: [new PythonRunner({ python: '/nonexistent/bin/python3' })] });
    try {
      const error = failed(await engine.call('py.echo', {}));
      expect(error.code).toBe('MISCONFIGURED');
      expect(error.retryable).toBe(false);
      expect(error.message).toMatch(/\/nonexistent\/bin\/python3 was not found/);
      expect(error.message).toMatch(/arium\.json/);
      const status = await engine.status();
      expect(status.runners['py-runner']?.available).toBe(false);
    } finally {
      await engine.close();
      project.remove();
    }
  });

  it('an interpreter older than the harness needs is a clear MISCONFIGURED naming both versions', async () => {
    const project = copyFixtureProject('python');
    // Answers the engine's probe as a Python 3.8 would (3.8 has no socket.send_fds, which the server needs).
    const fake = join(project.dir, 'python3.8');
    const facts = { executable: fake, version: '3.8.18', roots: [project.dir], stdlib: project.dir };
    writeFileSync(fake, `#!/bin/sh\necho '${JSON.stringify(facts)}'\n`, { mode: 0o755 });
    const engine = await openEngine(project, { runners: [new PythonRunner({ python: fake })] });
    try {
      const error = failed(await engine.call('py.echo', {}));
      expect(error.code).toBe('MISCONFIGURED');
      expect(error.message).toMatch(/is Python 3\.8\.18; Python tools need 3\.9 or later/);
    } finally {
      await engine.close();
      project.remove();
    }
  });

  it('a numeric option that is not a finite number of at least 0 is refused when the runner is made, naming it', () => {
    for (const [options, shown] of [
      [{ compileWaitMs: Number.NaN }, 'compileWaitMs must be a finite number of at least 0; got NaN'],
      [{ warm: -1 }, 'warm must be a finite number of at least 0; got -1'],
      [{ tmpMb: Number.POSITIVE_INFINITY }, 'tmpMb must be a finite number of at least 0; got Infinity'],
      [{ processes: '32' as unknown as number }, 'processes must be a finite number of at least 0; got 32'],
    ] as const) {
      expect(() => new PythonRunner(options)).toThrow(new RangeError(`PythonRunner option ${shown}`));
    }
    expect(() => new PythonRunner({ compileWaitMs: 0, warm: 0, servers: 1 })).not.toThrow();
  });

  it('strict refuses to run Python tools without namespace isolation', async () => {
    const project = copyFixtureProject('python');
    const engine = await openEngine(project, { runners: [new PythonRunner({ isolation: 'rlimits', strict: true })] });
    try {
      const error = failed(await engine.call('py.echo', {}));
      expect(error.code).toBe('MISCONFIGURED');
      expect(error.message).toMatch(/strict/);
      const status = await engine.status();
      expect(status.runners['py-runner']).toMatchObject({ available: false, isolation: 'rlimits', namespaces: false, strict: true });
    } finally {
      await engine.close();
      project.remove();
    }
  });

  it('reads "python" and "strict" from arium.json', async () => {
    const project = copyFixtureProject('python');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(`${project.dir}/arium.json`, JSON.stringify({ python: 'no-such-python3', strict: true }));
    const engine = await openEngine(project);
    try {
      const error = failed(await engine.call('py.echo', {}));
      expect(error.code).toBe('MISCONFIGURED');
      expect(error.message).toMatch(/no-such-python3 was not found on PATH/);
    } finally {
      await engine.close();
      project.remove();
    }
  });
});
