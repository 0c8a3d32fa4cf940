// The tree browser in headless Chromium against a real TSD (HOURGLASS_URL, started with
// tsd.core.tree.enable_processing = true by crates/server/tests/browser.rs): a tree defined
// over /api/tree, filled by creating the series' TSMeta, browsed, and a leaf picked into the
// query.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const BASE = process.env.HOURGLASS_URL;
const ARTIFACTS = process.env.HOURGLASS_ARTIFACTS || new URL('../test-artifacts/', import.meta.url).pathname;
const T0 = 1356998400; // 2013/01/01-00:00:00 UTC
const RANGE = 'start=2013/01/01-00:00:00&end=2013/01/01-01:00:00&tz=UTC';
let browser;

async function call(method, path, body, status) {
  const r = await fetch(`${BASE}${path}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  assert.equal(r.status, status, `${method} ${path}: ${text}`);
  return text ? JSON.parse(text) : null;
}

before(async () => {
  assert.ok(BASE, 'HOURGLASS_URL must give the base URL of the TSD under test');
  await mkdir(ARTIFACTS, { recursive: true });
  const points = [];
  for (let i = 0; i < 10; i++) {
    for (const host of ['alpha', 'beta']) {
      points.push({ metric: 'tree.demo.load', timestamp: T0 + 60 * i, value: i, tags: { host } });
    }
  }
  await call('POST', '/api/put', points, 204);
  const tree = await call('POST', '/api/tree', { name: 'Hosts', enabled: true }, 200);
  await call('POST', '/api/tree/rules', [
    { treeId: tree.treeId, level: 0, order: 0, type: 'TAGK', field: 'host' },
    { treeId: tree.treeId, level: 1, order: 0, type: 'METRIC' },
  ], 204);
  // Creating a series' TSMeta runs it through the enabled trees.
  for (const host of ['alpha', 'beta']) {
    await call('POST', `/api/uid/tsmeta?m=tree.demo.load{host=${host}}&create=true`, {}, 200);
  }
  browser = await chromium.launch({
    executablePath: process.env.HOURGLASS_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
});

after(async () => {
  await browser?.close();
});

test('a leaf picked in the tree browser becomes a sub-query and is charted', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${BASE}/#${RANGE}`);
  await page.click('#trees summary');
  const branches = page.locator('#tree-view .tree-branch');
  await branches.first().waitFor();
  assert.deepEqual(await branches.allTextContents(), ['alpha', 'beta']);
  assert.equal(await page.locator('#tree-choice option').first().textContent(), 'Hosts');
  await branches.nth(1).click();
  const leaf = page.locator('#tree-view .tree-leaf');
  await leaf.first().waitFor();
  assert.deepEqual(await leaf.allTextContents(), ['tree.demo.load']);
  assert.equal(await branches.nth(1).getAttribute('aria-expanded'), 'true');
  await page.screenshot({ path: `${ARTIFACTS}/trees-01-browser.png`, fullPage: true });
  await leaf.first().click();
  await page.waitForSelector('#view[data-state="done"], #view[data-state="error"]');
  assert.equal(await page.getAttribute('#view', 'data-state'), 'done', await page.textContent('#error'));
  assert.equal(await page.inputValue('.query .metric'), 'tree.demo.load');
  assert.equal(await page.inputValue('.query .filter .tagk'), 'host');
  assert.equal(await page.inputValue('.query .filter .tagv'), 'beta');
  assert.equal(await page.getAttribute('#summary', 'data-series'), '1');
  // Closing a branch removes its children.
  await branches.nth(1).click();
  assert.equal(await leaf.count(), 0);
  await page.close();
  assert.deepEqual(errors, [], 'errors in the page');
});
