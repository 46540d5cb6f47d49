import { describe, expect, it } from 'vitest';
import { idPart, jsName, jsPath, toolId } from '../src/code-mode/names.js';

describe("a tool id's name in a code-mode program", () => {
  it('maps each id part to an identifier and back', () => {
    const cases: Array<[string, string[]]> = [
      ['fs.read', ['fs', 'read']],
      ['demo.word-freq', ['demo', 'wordFreq']],
      ['a.b_c', ['a', 'b_c']],
      ['x.a-1', ['x', 'a$1']],
      ['x.a--b', ['x', 'a$B']],
      ['x.v2-', ['x', 'v2$']],
      ['2fa.check', ['_2fa', 'check']],
      ['pack.constructor', ['pack', 'constructor']],
    ];
    for (const [id, path] of cases) {
      expect(jsPath(id)).toEqual(path);
      expect(toolId(path)).toBe(id);
    }
  });

  it('is one to one over every short id part', () => {
    const alphabet = ['a', 'z', '0', '9', '_', '-'];
    const seen = new Map<string, string>();
    const parts: string[] = [];
    for (const a of alphabet) for (const b of alphabet) for (const c of alphabet) parts.push(`${a}${b}${c}`, `${a}${b}`, a);
    for (const part of parts.filter((p) => /^[a-z0-9]/.test(p))) {
      const name = jsName(part);
      expect(name).toMatch(/^[A-Za-z_$][A-Za-z0-9_$]*$/);
      expect(seen.get(name) ?? part).toBe(part);
      seen.set(name, part);
      expect(idPart(name)).toBe(part);
    }
  });

  it('refuses what no id maps to, saying why', () => {
    expect(() => idPart('_abc')).toThrow(/only a part starting with a digit/);
    expect(() => idPart('Abc')).toThrow(/names no tool/);
    expect(() => idPart('a-b')).toThrow(/not a JavaScript identifier/);
    expect(() => toolId([])).toThrow(/empty path/);
    expect(() => jsName('Bad')).toThrow(/not a tool id part/);
  });
});
