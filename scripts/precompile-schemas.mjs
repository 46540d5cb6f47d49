// Part of the build (after tsc): compiles the schemas every engine start needs into plain code, so that
// loading a tool definition or calling a builtin does not load ajv and compile the tool meta-schema, the
// draft's meta-schema or the builtin's input schema first (src/validation.ts, "Validators compiled at build time"). Writes dist/generated/validators.cjs.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const dist = join(root, 'dist');
const { precompileSource } = await import(join(dist, 'src', 'validation.js'));
const { toolMetaSchema } = await import(join(dist, 'src', 'registry', 'meta-schema.js'));
const { DEFAULT_CATALOG } = await import(join(dist, 'runners', 'index.js'));
const { BUILTINS } = await import(join(dist, 'runners', 'builtin', 'index.js'));

// As src/registry/load.ts compiles it: without $id.
const { $id: _id, ...meta } = toolMetaSchema(DEFAULT_CATALOG);
mkdirSync(join(dist, 'generated'), { recursive: true });
// The builtins' input schemas as runners/builtin/define.ts compiles them (defaults filled in, trusted).
const builtins = BUILTINS.map((b) => ({ schema: b.tool.spec.schema, defaults: true, trusted: true }));
writeFileSync(join(dist, 'generated', 'validators.cjs'), precompileSource([{ schema: meta }, ...builtins]));
