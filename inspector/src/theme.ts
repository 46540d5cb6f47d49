import lightTheme from 'highlight.js/styles/github.css?inline';
import darkTheme from 'highlight.js/styles/github-dark.css?inline';
import { useEffect, useState } from 'preact/hooks';

/** The colour scheme: the system's unless the user picked one (kept in localStorage). */
export type ThemeChoice = 'auto' | 'light' | 'dark';
export type Theme = 'light' | 'dark';

const STORAGE = 'arium.inspector.theme';
const listeners = new Set<() => void>();
const media = matchMedia('(prefers-color-scheme: dark)');

export function themeChoice(): ThemeChoice {
  try {
    const saved = localStorage.getItem(STORAGE);
    return saved === 'light' || saved === 'dark' ? saved : 'auto';
  } catch {
    return 'auto';
  }
}

export function resolvedTheme(choice: ThemeChoice = themeChoice()): Theme {
  if (choice === 'auto') return media.matches ? 'dark' : 'light';
  return choice;
}

export function setThemeChoice(choice: ThemeChoice): void {
  try {
    if (choice === 'auto') localStorage.removeItem(STORAGE);
    else localStorage.setItem(STORAGE, choice);
  } catch {
    // Private modes may refuse storage: the choice then lasts for this page only.
  }
  apply(choice);
}

let current: ThemeChoice = 'auto';
let style: HTMLStyleElement | null = null;

/**
 * Sets `data-theme` on <html> (the page's CSS variables follow it) and swaps the highlight.js theme,
 * whose two stylesheets use the same selectors and so cannot both be loaded.
 */
export function apply(choice: ThemeChoice = themeChoice()): void {
  current = choice;
  const theme = resolvedTheme(choice);
  document.documentElement.dataset.theme = theme;
  document.documentElement.style.colorScheme = theme;
  if (!style) {
    style = document.createElement('style');
    style.dataset.hljs = '';
    document.head.append(style);
  }
  style.textContent = theme === 'dark' ? darkTheme : lightTheme;
  for (const listener of listeners) listener();
}

media.addEventListener('change', () => {
  if (current === 'auto') apply('auto');
});

export function useTheme(): { choice: ThemeChoice; theme: Theme } {
  const [, setTick] = useState(0);
  useEffect(() => {
    const listener = () => setTick((n) => n + 1);
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }, []);
  return { choice: current, theme: resolvedTheme(current) };
}
