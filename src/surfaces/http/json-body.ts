import { type ParseError, parse, printParseErrorCode } from 'jsonc-parser';

/**
 * Where a request body stops being JSON. V8's `JSON.parse` names a position in some messages and not in
 * others ("Unexpected end of JSON input", "Unexpected token 'x', … is not valid JSON" on Node 20), so the
 * position is found by parsing again with jsonc-parser set to plain JSON (no comments, no trailing commas)
 * once `JSON.parse` has failed; it reports the offending token's offset.
 */
export interface JsonBreak {
  /** Offset of the offending token, in characters (UTF-16 code units) from the start of the body. */
  position: number;
  /** The same place as 1-based line and column, for a person reading a multi-line body. */
  line: number;
  column: number;
  /** jsonc-parser's name for what was wrong there, e.g. `ValueExpected`, `CloseBraceExpected`. */
  problem: string;
}

export function jsonBreak(text: string, v8Message: string): JsonBreak {
  const errors: ParseError[] = [];
  parse(text, errors, { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false });
  const first = errors[0];
  // Both parsers reject the same texts; should jsonc-parser ever accept one V8 refuses, V8's own position
  // (or the end of the body) is the best place left to point at.
  const fromV8 = /position (\d+)/.exec(v8Message);
  const position = first ? first.offset : fromV8 ? Number(fromV8[1]) : text.length;
  const before = text.slice(0, position);
  const line = before.split('\n').length;
  const column = position - (before.lastIndexOf('\n') + 1) + 1;
  return { position, line, column, problem: first ? printParseErrorCode(first.error) : 'InvalidJson' };
}
