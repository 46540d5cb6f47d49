// A TypeScript tool: the engine strips the types when it loads the file, then runs it in an
// isolated-vm isolate with a fresh global scope per call. No VFS access is declared, so it has none.
interface Input {
  text: string;
  top?: number;
}

interface WordCount {
  word: string;
  count: number;
}

export default function run(input: Input): { lines: number; words: number; characters: number; top: WordCount[] } {
  const words = input.text.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? [];
  const counts = new Map<string, number>();
  for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1);
  const top = [...counts]
    .map(([word, count]) => ({ word, count }))
    .sort((a, b) => b.count - a.count || a.word.localeCompare(b.word))
    .slice(0, input.top ?? 5);
  return { lines: input.text.split('\n').length, words: words.length, characters: [...input.text].length, top };
}
