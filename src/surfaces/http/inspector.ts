import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { errorEnvelope } from './envelope.js';

/**
 * The inspector's page and assets (built by Vite from `inspector/` into `dist/inspector/`, shipped in
 * the package): served at `/` for the default project and at `/p/<project>/` for the others. The page
 * holds no data; everything it shows comes from the API, which keeps the gateway's key rule, so the
 * page and its assets are served without the key (a browser cannot send a header when it navigates).
 */

/** Every request the page makes goes to this server: no CDN, no fonts, no frames. */
export const INSPECTOR_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** The built inspector of this installation: `dist/inspector` next to the package's package.json. */
export function builtInspector(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'arium') {
          const built = join(dir, 'dist', 'inspector');
          return existsSync(join(built, 'index.html')) ? built : null;
        }
      } catch {}
    }
    const parent = dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

/** Whether a request is for the page or its assets (public: see above). */
export function isInspectorAsset(method: string, url: string): boolean {
  if (method !== 'GET' && method !== 'HEAD') return false;
  const path = url.split('?')[0] as string;
  // Asset names are plain: a path that could be decoded or resolved into another route is not one.
  if (path.includes('..') || path.includes('%') || path.includes('\\')) return false;
  return path === '/' || /^\/assets\/[\w.-]+$/.test(path) || /^\/p\/[^/]+\/?$/.test(path);
}

export async function registerInspector(app: FastifyInstance, given: string | null): Promise<void> {
  const dir = given !== null && existsSync(join(given, 'index.html')) ? given : null;
  if (dir === null) {
    const missing = () =>
      errorEnvelope(
        'UNAVAILABLE',
        'The inspector is not built in this installation: run `npm run build` in the Arium folder, then restart `arium serve`',
        {
          stage: 'transport',
        },
      );
    app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.code(503).send(missing()));
    app.get('/p/:project/', { schema: { hide: true } }, async (_request, reply) => reply.code(503).send(missing()));
    return;
  }
  // Asset names carry a content hash, so they never change under the same name.
  await app.register(fastifyStatic, {
    root: join(dir, 'assets'),
    prefix: '/assets/',
    immutable: true,
    maxAge: '365d',
    index: false,
    wildcard: true,
    setHeaders: (reply) => {
      reply.header('x-content-type-options', 'nosniff');
    },
  });
  const page = readFileSync(join(dir, 'index.html'));
  const sendPage = async (_request: unknown, reply: FastifyReply) =>
    reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', INSPECTOR_CSP)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('cache-control', 'no-cache')
      .send(page);
  app.get('/', { schema: { hide: true } }, sendPage);
  app.get('/p/:project', { schema: { hide: true } }, async (request, reply) =>
    reply.redirect(`/p/${encodeURIComponent((request.params as { project: string }).project)}/`),
  );
  app.get('/p/:project/', { schema: { hide: true } }, sendPage);
}
