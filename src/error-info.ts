import { type ErrorInfo, isRetryable, type Stage, ToolFailure } from './errors.js';
import { ERROR_MESSAGE_CHARS } from './limits.js';

/**
 * Plain JSON error for a result. Host stacks never leave this function; only a tool's own stack does.
 * `scrub` runs on the message before it is cut: a cut through a secret's value leaves its first
 * characters, which scrubbing after the cut would not recognise.
 */
export function toErrorInfo(thrown: unknown, tool: string, stage: Stage, scrub: (text: string) => string = (text) => text): ErrorInfo {
  if (isFailure(thrown)) {
    const info: ErrorInfo = {
      type: 'ToolError',
      tool,
      stage: thrown.stage,
      code: thrown.code,
      message: bounded(scrub(thrown.message)),
      retryable: isRetryable(thrown.code),
    };
    if (thrown.details) info.details = thrown.details;
    if (thrown.toolStack) info.stack = thrown.toolStack;
    return info;
  }
  let message: string;
  try {
    message = thrown instanceof Error ? String(thrown.message) : String(thrown);
  } catch {
    message = 'unprintable value';
  }
  return {
    type: 'ToolError',
    tool,
    stage,
    code: 'INTERNAL',
    message: bounded(scrub(`Internal error in the engine while running ${tool}: ${message}`)),
    retryable: false,
  };
}

/** A message cut to ERROR_MESSAGE_CHARS, saying how much was cut. */
function bounded(message: string): string {
  if (message.length <= ERROR_MESSAGE_CHARS) return message;
  return `${message.slice(0, ERROR_MESSAGE_CHARS)}… (${message.length - ERROR_MESSAGE_CHARS} more characters cut)`;
}

/**
 * `instanceof` runs the thrown value's prototype lookup, and a hostile value (a revoked Proxy, a Proxy
 * whose getPrototypeOf trap throws) makes that throw: the catch block that builds the result must not.
 */
function isFailure(thrown: unknown): thrown is ToolFailure {
  try {
    return thrown instanceof ToolFailure;
  } catch {
    return false;
  }
}
