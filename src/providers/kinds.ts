/**
 * The kinds of provider an arium.json `providers` entry may name, by their key (`"mcp": {…}`). Each
 * kind registers itself here with one line; the engine knows no kind otherwise.
 */
import { httpProviderKind } from './http.js';
import { mcpProviderKind } from './mcp.js';
import { natsProviderKind } from './nats.js';
import type { ProviderKind } from './provider.js';

export const PROVIDER_KINDS: Map<string, ProviderKind> = new Map<string, ProviderKind>([
  [mcpProviderKind.key, mcpProviderKind as ProviderKind],
  [httpProviderKind.key, httpProviderKind as ProviderKind],
  [natsProviderKind.key, natsProviderKind as ProviderKind],
]);
