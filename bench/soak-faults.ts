import { type CallClass, WRITING } from './soak-workload.js';

/**
 * The soak benchmark's faults and what each may do to the calls that overlap it. A call that ends
 * with a code no fault overlapping it (nor the workload itself) explains is unexpected: the report
 * counts those and prints examples.
 */

export type FaultKind = 'js-sandbox' | 'py-server' | 'py-call' | 'worker' | 'nats' | 'enospc' | 'engine';

/** `TRANSPORT`: the surface lost the call (the engine process died under it); not an engine code. */
export const TRANSPORT = 'TRANSPORT';

const ALL: CallClass[] = ['write', 'read', 'js', 'remote', 'py', 'shell-write', 'shell-read', 'snapshot', 'restore'];

/**
 * Per fault, the codes it may cause and for which calls. Sandboxes that die mid-call fail it
 * UNAVAILABLE (the runner replaces the process); the Python runner also answers BUSY when it cannot
 * start a call process while its server is being replaced. A lost worker or NATS server fails remote
 * calls UNAVAILABLE (reason worker-lost, no-workers, disconnected). A full disk fails every call that
 * would commit (or save a snapshot) UNAVAILABLE, errno ENOSPC. A killed engine loses the calls in
 * flight on every surface (TRANSPORT), and the engine just started answers UNAVAILABLE for remote
 * calls until it has reconnected to NATS.
 */
export const EXPECTED: Record<FaultKind, ReadonlyArray<[CallClass[], string[]]>> = {
  'js-sandbox': [[['js'], ['UNAVAILABLE']]],
  'py-server': [[['py'], ['UNAVAILABLE', 'BUSY']]],
  'py-call': [[['py'], ['UNAVAILABLE', 'BUSY']]],
  worker: [[['remote'], ['UNAVAILABLE']]],
  nats: [[['remote'], ['UNAVAILABLE']]],
  enospc: [[[...WRITING], ['UNAVAILABLE']]],
  engine: [
    [ALL, [TRANSPORT]],
    [['remote'], ['UNAVAILABLE']],
  ],
};

/**
 * Codes the workload itself makes, whatever the faults: reading a tracked file no write has reached
 * yet (or a restore removed) is NOT_FOUND; a call that writes may lose its race with another past its
 * runs (`max_attempts`) and end CONFLICT.
 */
export function expectedAnyTime(cls: CallClass, code: string): boolean {
  if (cls === 'read' && code === 'NOT_FOUND') return true;
  return WRITING.has(cls) && code === 'CONFLICT';
}

/** Which faults run, in order, at which fraction of the calls. The engine's restarts come early, so the last engine serves over half the run (its RSS and descriptors are compared before and after). */
export const SCHEDULE: ReadonlyArray<[number, FaultKind]> = [
  [0.04, 'js-sandbox'],
  [0.08, 'py-server'],
  [0.12, 'engine'],
  [0.18, 'worker'],
  [0.24, 'nats'],
  [0.3, 'enospc'],
  [0.36, 'py-call'],
  [0.42, 'engine'],
  [0.5, 'js-sandbox'],
  [0.57, 'worker'],
  [0.64, 'nats'],
  [0.71, 'enospc'],
  [0.78, 'py-server'],
  [0.85, 'py-call'],
];

/** How long after a fault has recovered its effects may still show (a call that started just before). */
export const GRACE_MS = 3000;

export interface FaultRecord {
  kind: FaultKind;
  at_call: number;
  at_s: number;
  target: string;
  /** From the fault to the first successful call it could have failed. */
  recovered_ms: number | null;
  /** Calls that overlapped it and ended with a code it explains, by code. */
  failed: Record<string, number>;
  note?: string;
  /** Internal: the window in performance.now() ms. */
  window: [number, number];
}

export function explains(fault: FaultKind, cls: CallClass, code: string): boolean {
  return EXPECTED[fault].some(([classes, codes]) => classes.includes(cls) && codes.includes(code));
}
