import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findInterpreter, harnessDir } from '../runners/python/interpreter.js';

// The Python harness's own functions, run in the real interpreter (the one the engine would use).

const interpreter = await findInterpreter(undefined, process.cwd());

/** Runs `body` (Python, after the harness is importable) and returns what it printed as JSON. */
function python(body: string): unknown {
  const script = ['import json, os, sys', `sys.path.insert(0, ${JSON.stringify(harnessDir())})`, 'import arium_server', body].join('\n');
  return JSON.parse(execFileSync(interpreter.executable, ['-I', '-S', '-c', script], { encoding: 'utf8', timeout: 20_000 }));
}

describe('the harness', () => {
  it('a call process closes the descriptors it must not keep: exactly the range asked, wide ranges in one system call', () => {
    const out = python(`
import arium_child
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
fds = [fd for _ in range(40) for fd in os.pipe()]
low, high = fds[0], fds[-1] + 1
arium_child.close_from(low + 2, low + 5)          # narrow: os.closerange
after_narrow = [fd for fd in range(low, high) if not is_open(fd)]
arium_child.close_from(low + 10, low + 200)       # wide: close_range(2)
after_wide = [fd for fd in range(low, high) if not is_open(fd)]
arium_child.close_from(low + 1, 1 << 20)          # up to the server's limit
left = [fd for fd in range(low, high) if is_open(fd)]
print(json.dumps({"low": low, "narrow": after_narrow, "wide": after_wide, "left": left}))
`) as { low: number; narrow: number[]; wide: number[]; left: number[] };
    const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => out.low + from + i);
    expect(out.narrow).toEqual(range(2, 5));
    expect(out.wide).toEqual([...range(2, 5), ...range(10, 80)]);
    expect(out.left).toEqual([out.low]);
  });
});
