import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  type LoggingLevel,
  McpError,
  ReadResourceRequestSchema,
  type ReadResourceResult,
  type Resource,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { PendingApproval } from '../../approvals/gate.js';
import type { Engine } from '../../engine.js';
import type { ErrorInfo } from '../../errors.js';
import { ToolFailure } from '../../errors.js';
import type { ToolResultEvent } from '../../events.js';
import { DEFAULT_GATEWAY_LIMITS } from '../../limits.js';
import type { LogLine, Progress } from '../../result.js';
import { SurfaceAccess } from '../access.js';
import { clientCaller } from './caller.js';
import type { SurfaceProfile } from './profile.js';
import { servePrompts } from './prompts.js';
import { Subscriptions } from './subscriptions.js';
import { mcpTool } from './tool-shape.js';

/**
 * Arium as an MCP server (the official SDK's low-level `Server`: tools keep the JSON Schemas their
 * definitions give, which the high-level API would want as zod). Every call goes through
 * `engine.call`, so results, errors, permissions and events are those of every other surface.
 */

export interface McpServerOptions {
  /** Which tools this client sees and may call, and the grants its calls get (from arium.json, never the client). */
  profile?: SurfaceProfile;
  /**
   * The surface calls come from, in events, approvals and the audit log: the caller is this, then the
   * client's name from its `initialize` (`mcp:claude-code`; caller.ts). Default `mcp`.
   */
  caller?: string;
  /** How often a call that asked for progress hears it, in milliseconds. Default 1000. */
  progressMs?: number;
  /** The version the server reports. */
  version?: string;
  /**
   * A call that needs a person's approval, from a client that cannot be asked (no `elicitation`
   * capability): `wait` (the gateway's `/mcp`) answers the client at once that the approval is pending
   * and how to give it, and the call goes on waiting for an answer over HTTP; `deny` (default: `arium
   * mcp` over stdio, where nothing else can answer) ends the call as `APPROVAL_DENIED` at once, saying why.
   * A client with `elicitation` is asked, approve or deny, either way.
   */
  pendingApprovals?: 'wait' | 'deny';
  /** Resource subscriptions the client may hold (default `mcp_subscriptions` of limits.ts). */
  maxSubscriptions?: number;
}

export interface AriumMcpServer {
  readonly server: Server;
  /** The resource subscriptions its client holds. */
  readonly subscriptions: Subscriptions;
  /** Stops listening to the engine (the transport is closed by whoever opened it). */
  detach(): void;
}

const LOG_LEVELS: Record<LogLine['level'], LoggingLevel> = {
  log: 'info',
  info: 'info',
  warn: 'warning',
  error: 'error',
  stdout: 'info',
  stderr: 'warning',
};

function errorResult(error: ErrorInfo): CallToolResult {
  const { code, stage, message, retryable } = error;
  const shown: Record<string, unknown> = { code, stage, message, retryable };
  if (error.details !== undefined) shown.details = error.details;
  return { isError: true, content: [{ type: 'text', text: JSON.stringify({ error: shown }) }], structuredContent: { error: shown } };
}

/** The answer to a client that cannot be asked, while its call waits for an answer from elsewhere. */
function pendingResult(approval: PendingApproval): CallToolResult {
  const text =
    `Approval pending: ${approval.tool} needs a person's approval before it runs (run ${approval.run_id}). ` +
    `It has not run. Approve or deny it with POST /v1/approvals/${approval.run_id} on this gateway ` +
    `({"decision": "approve" or "deny", "by": "<name>"}) or \`arium approve ${approval.run_id}\` / \`arium deny ${approval.run_id}\`. ` +
    `It waits until ${approval.expires_at}, then fails as APPROVAL_TIMEOUT. Once approved it runs once: do not call it again; ` +
    `its result is in the event stream (GET /v1/events), not in this answer.`;
  const shown = { approval: { status: 'pending', run_id: approval.run_id, tool: approval.tool, expires_at: approval.expires_at } };
  return {
    isError: true,
    content: [{ type: 'text', text }],
    structuredContent: shown,
    _meta: { 'arium/run_id': approval.run_id, 'arium/trace_id': approval.trace_id },
  };
}

export function createMcpServer(engine: Engine, options: McpServerOptions = {}): AriumMcpServer {
  const access = new SurfaceAccess(engine, options.profile, 'mcp');
  const visible = access.offered;
  const listed = access.listed;
  const surface = options.caller ?? 'mcp';
  // Known once the client has sent initialize, which comes before any call.
  const caller = () => clientCaller(surface, server.getClientVersion()?.name);
  const grants = options.profile?.grants;
  const prefix = `arium://${engine.project}/`;
  const server = new Server(
    { name: `arium-${engine.project}`, version: options.version ?? '0.1.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
      },
      instructions: `Tools of the Arium project "${engine.project}". Each call runs sandboxed; failures come back as results with isError and a normalized error (code, stage, message, retryable).`,
    },
  );

  // With search discovery only the discovery tools are listed; the others stay offered (found, called).
  const tools = () => engine.tools().filter((t) => listed(t.id));

  // Whether a name is a tool's id, until the registry changes: `engine.tool` copies the whole definition,
  // which cost 4% of a call over HTTP. Bounded, since the names come from the client.
  const known = new Map<string, boolean>();
  const isTool = (id: string): boolean => {
    let found = known.get(id);
    if (found === undefined) {
      found = engine.tool(id) !== undefined;
      if (known.size < 1000) known.set(id, found);
    }
    return found;
  };

  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: tools().flatMap((t) => mcpTool(t) ?? []) }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
    const id = request.params.name;
    // A name that is no offered tool's id may be a capability: the one offered tool that provides it
    // and that these grants may call runs (AMBIGUOUS when several do). An id always wins.
    const offered = visible(id) && isTool(id);
    const capability = !offered && engine.tools().some((tool) => visible(tool.id) && tool.provides?.includes(id));
    if (!offered && !capability) {
      // A tool the profile hides is as unknown as one that does not exist: nothing tells them apart.
      return errorResult({
        type: 'ToolError',
        tool: id,
        stage: 'validation',
        code: 'UNKNOWN_TOOL',
        message: `No tool "${id}" is offered here; tools/list names the ones that are`,
        retryable: false,
      });
    }
    const token = request.params._meta?.progressToken;
    let timer: NodeJS.Timeout | undefined;
    let onProgress: ((progress: Progress) => void) | undefined;
    if (token !== undefined) {
      // A tool that tells no progress of its own: the client hears that the call is still running.
      const started = Date.now();
      let ticks = 0;
      timer = setInterval(() => {
        ticks++;
        void extra
          .sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: ticks, message: `running for ${Math.round((Date.now() - started) / 1000)} s` },
          })
          .catch(() => {});
      }, options.progressMs ?? 1000);
      // A tool that tells its progress (a provider's upstream) replaces the ticks; MCP's progress must
      // grow, so it counts on from the ticks already sent.
      let base: number | null = null;
      onProgress = (progress) => {
        if (timer) clearInterval(timer);
        timer = undefined;
        base ??= ticks;
        void extra
          .sendNotification({
            method: 'notifications/progress',
            params: {
              progressToken: token,
              progress: base + progress.progress,
              ...(progress.total !== undefined ? { total: base + progress.total } : {}),
              ...(progress.message !== undefined ? { message: progress.message } : {}),
            },
          })
          .catch(() => {});
      };
    }
    let result: Awaited<ReturnType<Engine['call']>>;
    let waiting: ((pending: PendingApproval) => void) | undefined;
    const pending = new Promise<PendingApproval>((resolve) => {
      waiting = resolve;
    });
    const onApproval = (approval: PendingApproval) => {
      if (server.getClientCapabilities()?.elicitation) void ask(approval, extra.requestId, extra.signal);
      else if (options.pendingApprovals === 'wait') waiting?.(approval);
      else
        engine.deny(approval.run_id, {
          by: caller(),
          reason: `approval is required, and this MCP client cannot be asked (it has no elicitation capability); use a client that supports elicitation, or serve the project with \`arium serve\` and call it there, where POST /v1/approvals/{run_id} or \`arium approve\` answers`,
        });
    };
    // Each log line goes to the client as the tool writes it (secrets scrubbed by the engine), so a long
    // call shows what it is doing; the notifications keep their order, as the SDK sends them in turn.
    let logged: Promise<void> = Promise.resolve();
    const onLog = (line: LogLine) => {
      logged = logged.then(() =>
        server.sendLoggingMessage({ level: LOG_LEVELS[line.level] ?? 'info', logger: id, data: line.message }, extra.sessionId).catch(() => {}),
      );
    };
    try {
      const call = engine.call(capability ? { capability: id } : id, request.params.arguments ?? {}, {
        signal: extra.signal,
        caller: caller(),
        onLog,
        ...(onProgress ? { onProgress } : {}),
        // What a capability may resolve to, and what a code.run program, tools.search and tools.call may reach.
        offered: visible,
        onApproval,
        ...(grants ? { grants } : {}),
      });
      const first = await Promise.race([call, pending]);
      // The client cannot be asked and someone else may answer: it hears now, and the call waits on.
      if (!('ok' in first)) return pendingResult(first);
      result = first;
    } finally {
      if (timer) clearInterval(timer);
    }
    // Every line was sent as it came: the result goes out after the last of them.
    await logged;
    if (!result.ok) return errorResult(result.error);
    const data = result.data;
    const text = JSON.stringify(data) ?? 'null';
    const structured = data !== null && typeof data === 'object' && !Array.isArray(data);
    return {
      content: [{ type: 'text', text }],
      ...(structured ? { structuredContent: data as Record<string, unknown> } : {}),
      _meta: {
        'arium/run_id': result.meta.run_id,
        'arium/trace_id': result.meta.trace_id,
        'arium/duration_ms': result.meta.duration_ms,
        ...(capability ? { 'arium/tool': result.meta.tool } : {}),
      },
    };
  });

  /** Asks the client's user to approve or deny; no answer or a failed request leaves the approval to other surfaces and its timeout. */
  const ask = async (approval: PendingApproval, requestId: string | number, signal: AbortSignal) => {
    const input = JSON.stringify(approval.input) ?? '';
    try {
      const answer = await server.elicitInput(
        {
          mode: 'form',
          message: `Approve ${approval.tool} with input ${input.length > 2000 ? `${input.slice(0, 2000)}…` : input}? (run ${approval.run_id}${approval.caller ? `, asked by ${approval.caller}` : ''})`,
          requestedSchema: {
            type: 'object',
            properties: {
              decision: { type: 'string', title: 'Decision', enum: ['approve', 'deny'] },
              reason: { type: 'string', title: 'Reason (for a denial)' },
            },
            required: ['decision'],
          },
        },
        { relatedRequestId: requestId, signal, timeout: Math.max(1, Date.parse(approval.expires_at) - Date.now()) },
      );
      const by = caller();
      if (answer.action === 'accept' && answer.content?.decision === 'approve') {
        engine.approve(approval.run_id, { by });
      } else {
        const given = answer.action === 'accept' && typeof answer.content?.reason === 'string' ? answer.content.reason : '';
        engine.deny(approval.run_id, { by, reason: given || (answer.action === 'accept' ? 'denied' : `the client answered ${answer.action}`) });
      }
    } catch {
      // Answered elsewhere first (ALREADY_RESOLVED), or the client failed to ask: nothing more to do here.
    }
  };

  server.setRequestHandler(ListResourceTemplatesRequestSchema, () => ({
    resourceTemplates: [
      {
        uriTemplate: `${prefix}vfs/{+path}`,
        name: 'vfs-file',
        title: 'A file of the project’s VFS',
        description: 'Text when the file is UTF-8, else a base64 blob; read through fs.read, so grants and the output cap apply',
      },
      {
        uriTemplate: `${prefix}diff/{from}/{to}`,
        name: 'vfs-diff',
        title: 'A diff between two snapshots (or "live")',
        description: 'Only the files the grants let this client read; the others are left out',
        mimeType: 'application/json',
      },
    ],
  }));

  server.setRequestHandler(ListResourcesRequestSchema, async () => {
    const resources: Resource[] = [
      { uri: `${prefix}snapshots`, name: 'snapshots', title: 'The snapshot log (needs vfs.read)', mimeType: 'application/json' },
      {
        uri: `${prefix}code/types`,
        name: 'code-types',
        title: 'TypeScript declarations of the tools this client may call (code.types)',
        mimeType: 'text/plain',
      },
    ];
    const listed = await engine.call('fs.list', { path: '/', recursive: true, limit: 1000 }, { caller: caller(), ...(grants ? { grants } : {}) });
    if (listed.ok) {
      for (const entry of (listed.data as { entries: Array<{ path: string; type: string; size?: number }> }).entries) {
        if (entry.type !== 'file') continue;
        resources.push({ uri: `${prefix}vfs${encodePath(entry.path)}`, name: entry.path, ...(entry.size !== undefined ? { size: entry.size } : {}) });
      }
    }
    return { resources };
  });

  server.setRequestHandler(ReadResourceRequestSchema, async (request): Promise<ReadResourceResult> => {
    const uri = request.params.uri;
    const rest = uri.startsWith(prefix) ? uri.slice(prefix.length) : null;
    if (rest === 'snapshots') {
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(refused(uri, () => access.snapshots())) }] };
    }
    if (rest === 'code/types') {
      // A call of code.types with this client's grants and offered tools: the same text the tool gives it.
      const types = await engine.call('code.types', {}, { caller: caller(), offered: visible, ...(grants ? { grants } : {}) });
      if (!types.ok) throw new McpError(ErrorCode.InvalidParams, `${uri}: ${types.error.code}: ${types.error.message}`);
      return { contents: [{ uri, mimeType: 'text/plain', text: (types.data as { declarations: string }).declarations }] };
    }
    if (rest?.startsWith('diff/')) {
      const [from, to, ...more] = rest.slice(5).split('/').map(decodeURIComponent);
      if (!from || !to || more.length > 0) throw new McpError(ErrorCode.InvalidParams, `A diff resource is ${prefix}diff/{from}/{to} (got ${uri})`);
      try {
        const found = engine.diff(from, to, { visible: (path) => access.mayRead(path) });
        return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(found) }] };
      } catch (error) {
        throw new McpError(ErrorCode.InvalidParams, `Cannot diff ${from} → ${to}: ${(error as Error).message}`);
      }
    }
    if (rest?.startsWith('vfs/')) {
      const path = decodePath(rest.slice(3), uri);
      const read = await engine.call('fs.read', { path, encoding: 'base64' }, { caller: caller(), ...(grants ? { grants } : {}) });
      if (!read.ok) throw new McpError(ErrorCode.InvalidParams, `${uri}: ${read.error.code}: ${read.error.message}`);
      const bytes = Buffer.from((read.data as { content: string }).content, 'base64');
      const text = utf8(bytes);
      return { contents: [text === null ? { uri, blob: bytes.toString('base64') } : { uri, mimeType: 'text/plain', text }] };
    }
    throw new McpError(
      ErrorCode.InvalidParams,
      `Unknown resource ${uri}: resources of this server start with ${prefix} (vfs/…, diff/…, snapshots, code/types)`,
    );
  });

  // A call that changes a subscribed path (or a folder above it, or a file below a subscribed folder)
  // notifies it; the index finds those without looking at the others.
  const subscriptions = new Subscriptions(options.maxSubscriptions ?? DEFAULT_GATEWAY_LIMITS.mcp_subscriptions);
  server.setRequestHandler(SubscribeRequestSchema, (request) => {
    const uri = request.params.uri;
    if (!uri.startsWith(`${prefix}vfs/`))
      throw new McpError(ErrorCode.InvalidParams, `Only VFS paths (${prefix}vfs/…) can be subscribed to, not ${uri}`);
    const path = decodePath(uri.slice(prefix.length + 3), uri);
    // A notification that a path changed tells about it: only paths this client may read.
    if (!access.mayRead(path)) throw new McpError(ErrorCode.InvalidParams, `${uri}: DENIED: vfs.read on ${path} is not granted to this client`);
    subscriptions.add(uri, path);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  const onResult = (event: ToolResultEvent) => {
    if (!event.vfs || subscriptions.size === 0) return;
    const changed = [...event.vfs.written, ...event.vfs.deleted, ...event.vfs.created_dirs, ...event.vfs.moved.flatMap((m) => [m.from, m.to])];
    for (const uri of subscriptions.affected(changed)) void server.sendResourceUpdated({ uri }).catch(() => {});
  };
  const onRegistry = () => {
    known.clear();
    void server.sendToolListChanged().catch(() => {});
  };
  engine.events.on('result', onResult);
  engine.events.on('registry', onRegistry);
  const stopPrompts = servePrompts(server, engine, visible);

  return {
    server,
    subscriptions,
    detach: () => {
      engine.events.off('result', onResult);
      engine.events.off('registry', onRegistry);
      stopPrompts();
    },
  };
}

/** `read()`, with a refusal (a permission the profile lacks) as the resource's error. */
function refused<T>(uri: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof ToolFailure) throw new McpError(ErrorCode.InvalidParams, `${uri}: ${error.code}: ${error.message}`);
    throw error;
  }
}

/** A VFS path as it appears in a resource URI: each segment percent-encoded, `/` kept. */
function encodePath(path: string): string {
  return path
    .split('/')
    .map((segment) => encodeURIComponent(segment))
    .join('/');
}

function decodePath(encoded: string, uri: string): string {
  try {
    const path = decodeURIComponent(encoded);
    if (!path.startsWith('/')) throw new Error('not absolute');
    return path;
  } catch {
    throw new McpError(ErrorCode.InvalidParams, `${uri} does not name a VFS path (expected ${'arium://<project>/vfs/<path>'})`);
  }
}

const decoder = new TextDecoder('utf-8', { fatal: true });
function utf8(bytes: Buffer): string | null {
  try {
    return decoder.decode(bytes);
  } catch {
    return null;
  }
}
