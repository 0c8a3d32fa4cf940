// Builds the UI into dist/: one script (uPlot included), one stylesheet, the page.
// The output is committed and embedded into the TSD binary; CI rebuilds it and checks that
// nothing changed, so keep this deterministic.
import { build } from 'esbuild';
import { copyFile, mkdir } from 'node:fs/promises';

const here = new URL('.', import.meta.url).pathname;
const common = { bundle: true, minify: true, legalComments: 'none', logLevel: 'warning', absWorkingDir: here };

await mkdir(`${here}dist`, { recursive: true });
await build({ ...common, entryPoints: ['src/main.js'], outfile: 'dist/app.js', format: 'iife', target: 'es2020' });
await build({ ...common, entryPoints: ['src/app.css'], outfile: 'dist/app.css' });
await copyFile(`${here}src/index.html`, `${here}dist/index.html`);
