// Reads the notes and writes an index of them, through ctx.vfs only. It declared vfs.read on /notes
// and vfs.write on /notes/INDEX.md alone: any other write fails the call with DENIED. The index is
// committed only if the call succeeds (a call is atomic on the VFS).
export default async function run(_input, ctx) {
  const missing = (error) => (error.code === 'NOT_FOUND' ? { entries: [] } : Promise.reject(error));
  const { entries } = await ctx.vfs.list('/notes', { recursive: true }).catch(missing);
  const notes = entries.filter((e) => e.type === 'file' && e.path.endsWith('.md') && e.path !== '/notes/INDEX.md');
  const lines = ['# Notes', ''];
  for (const note of notes) {
    const text = await ctx.vfs.read(note.path);
    const heading = text.match(/^#+\s+(.+)$/m)?.[1] ?? note.name;
    lines.push(`- [${heading}](${note.path}) (${note.size} bytes)`);
  }
  console.log(`indexed ${notes.length} note(s)`);
  await ctx.vfs.write('/notes/INDEX.md', `${lines.join('\n')}\n`);
  return { path: '/notes/INDEX.md', notes: notes.length };
}
