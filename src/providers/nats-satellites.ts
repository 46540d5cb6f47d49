import { SATELLITE_LIMITS } from '../limits.js';
import { type AnnouncedTool, NODE_ID, type SatelliteHeartbeat, type SatelliteSubjects, TOOL_NAME } from '../satellite/wire.js';
import type { ProviderOutcome, ProviderTool } from './provider.js';

/** A satellite as a provider last heard of it. */
interface Node {
  hb: SatelliteHeartbeat;
  /** Date.now() of its last heartbeat. */
  at: number;
  /** Forgotten past at + this. */
  timeoutMs: number;
}

/** Where a call goes: the tool's queue group (any of the interchangeable nodes) or one node's own subject. */
export type Route =
  | { subject: string; node: string | null; mode: 'explicit' | 'sole_eligible' | 'queue_group' }
  | { failure: Extract<ProviderOutcome, { ok: false }> };

/**
 * The satellites a provider hears, by their heartbeats, and what they offer. A satellite is forgotten
 * when it says it is leaving, or when no heartbeat came for `timeoutMs` (default three of its own
 * intervals). Satellites offering a tool with the same definition and version are interchangeable:
 * the tool's queue group balances calls across them. Satellites that offer a tool of one name with
 * different definitions or versions are not: a call must name the node unless only one is live.
 */
export class SatelliteDirectory {
  readonly #nodes = new Map<string, Node>();
  readonly #subjects: SatelliteSubjects;
  readonly #timeoutMs: number | null;
  readonly #changed: () => void;
  readonly #dropped: (node: string, why: string) => void;
  readonly #log: (level: 'info' | 'warn', message: string) => void;
  #sweep: NodeJS.Timeout | null = null;
  #listed: ProviderTool[] = [];
  /** Tools whose listed schema has the `node_id` the provider added: in their input it is routing, not data. */
  readonly #routedByInput = new Set<string>();
  #signature = '';
  /** Node ids whose refused heartbeats were already logged (logged once, not every beat). */
  readonly #refused = new Set<string>();

  constructor(
    subjects: SatelliteSubjects,
    timeoutMs: number | null,
    events: { changed: () => void; dropped: (node: string, why: string) => void; log: (level: 'info' | 'warn', message: string) => void },
  ) {
    this.#subjects = subjects;
    this.#timeoutMs = timeoutMs;
    this.#changed = events.changed;
    this.#dropped = events.dropped;
    this.#log = events.log;
  }

  /** A heartbeat (untrusted JSON, already free of `__proto__` keys). */
  heard(message: Record<string, unknown>): void {
    const checked = heartbeatOf(message);
    if (typeof checked === 'string') {
      const id = typeof message.node_id === 'string' ? message.node_id.slice(0, 64) : '?';
      if (!this.#refused.has(id) && this.#refused.size < SATELLITE_LIMITS.max_nodes) {
        this.#refused.add(id);
        this.#log('warn', `ignoring the heartbeats of satellite ${id}: ${checked}`);
      }
      return;
    }
    const hb = checked;
    if (hb.leaving) {
      // A satellite that leaves finishes the calls it has: only its tools go (its calls keep their watchdog).
      this.#forget(hb.node_id, 'it said it is leaving', false);
      return;
    }
    if (!this.#nodes.has(hb.node_id) && this.#nodes.size >= SATELLITE_LIMITS.max_nodes) {
      if (!this.#refused.has(hb.node_id))
        this.#log('warn', `ignoring satellite ${hb.node_id}: ${SATELLITE_LIMITS.max_nodes} satellites are live already`);
      this.#refused.add(hb.node_id);
      return;
    }
    this.#refused.delete(hb.node_id);
    this.#nodes.set(hb.node_id, { hb, at: Date.now(), timeoutMs: this.#timeoutMs ?? 3 * hb.interval_ms });
    this.#update();
  }

  tools(): ProviderTool[] {
    return this.#listed;
  }

  /** Whether `input.node_id` of a call of `tool` names its node (see withNodeId). */
  routedByInput(tool: string): boolean {
    return this.#routedByInput.has(tool);
  }

  /** The node serving a call it took, as last heard of (its keepalive interval). */
  node(id: string): SatelliteHeartbeat | null {
    return this.#nodes.get(id)?.hb ?? null;
  }

  /**
   * Where a call of `tool` goes. With `nodeId`: that node only, if it is live and offers the tool.
   * Without: the sole eligible node, or the queue group when every eligible node offers the same
   * definition; nodes offering different definitions are AMBIGUOUS, never a guess.
   */
  route(tool: string, nodeId: string | undefined): Route {
    this.#expire();
    const offering = [...this.#nodes.values()].filter((n) => n.hb.tools.some((t) => t.name === tool));
    const nodes = offering.map((n) => n.hb.node_id).sort();
    if (nodeId !== undefined) {
      const node = this.#nodes.get(nodeId);
      if (!node) {
        return fail('UNAVAILABLE', `Satellite node "${nodeId}" is not live (no heartbeat from it); live nodes offering ${tool}: ${list(nodes)}`, {
          node_id: nodeId,
          nodes,
        });
      }
      if (!node.hb.tools.some((t) => t.name === tool)) {
        return fail('INVALID_INPUT', `Satellite node "${nodeId}" does not offer ${tool}; nodes that do: ${list(nodes)}`, { node_id: nodeId, nodes });
      }
      return { subject: this.#subjects.node(nodeId, tool), node: nodeId, mode: 'explicit' };
    }
    if (offering.length === 0) return fail('UNAVAILABLE', `No live satellite offers ${tool}`, { nodes: [] });
    if (offering.length === 1) {
      const only = offering[0] as Node;
      return { subject: this.#subjects.node(only.hb.node_id, tool), node: only.hb.node_id, mode: 'sole_eligible' };
    }
    const variants = variantsOf(offering, tool);
    if (variants.size === 1) return { subject: this.#subjects.tool(tool), node: null, mode: 'queue_group' };
    const candidates = [...variants.values()].map((v) => ({ version: v.version, nodes: v.nodes }));
    return fail(
      'AMBIGUOUS',
      `${offering.length} satellites offer ${tool} in ${variants.size} different definitions or versions (${candidates
        .map((c) => `${c.version}: ${c.nodes.join(', ')}`)
        .join('; ')}); name the node with node_id`,
      { candidates, nodes },
    );
  }

  /** The live satellites, for status(): each node, its tools, load and last heartbeat. */
  list(): Array<Record<string, unknown>> {
    this.#expire();
    const now = Date.now();
    return [...this.#nodes.values()]
      .sort((a, b) => (a.hb.node_id < b.hb.node_id ? -1 : 1))
      .map(({ hb, at }) => ({
        node_id: hb.node_id,
        version: hb.version,
        tools: hb.tools.map((t) => t.name),
        capacity: hb.capacity,
        in_flight: hb.in_flight,
        ...(hb.sdk ? { sdk: hb.sdk } : {}),
        last_heartbeat: new Date(at).toISOString(),
        last_heartbeat_ms_ago: now - at,
      }));
  }

  close(): void {
    if (this.#sweep) clearTimeout(this.#sweep);
    this.#sweep = null;
    this.#nodes.clear();
    this.#update();
  }

  #forget(id: string, why: string, lost = true): void {
    if (!this.#nodes.delete(id)) return;
    if (lost) this.#dropped(id, why);
    else this.#log('info', `satellite ${id} left`);
    this.#update();
  }

  /** Forgets the satellites whose heartbeats stopped. */
  #expire(): void {
    const now = Date.now();
    for (const [id, node] of this.#nodes) {
      if (now - node.at > node.timeoutMs) this.#forget(id, `no heartbeat for ${now - node.at} ms (its limit ${node.timeoutMs} ms)`);
    }
  }

  /** Lists the tools again, tells listeners when the list changed, and sets the timer of the next expiry. */
  #update(): void {
    const byName = new Map<string, Node[]>();
    for (const node of this.#nodes.values()) {
      for (const tool of node.hb.tools) byName.set(tool.name, [...(byName.get(tool.name) ?? []), node]);
    }
    const listed: ProviderTool[] = [];
    this.#routedByInput.clear();
    // What the engine's registry holds of each tool: a change of it (not of which nodes serve it) is a change.
    const held: unknown[] = [];
    for (const name of [...byName.keys()].sort()) {
      const variants = [...variantsOf(byName.get(name) as Node[], name).values()];
      // The listing needs one definition: the one most nodes offer (then the first node's). A call
      // without node_id still fails AMBIGUOUS while the definitions differ.
      variants.sort((a, b) => b.nodes.length - a.nodes.length || (a.nodes[0] as string).localeCompare(b.nodes[0] as string));
      const chosen = variants[0] as Variant;
      const routed = withNodeId(chosen.tool.inputSchema);
      if (routed) this.#routedByInput.add(name);
      listed.push({
        ...chosen.tool,
        inputSchema: routed ?? chosen.tool.inputSchema,
        annotations: {
          satellite: { nodes: chosen.nodes, version: chosen.version, ...(variants.length > 1 ? { variants: variants.length } : {}) },
        },
      });
      held.push([chosen.tool, chosen.version, variants.length]);
    }
    const signature = canonical(held);
    this.#listed = listed;
    if (signature !== this.#signature) {
      this.#signature = signature;
      this.#changed();
    }
    this.#schedule();
  }

  #schedule(): void {
    if (this.#sweep) clearTimeout(this.#sweep);
    this.#sweep = null;
    let next = Number.POSITIVE_INFINITY;
    for (const node of this.#nodes.values()) next = Math.min(next, node.at + node.timeoutMs);
    if (next === Number.POSITIVE_INFINITY) return;
    // Timers may fire a little early: the sweep sets the next one whether or not it forgot anyone.
    this.#sweep = setTimeout(
      () => {
        this.#expire();
        this.#schedule();
      },
      Math.max(0, next - Date.now()) + 1,
    );
    this.#sweep.unref?.();
  }
}

interface Variant {
  tool: ProviderTool;
  version: string;
  nodes: string[];
}

/** The definitions of `tool` among `nodes`, by their canonical JSON and the satellite's version. */
function variantsOf(nodes: readonly Node[], tool: string): Map<string, Variant> {
  const variants = new Map<string, Variant>();
  for (const node of [...nodes].sort((a, b) => (a.hb.node_id < b.hb.node_id ? -1 : 1))) {
    const announced = node.hb.tools.find((t) => t.name === tool) as AnnouncedTool;
    const key = canonical([announced, node.hb.version]);
    const variant = variants.get(key);
    if (variant) variant.nodes.push(node.hb.node_id);
    else variants.set(key, { tool: { ...announced }, version: node.hb.version, nodes: [node.hb.node_id] });
  }
  return variants;
}

/** The input field naming the node a call goes to (seed 004's routing metadata), when the tool's own schema leaves it free. */
export const NODE_FIELD = 'node_id';

/**
 * The schema the engine lists: the satellite's, with an optional `node_id` the provider takes out of the
 * input before the call leaves. A schema that has a `node_id` of its own (or is not an object schema) is
 * kept as it is: that tool is targeted only through the call's context.
 */
function withNodeId(schema: Record<string, unknown>): Record<string, unknown> | null {
  const properties = schema.properties;
  if (schema.type !== 'object' || (properties !== undefined && (typeof properties !== 'object' || properties === null))) return null;
  if (properties && Object.hasOwn(properties, NODE_FIELD)) return null;
  return {
    ...schema,
    properties: {
      ...((properties as Record<string, unknown> | undefined) ?? {}),
      [NODE_FIELD]: {
        type: 'string',
        pattern: NODE_ID.source,
        description: 'the satellite node to run on; without it: the only node offering this tool, or any of those offering the same definition',
      },
    },
  };
}

/** JSON with object keys sorted, so that equal definitions compare equal whatever their key order. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, inner) =>
    typeof inner === 'object' && inner !== null && !Array.isArray(inner)
      ? Object.fromEntries(
          Object.keys(inner as object)
            .sort()
            .map((k) => [k, (inner as Record<string, unknown>)[k]]),
        )
      : inner,
  );
}

function fail(code: 'UNAVAILABLE' | 'AMBIGUOUS' | 'INVALID_INPUT', message: string, details: Record<string, unknown>): Route {
  return { failure: { ok: false, code, message, retryable: code === 'UNAVAILABLE', details } };
}

const list = (nodes: readonly string[]) => (nodes.length === 0 ? 'none' : nodes.join(', '));
const plain = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const count = (value: unknown): number | null => (Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : null);

/** A heartbeat's known fields, each checked; or why it is refused. */
export function heartbeatOf(message: Record<string, unknown>): SatelliteHeartbeat | string {
  if (message.t !== 'hb') return 'not a heartbeat';
  const id = message.node_id;
  if (typeof id !== 'string' || !NODE_ID.test(id)) return 'node_id must be 1 to 64 letters, digits, "_" or "-"';
  const interval = count(message.interval_ms);
  if (interval === null || interval === 0) return 'interval_ms must be a whole number of ms above 0';
  if (message.leaving === true) return { ...minimal(id, interval), leaving: true };
  const tools = message.tools;
  if (!Array.isArray(tools)) return 'tools must be a list';
  if (tools.length > SATELLITE_LIMITS.max_tools) return `it announces ${tools.length} tools, past the limit of ${SATELLITE_LIMITS.max_tools}`;
  const kept: AnnouncedTool[] = [];
  const names = new Set<string>();
  for (const [i, tool] of tools.entries()) {
    if (!plain(tool)) return `tools[${i}] is not an object`;
    if (typeof tool.name !== 'string' || !TOOL_NAME.test(tool.name)) return `tools[${i}].name must be 1 to 64 letters, digits, "_" or "-"`;
    if (names.has(tool.name)) return `tools[${i}].name "${tool.name}" is announced twice`;
    names.add(tool.name);
    if (!plain(tool.inputSchema)) return `tools[${i}] ("${tool.name}"): inputSchema must be a JSON Schema object`;
    if (tool.outputSchema !== undefined && !plain(tool.outputSchema))
      return `tools[${i}] ("${tool.name}"): outputSchema must be a JSON Schema object`;
    if (tool.description !== undefined && typeof tool.description !== 'string') return `tools[${i}] ("${tool.name}"): description must be text`;
    if (typeof tool.description === 'string' && tool.description.length > SATELLITE_LIMITS.description_chars)
      return `tools[${i}] ("${tool.name}"): description is past ${SATELLITE_LIMITS.description_chars} characters`;
    kept.push({
      name: tool.name,
      ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
      inputSchema: tool.inputSchema,
      ...(tool.outputSchema !== undefined ? { outputSchema: tool.outputSchema as Record<string, unknown> } : {}),
    });
  }
  return {
    ...minimal(id, interval),
    version: typeof message.version === 'string' ? message.version.slice(0, 64) : '0.0.0',
    capacity: count(message.capacity) ?? 0,
    in_flight: count(message.in_flight) ?? 0,
    keepalive_ms: count(message.keepalive_ms) || SATELLITE_LIMITS.keepalive_ms,
    tools: kept,
    ...(typeof message.sdk === 'string' ? { sdk: message.sdk.slice(0, 32) } : {}),
  };
}

function minimal(id: string, interval: number): SatelliteHeartbeat {
  return { t: 'hb', v: 1, node_id: id, version: '0.0.0', capacity: 0, in_flight: 0, interval_ms: interval, keepalive_ms: 0, tools: [] };
}
