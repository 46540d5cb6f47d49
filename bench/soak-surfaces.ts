import { type ChildProcess, fork } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/**
 * The soak benchmark's three ways into one engine: the library API (over IPC to the process that holds
 * the engine, bench/soak-host.ts), MCP over Streamable HTTP (the SDK's client) and the HTTP gateway.
 * Every call ends as one `Answer`: the tool's data, the engine's error code, or `transport` when the
 * surface itself could not deliver the call or its answer (the engine process gone, a reset connection).
 */

export type Surface = 'library' | 'mcp' | 'http';
export type Answer =
  | { kind: 'ok'; data: Record<string, unknown> }
  | { kind: 'error'; code: string; message: string }
  | { kind: 'transport'; message: string };

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

/** The engine's process: started, killed with SIGKILL and started again on the same port. */
export class EngineHost {
  readonly #script: string;
  readonly #args: string[];
  #child: ChildProcess | null = null;
  #next = 1;
  readonly #pending = new Map<number, Pending>();
  #up: Promise<void> = Promise.resolve();
  #pid = 0;
  starts = 0;

  constructor(script: string, workspace: string, project: string, port: number) {
    this.#script = script;
    this.#args = [workspace, project, String(port)];
  }

  get pid(): number {
    return this.#pid;
  }

  /** Resolves when the engine answers (at once while it runs). */
  get up(): Promise<void> {
    return this.#up;
  }

  start(): Promise<void> {
    this.#up = new Promise<void>((resolve, reject) => {
      const child = fork(this.#script, this.#args, {
        execArgv: ['--no-node-snapshot', '--expose-gc'],
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      });
      this.#child = child;
      let stderr = '';
      child.stderr?.on('data', (chunk) => {
        stderr = (stderr + String(chunk)).slice(-4000);
      });
      child.on('message', (message: { ready?: boolean; pid?: number; id?: number; value?: unknown; error?: string }) => {
        if (message.ready) {
          this.#pid = message.pid as number;
          this.starts++;
          resolve();
          return;
        }
        const pending = this.#pending.get(message.id as number);
        if (!pending) return;
        this.#pending.delete(message.id as number);
        if (message.error !== undefined) pending.reject(new Error(message.error));
        else pending.resolve(message.value);
      });
      child.once('exit', (code, signal) => {
        if (this.#child === child) this.#child = null;
        for (const [id, pending] of this.#pending) {
          this.#pending.delete(id);
          pending.reject(new Error(`the engine process exited (${signal ?? code})`));
        }
        reject(new Error(`the engine process exited before it was ready (${signal ?? code}): ${stderr}`));
      });
    });
    return this.#up;
  }

  /** SIGKILL; calls sent to it and not answered fail as transport errors. */
  kill(): Promise<void> {
    const child = this.#child;
    if (!child) return Promise.resolve();
    this.#up = new Promise(() => {}); // callers wait for start()
    return new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  }

  /** Closes the engine as its owner would (the IPC channel closing), and waits for the process to end. */
  stop(): Promise<void> {
    const child = this.#child;
    if (!child) return Promise.resolve();
    return new Promise((resolve) => {
      const force = setTimeout(() => child.kill('SIGKILL'), 15_000);
      child.once('exit', () => {
        clearTimeout(force);
        resolve();
      });
      child.disconnect();
    });
  }

  ask<T>(request: Record<string, unknown>): Promise<T> {
    const child = this.#child;
    if (!child?.connected) return Promise.reject(new Error('the engine process is not running'));
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      child.send({ ...request, id }, (error) => {
        if (!error) return;
        this.#pending.delete(id);
        reject(error);
      });
    });
  }
}

export async function callLibrary(host: EngineHost, tool: string, input: Record<string, unknown>): Promise<Answer> {
  let result: { ok: boolean; data?: Record<string, unknown>; error?: { code: string; message: string } };
  try {
    result = await host.ask({ op: 'call', tool, input });
  } catch (error) {
    return { kind: 'transport', message: (error as Error).message };
  }
  if (result.ok) return { kind: 'ok', data: result.data ?? {} };
  return { kind: 'error', code: result.error?.code ?? '?', message: result.error?.message ?? '' };
}

export async function callHttp(base: string, tool: string, input: Record<string, unknown>): Promise<Answer> {
  let body: { ok?: boolean; output?: Record<string, unknown>; error?: { code: string; message: string } };
  try {
    const response = await fetch(`${base}/v1/tools/${tool}:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input }),
    });
    body = (await response.json()) as typeof body;
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause;
    return { kind: 'transport', message: `${(error as Error).message}${cause?.code ? ` (${cause.code})` : ''}` };
  }
  if (body.ok) return { kind: 'ok', data: body.output ?? {} };
  return { kind: 'error', code: body.error?.code ?? '?', message: body.error?.message ?? JSON.stringify(body) };
}

/** MCP sessions over Streamable HTTP, used in turn; all opened again after the engine restarts. */
export class McpPool {
  readonly #url: URL;
  readonly #size: number;
  #clients: Client[] = [];
  #turn = 0;
  sessions = 0;

  constructor(base: string, size: number) {
    this.#url = new URL(`${base}/mcp`);
    this.#size = size;
  }

  async open(): Promise<void> {
    await this.close();
    const clients: Client[] = [];
    for (let i = 0; i < this.#size; i++) {
      const client = new Client({ name: `soak-${i}`, version: '1' });
      await client.connect(new StreamableHTTPClientTransport(this.#url));
      clients.push(client);
      this.sessions++;
    }
    this.#clients = clients;
  }

  async close(): Promise<void> {
    const clients = this.#clients;
    this.#clients = [];
    await Promise.all(clients.map((c) => c.close().catch(() => {})));
  }

  async call(tool: string, input: Record<string, unknown>): Promise<Answer> {
    const client = this.#clients[this.#turn++ % Math.max(1, this.#clients.length)];
    if (!client) return { kind: 'transport', message: 'no MCP session open' };
    let result: Awaited<ReturnType<Client['callTool']>>;
    try {
      result = await client.callTool({ name: tool, arguments: input });
    } catch (error) {
      return { kind: 'transport', message: (error as Error).message };
    }
    const structured = result.structuredContent as { error?: { code: string; message: string } } | undefined;
    if (result.isError) {
      return { kind: 'error', code: structured?.error?.code ?? '?', message: structured?.error?.message ?? JSON.stringify(result.content) };
    }
    if (structured) return { kind: 'ok', data: structured as Record<string, unknown> };
    const text = (result.content as Array<{ type: string; text?: string }>)[0]?.text;
    return { kind: 'ok', data: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  }
}
