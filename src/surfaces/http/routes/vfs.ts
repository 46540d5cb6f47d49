import { createHash } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { asText } from '../../../vfs/text-diff.js';
import { errorEnvelope, runEnvelope } from '../envelope.js';
import { ERROR_RESPONSES, failureStatus, send } from '../replies.js';
import { connectionSignal, header, tcpCaller } from '../request.js';
import { type RouteContext, servedOf } from './context.js';

/** The project's VFS: snapshots, diffs, restore, the tree and files of the live VFS or a snapshot, a run's changes. */

/** `stat=true` in a query string: the gateway's validator does not coerce types, so the flag is a word. */
const STAT_QUERY = { type: 'string', enum: ['true', 'false'], description: 'true: file list and counts only, no patches' } as const;

/** One file of a diff by its exact path (`path` is a glob, which has no escapes for `*` and `?`). */
const FILE_QUERY = { type: 'string', minLength: 1, description: 'Only this file: its exact path' } as const;

/** How much of a file `/v1/fs/read` returns as text. */
const FILE_TEXT_BYTES = 1024 * 1024;

/** Where the last whole UTF-8 character of `bytes` ends (a cut file ends inside one at most). */
function lastCharBoundary(bytes: Buffer): number {
  let end = bytes.length;
  // Step back over continuation bytes (10xxxxxx) to the lead byte of the cut character, and drop it.
  while (end > 0 && ((bytes[end - 1] as number) & 0xc0) === 0x80) end--;
  return end > 0 && (bytes[end - 1] as number) >= 0xc0 ? end - 1 : bytes.length;
}

/** The project folders of a workspace (those with a tools folder or an arium.json), by name. */
function workspaceProjects(workspace: string): string[] {
  let names: string[];
  try {
    names = readdirSync(workspace);
  } catch {
    return [];
  }
  const isProject = (name: string) => {
    for (const marker of ['tools', 'arium.json']) {
      try {
        statSync(join(workspace, name, marker));
        return true;
      } catch {}
    }
    return false;
  };
  return names.filter((name) => !name.startsWith('.') && isProject(name)).sort();
}

/**
 * Runs a builtin for a route that changes state (a snapshot, a restore), as a call from this
 * surface: offered by its profile, with its grants, through approvals, events and the audit log.
 */
async function runBuiltin(request: FastifyRequest, reply: FastifyReply, id: string, input: unknown, created = false): Promise<FastifyReply> {
  const { engine, grants, access } = servedOf(request);
  const traceId = header(request.headers['x-trace-id']);
  if (!access.offered(id)) {
    return send(
      reply,
      403,
      errorEnvelope('DENIED', `${request.method} ${request.routeOptions.url} runs ${id}, which surfaces.http.tools does not offer`, {
        stage: 'permission',
        toolId: id,
        traceId,
      }),
    );
  }
  const result = await engine.call(id, input, {
    caller: tcpCaller(request),
    signal: connectionSignal(request.raw.socket),
    ...(traceId ? { trace_id: traceId } : {}),
    ...(grants ? { grants } : {}),
  });
  if (result.ok) return send(reply, created ? 201 : 200, result.data);
  const status = failureStatus(result.error);
  if (status === 429) reply.header('retry-after', '1');
  return send(reply, status, runEnvelope(id, result));
}

export function vfsRoutes(scope: FastifyInstance, ctx: RouteContext): void {
  scope.get(
    '/v1/snapshots',
    {
      schema: {
        summary: 'The snapshot log, oldest first (needs vfs.read)',
        response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ snapshots: servedOf(request).access.snapshots() }),
  );

  scope.post(
    '/v1/snapshots',
    {
      schema: {
        summary: 'Save the live VFS as a snapshot: a call of vfs.snapshot (needs vfs.read on /, goes through approvals)',
        body: {
          type: ['object', 'null'],
          additionalProperties: false,
          properties: {
            label: { type: 'string', minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' },
            message: { type: 'string', maxLength: 2000 },
          },
        },
        headers: { type: 'object', properties: { 'x-trace-id': { type: 'string' } } },
        response: { 201: { description: 'The snapshot', type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => runBuiltin(request, reply, 'vfs.snapshot', request.body ?? {}, true),
  );

  scope.get(
    '/v1/diff',
    {
      schema: {
        summary: 'Compare snapshots or live (default: newest snapshot → live); files without vfs.read are left out',
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { from: { type: 'string' }, to: { type: 'string' }, path: { type: 'string' }, file: FILE_QUERY, stat: STAT_QUERY },
        },
      },
    },
    async (request) => {
      const q = request.query as { from?: string; to?: string; path?: string; file?: string; stat?: string };
      const { engine, access } = servedOf(request);
      return engine.diff(q.from, q.to, {
        visible: (path) => access.mayRead(path),
        ...(q.path ? { path: q.path } : {}),
        ...(q.file ? { file: q.file } : {}),
        ...(q.stat === 'true' ? { stat_only: true } : {}),
      });
    },
  );

  scope.post(
    '/v1/restore',
    {
      schema: {
        summary: 'Bring the live VFS back to a snapshot: a call of vfs.restore (needs vfs.read and vfs.write on /, goes through approvals)',
        body: {
          type: 'object',
          required: ['ref'],
          additionalProperties: false,
          properties: { ref: { type: 'string', minLength: 1, maxLength: 200 } },
        },
        headers: { type: 'object', properties: { 'x-trace-id': { type: 'string' } } },
        response: {
          200: { description: 'What was restored, and the snapshot that undoes it', type: 'object', additionalProperties: true },
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => runBuiltin(request, reply, 'vfs.restore', { snapshot: (request.body as { ref: string }).ref }),
  );

  scope.get('/v1/project', { schema: { summary: 'The project served here, and the projects of the workspace' } }, async (request) => {
    const { engine } = servedOf(request);
    return {
      project: engine.project,
      projects: workspaceProjects(ctx.options.workspace),
      read_only: engine.readOnly !== null,
      persist: engine.config.persist !== false && ctx.options.engineOptions?.persist !== false,
      change_log: ctx.inspector || ctx.options.engineOptions?.changeLog !== undefined,
    };
  });

  const TREE_QUERY = {
    type: 'object',
    required: ['path'],
    additionalProperties: false,
    properties: {
      path: { type: 'string', minLength: 1, description: 'An absolute VFS path' },
      at: { type: 'string', minLength: 1, description: '`live` (default) or a snapshot: id, prefix, label, `latest`' },
    },
  } as const;

  scope.get(
    '/v1/fs/list',
    {
      schema: {
        summary: 'The entries of one folder of the live tree or of a snapshot (folders first, then by name); needs vfs.read on it',
        querystring: TREE_QUERY,
        response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const q = request.query as { path: string; at?: string };
      const at = q.at ?? 'live';
      const { engine, access } = servedOf(request);
      const { entries } = access.tree(at).list(q.path);
      const sorted = [...entries].sort((a, b) =>
        a.type === b.type ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a.type === 'directory' ? -1 : 1,
      );
      return { at, path: engine.scrub(q.path), entries: sorted };
    },
  );

  scope.get(
    '/v1/fs/read',
    {
      schema: {
        summary: 'One file of the live tree or of a snapshot: text up to 1 MiB, or its size and hash; needs vfs.read on it',
        querystring: TREE_QUERY,
        response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const q = request.query as { path: string; at?: string };
      const at = q.at ?? 'live';
      const { engine, access } = servedOf(request);
      const bytes = access.tree(at).read(q.path);
      const cut = bytes.length > FILE_TEXT_BYTES;
      const head = cut ? bytes.subarray(0, FILE_TEXT_BYTES) : bytes;
      // A cut may split a character: the text is what decodes, the cut noted.
      const text = asText(head) ?? (cut ? asText(head.subarray(0, lastCharBoundary(head))) : null);
      return {
        at,
        path: engine.scrub(q.path),
        size: bytes.length,
        sha256: createHash('sha256').update(bytes).digest('hex'),
        binary: text === null,
        // Scrubbed as the beginning of a longer text: a secret the cut goes through is left out whole.
        text: text === null ? null : engine.scrub(text, { cut }),
        truncated: text !== null && cut,
      };
    },
  );

  scope.get(
    '/v1/runs/:run_id/diff',
    {
      schema: {
        summary: 'What one committed call changed in the VFS, while the change log still holds it; files without vfs.read are left out',
        params: { type: 'object', properties: { run_id: { type: 'string', maxLength: 200 } } },
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { path: { type: 'string' }, file: FILE_QUERY, stat: STAT_QUERY },
        },
      },
    },
    async (request, reply) => {
      const { run_id: runId } = request.params as { run_id: string };
      const q = request.query as { path?: string; file?: string; stat?: string };
      const { engine, access } = servedOf(request);
      const found = engine.changes(runId, {
        visible: (path) => access.mayRead(path),
        ...(q.path ? { path: q.path } : {}),
        ...(q.file ? { file: q.file } : {}),
        ...(q.stat === 'true' ? { stat_only: true } : {}),
      });
      if (found) return found;
      return send(
        reply,
        404,
        errorEnvelope(
          'NOT_FOUND',
          `No changes of run ${runId} are kept: it changed no file, failed, is older than what the change log holds, or this gateway keeps no change log`,
          { details: { run_id: runId } },
        ),
      );
    },
  );
}
