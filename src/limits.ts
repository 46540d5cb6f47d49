/**
 * Every resource limit of the engine and its default, in one place. A tool's `limits` block overrides
 * the per-call fields; engine options (and later `arium.json`) override the rest.
 */

/** Limits that apply to one call of one tool. */
export interface CallLimits {
  /** Wall-clock budget of one call (all its runs together), from the start of execution: default 30 s. */
  timeout_ms: number;
  /** Memory a sandboxed runner may use (isolate heap, Python address space). */
  memory_mb: number;
  /** Largest serialized output (JSON bytes) a call may return before `OUTPUT_LIMIT`. */
  output_bytes: number;
  /**
   * Runs a call may take when it loses a race: a call whose commit is refused because another call
   * changed what it read is run again, up to this many runs in all (the last one alone, so it cannot
   * lose again). 1 never runs a call twice: the caller gets `CONFLICT`. Tools that declare effects outside
   * the VFS (`sys.exec`, `net.fetch`) are never run twice, whatever this says.
   */
  max_attempts: number;
}

/** Engine-wide policy. */
export interface Policy extends CallLimits {
  /** Calls running at once across all tools. */
  concurrency: number;
  /** Calls of one tool running at once. */
  tool_concurrency: number;
  /** Calls waiting for a slot before new ones are refused with `BUSY`. */
  queue_length: number;
  /** Largest serialized input (JSON bytes) accepted; checked before schema validation. */
  input_bytes: number;
  /** Deepest nesting of arrays/objects accepted in an input. */
  input_depth: number;
  /** Input and output embedded in events are cut to this many bytes of JSON. */
  event_payload_bytes: number;
  /** Log text a call may return in `meta.logs`; later lines are dropped and counted. */
  log_bytes: number;
}

export interface VfsQuota {
  /** Total bytes of file content in the VFS. */
  max_bytes: number;
  /** Number of files and directories in the VFS. */
  max_files: number;
  /** Length of a normalized path in bytes (Linux PATH_MAX is 4096). */
  max_path_length: number;
  /** Length of one path segment in bytes (Linux NAME_MAX is 255). */
  max_name_length: number;
  /** Largest single file. */
  max_file_bytes: number;
  /**
   * File content one call may write in all: every write counts, also a write over the same file again,
   * since the engine holds each until the call commits. Host changes (`engine.vfs`, imports) are not
   * bounded by it.
   */
  max_call_bytes: number;
}

/** Limits of the registry when it reads tool definition files. */
export interface RegistryLimits {
  /** A definition file larger than this is rejected unread (a JSON file of many MB is a mistake or an attack). */
  max_definition_bytes: number;
  /**
   * Deepest nesting of arrays and objects in a definition (JSON or YAML; a YAML file's aliases
   * expanded), and in a skill's front matter. Checked before the file is parsed: parsers recurse, and a
   * file of nothing but brackets would otherwise end in a stack overflow or, for YAML, a fatal OOM.
   * Above twice the schema depth the model APIs' rules check (MAX_WALK_DEPTH, 64 schema levels, about
   * two JSON levels each), so a schema too deep to publish still loads and is called, listed to none.
   */
  max_definition_depth: number;
  /** Tools one project may define. */
  max_tools: number;
}

export const DEFAULT_POLICY: Readonly<Policy> = Object.freeze({
  timeout_ms: 30_000,
  memory_mb: 128,
  output_bytes: 1024 * 1024,
  max_attempts: 2,
  concurrency: 64,
  tool_concurrency: 16,
  queue_length: 256,
  input_bytes: 1024 * 1024,
  input_depth: 64,
  event_payload_bytes: 4096,
  log_bytes: 64 * 1024,
});

export const DEFAULT_VFS_QUOTA: Readonly<VfsQuota> = Object.freeze({
  max_bytes: 256 * 1024 * 1024,
  max_files: 100_000,
  max_path_length: 4096,
  max_name_length: 255,
  max_file_bytes: 64 * 1024 * 1024,
  max_call_bytes: 128 * 1024 * 1024,
});

export const DEFAULT_REGISTRY_LIMITS: Readonly<RegistryLimits> = Object.freeze({
  max_definition_bytes: 1024 * 1024,
  max_definition_depth: 256,
  max_tools: 10_000,
});

/**
 * Skills (`skills/<name>/SKILL.md`, src/skills/): what one is read within, and what a prompt made from
 * one may be given. A skill past a bound is a load problem; an argument past one is refused, never cut.
 * Its front matter is held to `max_definition_depth` too.
 */
export const SKILL_LIMITS = Object.freeze({
  /** Bytes of one SKILL.md, front matter and body together; a larger file is refused unread. */
  max_skill_bytes: 256 * 1024,
  /** Skills one folder may hold; the folders past it (in name order) are load problems. */
  max_skills: 1000,
  /** Arguments one skill may declare. */
  max_arguments: 32,
  /** Characters of one argument's value when a prompt is made; a longer one is refused. */
  max_argument_chars: 16 * 1024,
  /** Characters of a skill's description (it is listed to models with every prompt). */
  max_description_chars: 1024,
});

/** Upper bounds a tool's own `limits` block may not exceed (enforced by the meta-schema). */
export const TOOL_LIMIT_CEILINGS: Readonly<CallLimits> = Object.freeze({
  timeout_ms: 10 * 60 * 1000,
  memory_mb: 8192,
  output_bytes: 64 * 1024 * 1024,
  max_attempts: 100,
});

/**
 * An error message in a result is cut to this many characters, ending with how many were cut: a tool
 * may throw a message of any size, and a caller (often a model) should not have to read megabytes of it.
 * The tool's stack is bounded separately by each runner.
 */
export const ERROR_MESSAGE_CHARS = 4096;

/** When the audit log (`audit_log` in arium.json) is rotated, and how many rotated files are kept. */
export const DEFAULT_AUDIT_ROTATION = Object.freeze({
  /** Rotate before a line would take `audit.jsonl` past this size. */
  max_bytes: 16 * 1024 * 1024,
  /** `audit.jsonl.1` … `audit.jsonl.4`; the oldest beyond is deleted. */
  files: 4,
});

/** Approvals (`approvals` in arium.json): how long a call waits for a person, and how many answers are remembered. */
export const DEFAULT_APPROVALS = Object.freeze({
  /** A call nobody approves or denies within this time fails with `APPROVAL_TIMEOUT` (5 minutes). */
  timeout_ms: 5 * 60 * 1000,
  /** The longest `timeout_ms` (about 24.8 days): a timer past it would fire at once (Node's setTimeout bound). */
  max_timeout_ms: 2 ** 31 - 1,
  /** Pending approvals at once; past it a call that needs one fails with `BUSY` instead of waiting. */
  max_pending: 1000,
  /** Resolved approvals remembered so that a late second answer learns who answered first. */
  remembered: 1000,
});

/**
 * Macros (runner "macro"): the most steps one macro lists, and the longest chain of macros calling
 * macros. Both bound the work one call can fan out to; a deeper chain is a load problem, and a call
 * that meets one anyway (a tool reloaded under it) fails naming the chain.
 */
export const MACRO_LIMITS = Object.freeze({ max_steps: 32, max_depth: 8 });

/**
 * Code mode (`code.run`): what one program may do besides its call's own limits (`timeout_ms` and
 * `memory_mb` bound the whole program, its inner calls included).
 */
export const CODE_MODE_LIMITS = Object.freeze({
  /** Tool calls one program may make in all; the next one ends the program with TOOL_ERROR (`details.limit: "max_calls"`). */
  max_calls: 1000,
  /**
   * Tool calls of one program running at once; more wait their turn, in order. At most 256 may be
   * pending (running or waiting) in the sandbox, past which a call is refused with `BUSY`.
   */
  max_concurrent: 8,
  /** Characters of a program's code (the schema's `maxLength`). */
  max_code_chars: 256 * 1024,
});

/**
 * Tool discovery (`tools.search`, `tools.describe`, `code.types`; src/code-mode/). Each
 * bounds what one call hands back; a call over one fails saying which, never a silent cut.
 * - `search_default` / `search_max`: the tools `tools.search` returns unless `limit` says, and the most
 *   it may say.
 * - `query_chars`: the longest query.
 * - `describe_max`: the most ids one `tools.describe` names.
 * - `types_bytes`: the longest declarations text `code.types` (and the `code/types` MCP resource)
 *   returns (UTF-8 bytes): past it, OUTPUT_LIMIT naming the size, so narrow the surface's tools or
 *   look tools up with tools.search instead.
 * - `enum_members`: an enum longer than this is typed as its members' primitive types, with a comment,
 *   so one huge enum cannot take the whole budget.
 * - `schema_depth`: nesting past this becomes `unknown` with a comment.
 */
export const DISCOVERY_LIMITS = Object.freeze({
  search_default: 5,
  search_max: 50,
  query_chars: 1000,
  describe_max: 50,
  types_bytes: 1024 * 1024,
  enum_members: 256,
  schema_depth: 32,
});

/**
 * The HTTP gateway (`arium serve`, `createGateway`): how long a client may take to send a request, and
 * how many MCP sessions and subscriptions it may hold. `createGateway({ limits })` overrides them.
 */
export interface GatewayLimits {
  /**
   * A request's headers must arrive within this time of its first byte (Node's `headersTimeout`), or
   * the connection is answered 408 and closed: a client that trickles headers holds a socket otherwise.
   */
  headers_timeout_ms: number;
  /**
   * A whole request, headers and body, must arrive within this time (Node's `requestTimeout`), or it is
   * answered 408 and closed. It ends when the request is received: a long tool run, or a stream the
   * server sends (`/v1/events`, an MCP GET stream), is a response and is not bounded by it.
   */
  request_timeout_ms: number;
  /** Open MCP sessions (`/mcp`) in all; a new one past it is refused with 503 until one closes or expires. */
  mcp_sessions: number;
  /**
   * Open MCP sessions per API key (per client address when the gateway needs no key); past it a new one is
   * refused with 429, so one client cannot take every session.
   */
  mcp_sessions_per_key: number;
  /**
   * An MCP session with no request and no stream open for this long is closed and its server freed; the
   * client's next request is 404, which tells an MCP client to initialize a new session.
   */
  mcp_session_idle_ms: number;
  /** Resource subscriptions one MCP session may hold; one more is a JSON-RPC error naming the limit. */
  mcp_subscriptions: number;
  /**
   * JSON bytes of its last messages (at most 1,000) one MCP session keeps, so that a client that lost a
   * stream gets them again with `Last-Event-ID`; older ones go first, and resuming after one that is gone
   * is refused (400): the client missed more than the session kept.
   */
  mcp_replay_bytes: number;
}

export const DEFAULT_GATEWAY_LIMITS: Readonly<GatewayLimits> = Object.freeze({
  headers_timeout_ms: 15_000,
  request_timeout_ms: 60_000,
  mcp_sessions: 1000,
  mcp_sessions_per_key: 100,
  mcp_session_idle_ms: 15 * 60 * 1000,
  mcp_subscriptions: 1000,
  mcp_replay_bytes: 4 * 1024 * 1024,
});

/**
 * What the engine keeps for calls that run on remote workers (runners/remote/transfers.ts). A message
 * larger than the NATS server's max_payload travels in parts, and the engine holds it meanwhile: an
 * answer the worker fetches part by part, or the parts of a message the worker sends. A worker is
 * untrusted (THREAT_MODEL.md): without these bounds it could make the engine hold any amount.
 */
export const REMOTE_LIMITS = Object.freeze({
  /**
   * Bytes of messages in parts one call holds on the engine at once, both ways. Room for one VFS file
   * of `max_file_bytes` (64 MiB, 86 MiB once base64 in JSON). At it, the call's next `ctx.vfs` request
   * waits until the worker has fetched an answer (large reads are paced; one answer may pass the bound);
   * a part the worker sends past it is refused (`BUSY`), and the message it belonged to dropped.
   */
  call_transfer_bytes: 96 * 1024 * 1024,
  /** The same across every call of one worker. */
  worker_transfer_bytes: 256 * 1024 * 1024,
  /** Messages in parts one call has in transit at once, both ways together: paced or refused as above. */
  call_transfers: 8,
  /**
   * `ctx.vfs` requests of one call waiting on the engine for their turn (it runs them in order, one per
   * turn of its event loop), and their bytes; past either `BUSY`.
   */
  call_requests: 256,
  call_request_bytes: 64 * 1024 * 1024,
  /** A message in parts of which no part was sent or fetched for this long is dropped. */
  transfer_idle_ms: 30_000,
  /** Bytes of `ctx.vfs` reads and lists (their answers as JSON) one remote call may be sent in all; past it `QUOTA_EXCEEDED`. */
  call_read_bytes: 1024 * 1024 * 1024,
});

export type RemoteLimits = { readonly [K in keyof typeof REMOTE_LIMITS]: number };

/**
 * Providers (`providers` in arium.json): the defaults of a provider's `limits`, and how a crashed
 * provider is brought back. A provider's `timeout_ms` and `max_output_bytes` default to the policy's
 * `timeout_ms` and `output_bytes`, as a local tool's do; an upstream that states a smaller timeout for
 * a tool gets the smaller.
 */
export const DEFAULT_PROVIDER_LIMITS = Object.freeze({
  /** Calls of one provider's tools in flight at once; more wait for a place (within their timeout). */
  concurrency: 16,
  /** How long starting a provider (its process, its handshake, its tool list) may take before it fails. */
  start_timeout_ms: 30_000,
  /** The first wait before restarting a provider that stopped; doubled after each failed start. */
  restart_backoff_ms: 200,
  /** The longest wait between two starts. */
  max_restart_backoff_ms: 30_000,
  /** Tools one provider may offer; more are a load problem (the rest are not served). */
  max_tools: 1000,
});

/**
 * HTTP tool workers (providers of kind `http`, src/providers/http.ts). A worker is outside the engine and
 * untrusted: what it answers is bounded before it is read, and a bundle's files before they are parsed.
 */
export const HTTP_PROVIDER_LIMITS = Object.freeze({
  /**
   * Bytes of a worker's answer (the response envelope as sent). A larger one is cut off and the call
   * fails `OUTPUT_LIMIT`; the engine then checks the output itself against the tool's `output_bytes`.
   * A provider's `http.max_response_bytes` overrides it.
   */
  response_bytes: 64 * 1024 * 1024,
  /** Bytes of `manifest.yaml`, `policies.yaml` and each schema file they name. */
  bundle_file_bytes: 1024 * 1024,
  /** Calls waiting for a concurrency slot of the bundle's policies; past it a call fails `BUSY` at once. */
  queue_length: 256,
  /** How long the start waits for each worker's `GET /healthz` (a worker down is reported, not fatal). */
  health_timeout_ms: 2000,
  /** Characters of a malformed answer quoted in the error, to show what came back. */
  quoted_chars: 200,
});

/**
 * What the engine takes from NATS satellites (src/providers/nats.ts) and what the satellite SDKs do by
 * default (src/satellite, sdk/python). A satellite is untrusted (THREAT_MODEL.md): its heartbeats and
 * answers are bounded, and anything past a bound is dropped or refused, never cut and kept.
 */
export const SATELLITE_LIMITS = Object.freeze({
  /** Live satellites one provider remembers; heartbeats of new node ids past it are dropped (and logged). */
  max_nodes: 1024,
  /** Tools one satellite may announce; a heartbeat with more is dropped as a whole (and logged). */
  max_tools: 256,
  /** Characters of a tool's description; a longer one drops the heartbeat (and is logged). */
  description_chars: 4096,
  /** How often the SDKs send a heartbeat (ms); a provider forgets a satellite after 3 of its own intervals without one. */
  heartbeat_ms: 1000,
  /** How often a satellite says a call it runs is still alive (ms); 3 missed and the call ends `UNAVAILABLE`. */
  keepalive_ms: 500,
  /** How long the satellite that took a call has to say so (ms), else the call ends `UNAVAILABLE`. */
  accept_ms: 2000,
  /** Log lines and progress notes one call may send; past it the call ends `OUTPUT_LIMIT`. */
  call_notes: 10_000,
  /** Calls one satellite runs at once by default; more wait for a slot. */
  capacity: 16,
  /** Calls that may wait for a slot on one satellite by default; past them it answers `BUSY` (retryable). */
  queue: 256,
});

/**
 * What `arium add` takes from a pack (src/packs/). A pack comes from someone else: a tarball or folder
 * past a bound is refused whole, never cut and installed.
 */
export const PACK_LIMITS = Object.freeze({
  /** Bytes of a pack tarball as read from disk (gzip-compressed or not). */
  max_archive_bytes: 32 * 1024 * 1024,
  /** Bytes of all a pack's files once unpacked (or copied from a folder): a small gzip bomb stops here. */
  max_unpacked_bytes: 64 * 1024 * 1024,
  /** Files and folders in one pack. */
  max_entries: 4096,
  /** Bytes of a pack manifest (arium-pack.yaml / .json, or a domain bundle's manifest.yaml and policies.yaml). */
  max_manifest_bytes: 256 * 1024,
  /** How long `arium add` waits for another `arium add`, `remove` or `update` of the same project (ms). */
  lock_wait_ms: 30_000,
});

/**
 * How many processes the JS and Python runners keep for their calls (arium.json `pools`, createEngine
 * `pools`). By default a pool grows to one member per core the engine may use (os.availableParallelism(),
 * which follows taskset and cgroup limits): each member relays its calls on one thread, so fewer members
 * than cores leaves cores idle under load, and more only adds processes that wait for a core.
 */
export const POOL_LIMITS = Object.freeze({
  /** Most members a pool may be given, in a setting or from the cores (each holds warm processes and memory). */
  max_members: 64,
  /** A member with no call for this long is ended, down to one member per pool: default 10 s. */
  idle_ms: 10_000,
});

/** A project state in NATS JetStream (`store.nats` in arium.json, src/store/jetstream-store.ts). */
export const DEFAULT_JETSTREAM_STORE = Object.freeze({
  /**
   * The holder's lease lasts this long unrenewed (renewed every third of it): another engine takes the
   * project over this long after the holder was killed, stopped or cut off (the failover time).
   */
  lease_ms: 3000,
  /** The shortest and longest lease arium.json may set. */
  min_lease_ms: 300,
  max_lease_ms: 60_000,
  /** One request to NATS (an append and its acknowledgment) fails after this long without an answer. */
  timeout_ms: 10_000,
});

/**
 * Gateways that share a project kept in NATS JetStream (README "Gateways in front of one project"): a
 * gateway that does not hold the project forwards its requests to the one that does, over NATS.
 */
export const DEFAULT_GATEWAY_FORWARD = Object.freeze({
  /** A forwarded request fails (UNAVAILABLE, its outcome unknown) after this long without the holder's answer. */
  timeout_ms: 300_000,
  /** A read of the project's lease (is some gateway holding it?) fails after this long. */
  lease_read_ms: 5_000,
  /**
   * A forwarded request is refused when its time differs from the holder's clock by more than this: a
   * message captured on the bus cannot be replayed later (and within it, its nonce is remembered).
   */
  clock_skew_ms: 60_000,
  /** Nonces a holder remembers within clock_skew_ms; past this, forwarded requests are refused (retryable) until some expire. */
  max_nonces: 200_000,
  /** The shortest shared secret (store.forward.secret_env) accepted: it signs every forwarded request and answer. */
  min_secret_chars: 32,
});
