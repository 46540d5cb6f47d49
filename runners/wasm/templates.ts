import type { RunnerTemplate } from '../../src/runner.js';

/**
 * `arium init --template c|rust`: a wasm tool from source, with the command that builds its module.
 * Both read their input JSON on stdin and write their output JSON on stdout, as every wasm tool does.
 */

const definition = (id: string, name: string, language: string) => ({
  id,
  name,
  description: `Adds up a list of numbers (a WebAssembly tool written in ${language})`,
  runner: 'wasm-runner',
  entry: `${id.replace('.', '-')}.wasm`,
  schema: {
    type: 'object',
    properties: { numbers: { type: 'array', items: { type: 'number' }, maxItems: 10000 } },
    required: ['numbers'],
    additionalProperties: false,
  },
  output_schema: { type: 'object', properties: { sum: { type: 'number' } }, required: ['sum'] },
  permissions: ['exec.wasm'],
  limits: { timeout_ms: 2000, memory_mb: 32 },
  examples: [{ numbers: [1, 2, 3.5] }],
});

const C_SOURCE = `// A WebAssembly tool in C: the input JSON comes on stdin, the output JSON goes to stdout, and what
// is written to stderr becomes the call's logs. A non-zero exit fails the call with that stderr.
// Build: clang --target=wasm32-wasi -O2 src/sum.c -o math-sum-c.wasm   (from the tools folder)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  static char input[1 << 20];
  size_t n = fread(input, 1, sizeof input - 1, stdin);
  input[n] = 0;
  // The engine has validated the input against the schema: {"numbers": [...]}.
  char *p = strchr(input, '[');
  if (!p) {
    fprintf(stderr, "expected {\\"numbers\\": [...]}\\n");
    return 1;
  }
  double sum = 0;
  for (p++; *p && *p != ']';) {
    char *end;
    double x = strtod(p, &end);
    if (end == p) {
      p++;
      continue;
    }
    sum += x;
    p = end;
  }
  printf("{\\"sum\\":%.17g}\\n", sum);
  return 0;
}
`;

const RUST_SOURCE = `// A WebAssembly tool in Rust: the input JSON comes on stdin, the output JSON goes to stdout, and
// what is written to stderr becomes the call's logs. A panic or a non-zero exit fails the call.
// Build: rustc --target wasm32-wasi -O src/sum.rs -o math-sum-rust.wasm   (from the tools folder)
use std::io::Read;

fn main() {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("stdin");
    // The engine has validated the input against the schema: {"numbers": [...]}.
    let start = input.find('[').expect("expected {\\"numbers\\": [...]}");
    let end = input.rfind(']').expect("expected {\\"numbers\\": [...]}");
    let sum: f64 = input[start + 1..end]
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<f64>().expect("a number"))
        .sum();
    println!("{{\\"sum\\":{}}}", sum);
}
`;

export const WASM_TEMPLATES: Readonly<Record<string, RunnerTemplate>> = {
  c: {
    summary: 'a C tool compiled to WebAssembly with clang (wasm32-wasi, wasi-libc)',
    files: { 'math-sum-c.json': definition('math.sum-c', 'Sum (C)', 'C'), 'src/sum.c': C_SOURCE },
    build: ['clang', '--target=wasm32-wasi', '-O2', 'src/sum.c', '-o', 'math-sum-c.wasm'],
    install: 'apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32 (Debian, Ubuntu), or the WASI SDK',
  },
  rust: {
    summary: 'a Rust tool compiled to WebAssembly with rustc (wasm32-wasi)',
    files: { 'math-sum-rust.json': definition('math.sum-rust', 'Sum (Rust)', 'Rust'), 'src/sum.rs': RUST_SOURCE },
    build: ['rustc', '--target', 'wasm32-wasi', '-O', 'src/sum.rs', '-o', 'math-sum-rust.wasm'],
    install: 'rustup target add wasm32-wasi, or apt-get install rustc libstd-rust-dev-wasm32 (Debian)',
  },
};
