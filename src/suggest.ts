/** Ids within a small edit distance of `id`, closest first: the "did you mean" of an unknown tool id. */
export function suggest(id: string, ids: readonly string[]): string[] {
  if (id.length > 128) return [];
  const scored: Array<[number, string]> = [];
  for (const candidate of ids) {
    const d = distance(id, candidate);
    if (d <= Math.max(2, Math.floor(candidate.length / 4))) scored.push([d, candidate]);
  }
  return scored
    .sort((a, b) => a[0] - b[0])
    .slice(0, 3)
    .map(([, c]) => c);
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0] as number;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j] as number;
      row[j] = Math.min((row[j] as number) + 1, (row[j - 1] as number) + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length] as number;
}
