// The UI in headless Chromium against a real TSD (HOURGLASS_URL; started empty by
// crates/server/tests/browser.rs, which runs this file). The test seeds its own data.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const BASE = process.env.HOURGLASS_URL;
const ARTIFACTS = process.env.HOURGLASS_ARTIFACTS || new URL('../test-artifacts/', import.meta.url).pathname;
const START = '2013/01/01-00:00:00';
const END = '2013/01/01-03:00:00';
let browser;

async function put(points) {
  const r = await fetch(`${BASE}/api/put`, { method: 'POST', body: JSON.stringify(points) });
  assert.equal(r.status, 204, await r.text());
}

// OpenTSDB's fixture (web01: 1..300, web02: 300..1, every 30 s from 1356998430), a second
// metric, and a global annotation.
async function seed() {
  const points = [];
  for (let i = 0; i < 300; i++) {
    const timestamp = 1356998430 + i * 30;
    points.push({ metric: 'sys.cpu.user', timestamp, value: i + 1, tags: { host: 'web01' } });
    points.push({ metric: 'sys.cpu.user', timestamp, value: 300 - i, tags: { host: 'web02' } });
    points.push({ metric: 'sys.mem.free', timestamp, value: 1000 + i * 10, tags: { host: 'web01' } });
  }
  await put(points);
  const note = await fetch(`${BASE}/api/annotation`, {
    method: 'POST',
    body: JSON.stringify({ startTime: 1357000000, description: 'deploy v2' }),
  });
  assert.equal(note.status, 200, await note.text());
}

async function shot(page, name) {
  await page.screenshot({ path: `${ARTIFACTS}/${name}.png`, fullPage: true });
}

// Rows of the legend: label → {last, min, max, axis}.
async function legend(page) {
  return page.$$eval('#legend tr[data-series]', (rows) => Object.fromEntries(rows.map((r) => [
    r.dataset.series,
    {
      axis: r.querySelector('.axis').textContent,
      last: r.querySelector('.last').textContent,
      min: r.querySelector('.min').textContent,
      max: r.querySelector('.max').textContent,
    },
  ])));
}

async function runAndWait(page) {
  await page.click('#run');
  await page.waitForFunction(() => {
    const s = document.querySelector('#summary');
    return s && s.dataset.series !== undefined && !document.querySelector('#run').disabled;
  });
}

before(async () => {
  assert.ok(BASE, 'HOURGLASS_URL must name the TSD under test');
  await mkdir(ARTIFACTS, { recursive: true });
  await seed();
  browser = await chromium.launch({
    executablePath: process.env.HOURGLASS_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
});

after(async () => {
  await browser?.close();
});

test('build a query with autocomplete, run it, and restore it from the URL', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${BASE}/`);
  await page.waitForSelector('#version:not(:empty)');
  assert.match(await page.textContent('#version'), /TSD 2\.4\.0/);

  await page.fill('#start', START);
  await page.fill('#end', END);
  await page.selectOption('#tz', 'UTC');

  // Metric: type a prefix, pick the suggestion.
  const metric = page.locator('.query .metric').first();
  await metric.click();
  await metric.pressSequentially('sys.cpu.u', { delay: 20 });
  const suggestion = page.locator('.suggestions:visible li', { hasText: 'sys.cpu.user' });
  await suggestion.waitFor();
  await suggestion.click();
  assert.equal(await metric.inputValue(), 'sys.cpu.user');

  // A tag filter: key and value from suggestions.
  await page.click('.add-filter');
  const tagk = page.locator('.filter .tagk').first();
  await tagk.click();
  await tagk.pressSequentially('ho', { delay: 20 });
  await page.locator('.suggestions:visible li', { hasText: 'host' }).click();
  assert.equal(await tagk.inputValue(), 'host');
  const tagv = page.locator('.filter .tagv').first();
  await tagv.click();
  await tagv.pressSequentially('web0', { delay: 20 });
  const values = page.locator('.suggestions:visible li');
  await values.first().waitFor();
  assert.deepEqual(await values.allTextContents(), ['web01', 'web02']);
  await values.filter({ hasText: 'web01' }).click();
  await shot(page, '01-builder');

  await runAndWait(page);
  await shot(page, '02-one-series');
  assert.equal(await page.getAttribute('#summary', 'data-series'), '1');
  assert.equal(await page.getAttribute('#summary', 'data-points'), '300');
  assert.deepEqual(await legend(page), {
    'sys.cpu.user{host=web01}': { axis: 'left', last: '300', min: '1', max: '300' },
  });
  assert.equal(await page.locator('#chart canvas').count() > 0, true);

  // The view is in the URL, in OpenTSDB's /q form; a reload restores it.
  const hash = decodeURIComponent(new URL(page.url()).hash);
  assert.ok(hash.includes('m=sum:sys.cpu.user{host=web01}'), hash);
  assert.ok(hash.includes(`start=${START}`), hash);
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#summary')?.dataset.series === '1');
  assert.equal(await page.locator('.query .metric').first().inputValue(), 'sys.cpu.user');
  assert.equal(await page.locator('.filter .tagv').first().inputValue(), 'web01');
  assert.equal(await page.inputValue('#start'), START);
  assert.deepEqual(Object.keys(await legend(page)), ['sys.cpu.user{host=web01}']);

  // Group by every host: two series, with OpenTSDB's numbers.
  await page.fill('.filter .tagv', '*');
  await page.selectOption('.filter .ftype', 'wildcard');
  await runAndWait(page);
  const two = await legend(page);
  assert.deepEqual(Object.keys(two), ['sys.cpu.user{host=web01}', 'sys.cpu.user{host=web02}']);
  assert.equal(two['sys.cpu.user{host=web02}'].last, '1');
  assert.equal(two['sys.cpu.user{host=web02}'].max, '300');

  // Hovering the chart shows the values under the cursor.
  const over = page.locator('#chart .u-over');
  const box = await over.boundingBox();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
  const hovered = await page.$$eval('#legend td.hover', (tds) => tds.map((t) => t.textContent));
  assert.equal(hovered.length, 2);
  assert.ok(hovered.every((v) => /^\d+(\.\d+)?$/.test(v)), hovered.join());
  await page.close();
});

test('a right axis, log scales and annotations, kept across a reload', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const hash = `start=${START}&end=${END}&tz=UTC&m=sum:sys.cpu.user&o=&m=avg:sys.mem.free&o=axis x1y2&ylog`;
  await page.goto(`${BASE}/#${hash}`);
  await page.waitForFunction(() => document.querySelector('#summary')?.dataset.series === '2');
  const rows = await legend(page);
  assert.deepEqual(rows['sys.cpu.user{}'], { axis: 'left', last: '301', min: '301', max: '301' });
  assert.equal(rows['sys.mem.free{host=web01}'].axis, 'right');
  assert.equal(rows['sys.mem.free{host=web01}'].last, '3990');
  assert.equal(await page.isChecked('#ylog'), true);
  assert.equal(await page.locator('.query .right-axis').nth(1).isChecked(), true);
  // Three axes: time, left, right.
  assert.equal(await page.locator('#chart .u-axis').count(), 3);
  // The global annotation is marked on the chart.
  const marker = page.locator('#chart .annotation-marker');
  assert.equal(await marker.count(), 1);
  assert.equal(await marker.getAttribute('title'), 'deploy v2');
  assert.equal(await marker.isVisible(), true);
  await shot(page, '03-two-axes');

  await page.check('#y2log');
  await page.waitForFunction(() => location.hash.includes('y2log'));
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#summary')?.dataset.series === '2');
  assert.equal(await page.isChecked('#y2log'), true);
  assert.equal(await page.isChecked('#ylog'), true);
  await page.close();
});

test('API errors are shown plainly', async () => {
  const page = await browser.newPage();
  await page.goto(`${BASE}/#start=${START}&end=${END}&m=sum:nope`);
  const error = page.locator('#error');
  await error.waitFor({ state: 'visible' });
  assert.match(await error.textContent(), /No such name for 'metrics': 'nope'/);
  await shot(page, '04-error');
  await page.close();
});

test('/q links open in the UI', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${BASE}/q?start=${START}&end=${END}&m=sum:sys.cpu.user{host=*}`);
  await page.waitForFunction(() => document.querySelector('#summary')?.dataset.series === '2');
  assert.equal(new URL(page.url()).pathname, '/');
  assert.deepEqual(Object.keys(await legend(page)).sort(), ['sys.cpu.user{host=web01}', 'sys.cpu.user{host=web02}']);

  // Dragging over the chart zooms: the range narrows to absolute times and the query reruns.
  const box = await page.locator('#chart .u-over').boundingBox();
  await page.mouse.move(box.x + box.width * 0.25, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => /^\d+$/.test(document.querySelector('#start').value));
  await page.waitForFunction(() => !document.querySelector('#run').disabled);
  const start = Number(await page.inputValue('#start'));
  const end = Number(await page.inputValue('#end'));
  assert.ok(start > 1356998400000 && end < 1357009200000 && start < end, `${start} ${end}`);
  const points = Number(await page.getAttribute('#summary', 'data-points'));
  assert.ok(points > 0 && points < 600, String(points));
  await shot(page, '05-zoomed');
  await page.close();
});
