import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The inspector is served by `arium serve` from dist/inspector at `/` and `/p/<project>/`: its assets
// are absolute (`/assets/…`) so both pages load the same files.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  publicDir: false,
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: '../dist/inspector',
    emptyOutDir: true,
    // The page's CSP allows scripts from 'self' only: no inlined module preload polyfill.
    modulePreload: { polyfill: false },
    // Fonts or images small enough to inline would become data: URLs; keep every asset a file.
    assetsInlineLimit: 0,
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 1024,
  },
});
