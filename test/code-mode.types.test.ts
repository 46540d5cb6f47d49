import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { BUILTINS } from '../runners/builtin/index.js';
import { type TypedTool, typeDeclarations } from '../src/code-mode/types.js';
import { ToolFailure } from '../src/errors.js';
import { DISCOVERY_LIMITS } from '../src/limits.js';

const DEMO_TOOLS = join(import.meta.dirname, '..', 'workspace', 'demo', 'tools');

/** The compiler's errors for the declarations and a program using them (strict, no emit). */
function typeErrors(declarations: string, program = ''): string[] {
  const files = new Map([
    ['/virtual/tools.d.ts', declarations],
    ['/virtual/program.ts', `export {};\n${program}\n`],
  ]);
  const options: ts.CompilerOptions = { strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, lib: ['lib.es2022.d.ts'], types: [] };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) => {
    const text = files.get(name);
    return text !== undefined ? ts.createSourceFile(name, text, version) : getSourceFile(name, version, ...rest);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => files.has(name) || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => files.get(name) ?? readFile(name);
  const built = ts.createProgram([...files.keys()], options, host);
  return ts
    .getPreEmitDiagnostics(built)
    .map(
      (d) =>
        `${d.file?.fileName ?? ''}:${d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`,
    );
}

function demoTools(): TypedTool[] {
  return readdirSync(DEMO_TOOLS)
    .filter((name) => name.endsWith('.json'))
    .map((name) => JSON.parse(readFileSync(join(DEMO_TOOLS, name), 'utf8')) as TypedTool);
}

describe('code.types declarations type-check with the TypeScript compiler', () => {
  it('for the builtins and the demo project’s tools, and a program calling them', () => {
    const tools = [...BUILTINS.map((b) => b.tool.spec), ...demoTools()];
    const text = typeDeclarations(tools);
    expect(text).toContain('declare const tools: {');
    expect(text).toContain('wordFreq(input:');
    const program = `
async function main() {
  const file = await tools.fs.read({ path: '/a.txt', encoding: 'utf8' });
  const found = await tools.tools.search({ query: 'words' });
  const listed = await tools.fs.list({});
  // oneOf members that only list required keys leave the object's own type alone.
  const hashed = await tools.system.hash({ text: 'x', algorithm: 'sha256' });
  const types: { declarations: string; tools: number } = await tools.code.types({});
  return [file, found, listed, hashed, types];
}
void main;`;
    expect(typeErrors(text, program)).toEqual([]);
    // And a wrong call is caught: an unknown property of a closed schema, a missing required one.
    expect(typeErrors(text, `void tools.fs.read({ path: '/a', nope: 1 });`).join('\n')).toMatch(/nope/);
    expect(typeErrors(text, `void tools.fs.write({ path: '/a' });`).join('\n')).toMatch(/content/);
  });

  it('is the same text for the same tools in any order', () => {
    const tools = [...BUILTINS.map((b) => b.tool.spec), ...demoTools()];
    expect(typeDeclarations([...tools].reverse())).toBe(typeDeclarations(tools));
  });

  it('makes a tool whose id is a prefix of another a function with properties', () => {
    const text = typeDeclarations([
      { id: 'a.b', description: 'outer', schema: { type: 'object', properties: { x: { type: 'number' } }, required: ['x'] } },
      { id: 'a.b.c', description: 'inner', schema: { type: 'object' }, output_schema: { type: 'string' } },
    ]);
    expect(
      typeErrors(
        text,
        `async function f() { const n: unknown = await tools.a.b({ x: 1 }); const s: string = await tools.a.b.c({}); return [n, s]; }\nvoid f;`,
      ),
    ).toEqual([]);
  });

  const hostile: Array<[string, TypedTool[]]> = [
    [
      'recursive $ref (a tree), a $ref to the root, and a self-referencing alias',
      [
        {
          id: 'odd.tree',
          schema: {
            type: 'object',
            properties: { root: { $ref: '#/$defs/node' }, again: { $ref: '#' }, loop: { $ref: '#/$defs/loop' }, away: { $ref: 'https://x/y.json' } },
            $defs: {
              node: { type: 'object', properties: { children: { type: 'array', items: { $ref: '#/$defs/node' } }, value: { type: 'string' } } },
              loop: { anyOf: [{ $ref: '#/$defs/loop' }, { type: 'string' }] },
            },
          },
        },
      ],
    ],
    [
      'keys that are not identifiers',
      [
        {
          id: 'odd.keys',
          schema: {
            type: 'object',
            properties: {
              'a-b': { type: 'string' },
              '0x': { type: 'number' },
              'with space': {},
              '"quoted"': {},
              __proto__x: {},
              '\u2028': { type: 'string' },
              '': {},
            },
            required: ['a-b'],
          },
        },
      ],
    ],
    [
      'a huge enum, consts of every kind, nullable, tuples, additionalProperties',
      [
        {
          id: 'odd.enum',
          schema: {
            type: 'object',
            properties: {
              big: { enum: Array.from({ length: 5000 }, (_, i) => `v${i}`) },
              small: { enum: ['a', 1, null, true, -2.5] },
              c: { const: { k: [1, 'x'] } },
              n: { type: 'string', nullable: true },
              both: { type: ['string', 'null'] },
              tuple: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], items: false },
              map: { type: 'object', additionalProperties: { type: 'integer' } },
              open: { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: true },
              neither: { not: { type: 'string' } },
              one: { oneOf: [{ type: 'string' }, { type: 'object', properties: { x: { type: 'number' } } }] },
              all: {
                allOf: [
                  { type: 'object', properties: { a: { type: 'string' } } },
                  { type: 'object', properties: { b: { type: 'number' } } },
                ],
              },
              nothing: false,
              weird: { type: 'wat' },
            },
          },
        },
      ],
    ],
    [
      'descriptions that try to end the comment',
      [
        {
          id: 'odd.comments',
          description: 'ends here */ declare const injected: number; /*',
          schema: {
            type: 'object',
            properties: { p: { type: 'string', description: '*/ } ; declare const x: 1; /** \r\n and on' } },
            $defs: { d: { description: '*/*/*/', type: 'string' } },
          },
          output_schema: { type: 'object', properties: { q: { $ref: '#/$defs/d' } }, $defs: { d: { description: 'x */ y', type: 'string' } } },
        },
      ],
    ],
  ];

  it.each(hostile)('for odd schemas: %s', (_name, tools) => {
    const text = typeDeclarations(tools);
    expect(typeErrors(text)).toEqual([]);
    // Nothing the schema says becomes code: the only declarations are the namespace and `tools`.
    expect(text).not.toMatch(/^\s*declare const (?!tools)/m);
  });

  it('types what it cannot express as unknown with a comment saying why', () => {
    const text = typeDeclarations(hostile[0]?.[1] as TypedTool[]);
    expect(text).toMatch(/unknown \/\* \$ref #\/\$defs\/loop refers to itself/);
    expect(text).toMatch(/unknown \/\* \$ref https:\/\/x\/y\.json points outside this schema \*\//);
    const enumText = typeDeclarations(hostile[2]?.[1] as TypedTool[]);
    expect(enumText).toMatch(/string \/\* one of 5000 values/);
  });

  it('refuses past the size limit, saying by how much, rather than cutting', () => {
    const tools = demoTools();
    const whole = Buffer.byteLength(typeDeclarations(tools));
    let thrown: unknown;
    try {
      typeDeclarations(tools, whole - 1);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ToolFailure);
    expect(thrown).toMatchObject({ code: 'OUTPUT_LIMIT', details: { bytes: whole, limit_bytes: whole - 1 } });
    expect(DISCOVERY_LIMITS.types_bytes).toBeGreaterThan(whole);
  });
});
