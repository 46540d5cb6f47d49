// A JavaScript tool: runs in an isolated-vm isolate with no Node APIs. It reaches the VFS only through
// ctx.vfs, which the engine checks on every operation: this tool declared vfs.read:/notes/** and nothing
// else, so reading any other path fails the call with DENIED, whatever the caller was granted.
export default async function run(input, ctx) {
  const text = await ctx.vfs.read(input.path);
  const items = text.split('\n').filter((line) => /^\s*[-*] \[[ xX]\]/.test(line));
  const open = items.filter((line) => /\[ \]/.test(line));
  const next = open.length > 0 ? open[0].replace(/^\s*[-*] \[ \]\s*/, '') : null;
  return { path: input.path, done: items.length - open.length, open: open.length, next };
}
