// Imports an npm package: `yaml`, listed in the project's package.json and installed with
// `arium install`. The engine bundles this file with the package for the sandbox when the tool loads.
import { stringify } from 'yaml';

export default async function run(_input, ctx) {
  const missing = (error) => (error.code === 'NOT_FOUND' ? { entries: [] } : Promise.reject(error));
  const { entries } = await ctx.vfs.list('/notes', { recursive: true }).catch(missing);
  const notes = [];
  for (const entry of entries.filter((e) => e.type === 'file' && e.path.endsWith('.md'))) {
    const text = await ctx.vfs.read(entry.path);
    notes.push({
      path: entry.path,
      title: text.match(/^#+\s+(.+)$/m)?.[1] ?? entry.name,
      open: (text.match(/^- \[ \]/gm) ?? []).length,
      done: (text.match(/^- \[x\]/gim) ?? []).length,
    });
  }
  const yaml = stringify({ notes });
  await ctx.vfs.write('/notes/index.yaml', yaml);
  return { path: '/notes/index.yaml', yaml };
}
