import { closeSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs';

/**
 * Processes and disk for the soak benchmark's faults: the process tree from /proc (to find the sandbox
 * processes below the engine and to list what is left at the end), and filling a file system to ENOSPC.
 */

export interface Proc {
  pid: number;
  ppid: number;
  /** Start time in clock ticks since boot: a pid seen again with another start is another process. */
  start: number;
  command: string;
}

function readProc(pid: number): Proc | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
    return { pid, ppid: Number(fields[1]), start: Number(fields[19]), command };
  } catch {
    return null;
  }
}

export function allProcs(): Proc[] {
  const out: Proc[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const proc = readProc(Number(name));
    if (proc) out.push(proc);
  }
  return out;
}

/** Every process below `root` (not `root` itself). */
export function descendants(root: number, procs = allProcs()): Proc[] {
  const children = new Map<number, Proc[]>();
  for (const p of procs) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out: Proc[] = [];
  const walk = (pid: number) => {
    for (const child of children.get(pid) ?? []) {
      out.push(child);
      walk(child.pid);
    }
  };
  walk(root);
  return out;
}

export function alive(proc: Proc): boolean {
  const now = readProc(proc.pid);
  return now !== null && now.start === proc.start;
}

/**
 * The Python runner's processes below a server pid the engine reports (bwrap, or Python itself): the
 * fork server is the first Python process; the processes it forked are its call processes.
 */
export function pythonProcs(serverPid: number): { server: Proc | null; calls: Proc[] } {
  const procs = allProcs();
  const self = procs.find((p) => p.pid === serverPid);
  // bwrap's own processes carry the server's command line as arguments: only Python itself counts.
  const isPython = (p: Proc) => /(^|\/)python[0-9.]*$/.test(p.command.split(' ')[0] ?? '');
  const below = [...(self ? [self] : []), ...descendants(serverPid, procs)].filter(isPython);
  const server = below.find((p) => !below.some((q) => q.pid === p.ppid)) ?? null;
  const calls = server ? descendants(server.pid, procs).filter(isPython) : [];
  return { server, calls };
}

/** Fills the file system holding `file` until it refuses (ENOSPC); returns the bytes written. */
export function fillDisk(file: string): number {
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(1024 * 1024, 0x61);
  let bytes = 0;
  try {
    for (;;) {
      let piece = chunk;
      for (;;) {
        try {
          bytes += writeSync(fd, piece);
          break;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
          // Down to single bytes, so the disk is full to the last block.
          if (piece.length === 1) return bytes;
          piece = piece.subarray(0, piece.length >> 1);
        }
      }
    }
  } finally {
    closeSync(fd);
  }
}

export function freeDisk(file: string): void {
  unlinkSync(file);
}

export function openFds(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return -1;
  }
}

export function rssBytes(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('VmRSS:'));
    return Number(line?.split(/\s+/)[1] ?? Number.NaN) * 1024;
  } catch {
    return Number.NaN;
  }
}
