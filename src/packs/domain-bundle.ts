import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { PackError } from './errors.js';
import { checkManifest, type PackManifest, parseManifestFile } from './manifest.js';

interface DomainTool {
  tool_id?: unknown;
  transport?: { type?: unknown; base_url?: unknown; endpoint?: unknown };
  timeout_sec?: unknown;
  egress_allowlist?: unknown;
}

/**
 * Reads an AX domain bundle (`manifest.yaml` with `domain_id`, `version`, `tools`, and `policies.yaml`)
 * as a pack manifest. What maps: `domain_id` → name, `version` → version, a tool's `egress_allowlist`
 * → the `net.fetch` permission, `permissions:` / `secrets:` (Arium's own keys, which a bundle may add) as
 * they are. What does not is returned as notes, which `arium add` shows: HTTP transports, per-tool
 * concurrency, egress host lists, logging (README "Packs" has the table).
 */
export async function fromDomainBundle(dir: string): Promise<{ manifest: PackManifest; file: string; notes: string[] }> {
  const raw = await parseManifestFile(join(dir, 'manifest.yaml'), 'manifest.yaml');
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || !('domain_id' in raw)) {
    throw new PackError(
      'MANIFEST',
      'manifest.yaml is not a domain bundle manifest (no domain_id:); a pack manifest is arium-pack.yaml with name, version, permissions and secrets',
    );
  }
  const bundle = raw as { domain_id: unknown; version?: unknown; tools?: unknown; permissions?: unknown; secrets?: unknown; description?: unknown };
  if (bundle.tools !== undefined && !Array.isArray(bundle.tools))
    throw new PackError('MANIFEST', 'manifest.yaml: /tools must be a list of tools (- tool_id: …)');
  const tools = (bundle.tools ?? []) as DomainTool[];
  const notes: string[] = [];
  const permissions = Array.isArray(bundle.permissions) ? [...(bundle.permissions as string[])] : [];
  tools.forEach((tool, i) => {
    if (typeof tool !== 'object' || tool === null || typeof tool.tool_id !== 'string') {
      throw new PackError('MANIFEST', `manifest.yaml: /tools/${i} needs a tool_id (a string such as "firecrawl.crawl")`);
    }
    const egress = Array.isArray(tool.egress_allowlist) ? (tool.egress_allowlist as unknown[]) : [];
    if (egress.length > 0) {
      if (!permissions.includes('net.fetch')) permissions.push('net.fetch');
      notes.push(`${tool.tool_id}: egress_allowlist ${egress.join(', ')} maps to net.fetch, which Arium grants without a host list`);
    }
    const transport = tool.transport;
    if (transport && transport.type === 'http') {
      notes.push(
        `${tool.tool_id}: its HTTP worker (${String(transport.base_url ?? '')}${String(transport.endpoint ?? '')}) is not started by a pack; serve it with an arium.json "providers" entry of kind "http" whose "manifest" is "packs/${String(bundle.domain_id).toLowerCase()}/manifest.yaml" (README, HTTP tool workers)`,
      );
    }
  });
  if (existsSync(join(dir, 'policies.yaml'))) {
    const policies = await parseManifestFile(join(dir, 'policies.yaml'), 'policies.yaml');
    if (typeof policies !== 'object' || policies === null || Array.isArray(policies))
      throw new PackError('MANIFEST', 'policies.yaml must hold a mapping (concurrency:, timeouts:, network:, logging:)');
    const p = policies as Record<string, Record<string, unknown> | undefined>;
    if (p.network?.default_egress_policy !== undefined && p.network.default_egress_policy !== 'deny') {
      throw new PackError(
        'MANIFEST',
        `policies.yaml: /network/default_egress_policy is "${String(p.network.default_egress_policy)}"; Arium denies egress unless net.fetch is granted, so a pack can only say "deny"`,
      );
    }
    if (p.concurrency)
      notes.push('policies.yaml concurrency: not mapped; set arium.json policy.concurrency and policy.tool_concurrency for the project');
    if (p.timeouts) notes.push('policies.yaml timeouts: not mapped; each tool definition sets its own limits.timeout_ms');
    if (p.logging) notes.push('policies.yaml logging: not mapped; Arium reports every call as events and in the audit log');
  }
  const name = typeof bundle.domain_id === 'string' ? bundle.domain_id.toLowerCase() : bundle.domain_id;
  const manifest = checkManifest(
    {
      name,
      version: bundle.version === undefined ? undefined : String(bundle.version),
      ...(typeof bundle.description === 'string' ? { description: bundle.description } : {}),
      permissions,
      ...(bundle.secrets !== undefined ? { secrets: bundle.secrets } : {}),
    },
    'manifest.yaml (domain bundle)',
  );
  return { manifest, file: 'manifest.yaml', notes };
}
