// The UI in headless Chromium against a real TSD: HOURGLASS_URL names it (started empty, with
// tsd.core.auto_create_metrics = true, by crates/server/tests/browser.rs). The tests seed
// their own data through /api/put and /api/annotation, and use absolute times in UTC.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const BASE = process.env.HOURGLASS_URL;
const ARTIFACTS = process.env.HOURGLASS_ARTIFACTS || new URL('../test-artifacts/', import.meta.url).pathname;
const T0 = 1356998400; // 2013/01/01-00:00:00 UTC
const START = '2013/01/01-00:00:00';
const END = '2013/01/01-03:00:00';
const RANGE = `start=${START}&end=${END}&tz=UTC`;
const NOTE_TIME = 1357000000;
const HOSTS = 25;
const LOAD_POINTS = 4000;
let browser;

async function post(path, body, status) {
  const r = await fetch(`${BASE}${path}`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(r.status, status, `POST ${path}: ${await r.text()}`);
}

// OpenTSDB's fixture: sys.cpu.user web01 1..300 and web02 300..1, every 30 s from T0 + 30;
// sys.cpu.system 0, 2, 4... on both hosts; sys.if.bytes, a counter of 1000 a step on web01 in
// dc lga; load.test: 25 hosts of 4000 points each (100,000)
// every 2 s; a global annotation.
async function seed() {
  const fixture = [];
  for (let i = 0; i < 300; i++) {
    const timestamp = T0 + 30 + i * 30;
    fixture.push(
      { metric: 'sys.cpu.user', timestamp, value: i + 1, tags: { host: 'web01' } },
      { metric: 'sys.cpu.user', timestamp, value: 300 - i, tags: { host: 'web02' } },
      { metric: 'sys.cpu.system', timestamp, value: 2 * i, tags: { host: 'web01' } },
      { metric: 'sys.cpu.system', timestamp, value: 2 * i, tags: { host: 'web02' } },
      // A host of another metric only: not suggested for sys.cpu.user's host values.
      { metric: 'sys.disk.used', timestamp, value: i, tags: { host: 'web03' } },
      { metric: 'sys.if.bytes', timestamp, value: 1000 * i, tags: { host: 'web01', dc: 'lga' } },
    );
  }
  await post('/api/put', fixture, 204);
  for (let h = 0; h < HOSTS; h++) {
    const host = `host${String(h).padStart(2, '0')}`;
    const points = Array.from({ length: LOAD_POINTS }, (_, i) => ({
      metric: 'load.test', timestamp: T0 + i * 2, value: h * 100 + (i % 100), tags: { host },
    }));
    await post('/api/put', points, 204);
  }
  await post('/api/annotation', { startTime: NOTE_TIME, description: 'deploy v2' }, 200);
}

async function shot(page, name) {
  await page.screenshot({ path: `${ARTIFACTS}/${name}.png`, fullPage: true });
}

// A new page at `path`; close() fails the test if the page threw.
async function open(path) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${BASE}${path}`);
  const close = page.close.bind(page);
  page.close = async () => {
    await close();
    assert.deepEqual(errors, [], 'errors in the page');
  };
  return page;
}

// Waits for the query under way, or the one the page starts on load, to end as `want`.
async function settled(page, want = 'done') {
  await page.waitForSelector('#view[data-state="done"], #view[data-state="error"]');
  assert.equal(await page.getAttribute('#view', 'data-state'), want, `error shown: ${await page.textContent('#error')}`);
}

async function run(page) {
  await page.click('#run');
  await settled(page);
}

// Legend rows: label → {axis, last, min, max, hover}.
async function legend(page) {
  return page.$$eval('#legend tr[data-series]', (rows) => Object.fromEntries(rows.map((r) => [
    r.dataset.series,
    Object.fromEntries(['axis', 'last', 'min', 'max', 'hover'].map((c) => [c, r.querySelector(`.${c}`).textContent])),
  ])));
}

const stats = async (page) => ({
  series: Number(await page.getAttribute('#summary', 'data-series')),
  points: Number(await page.getAttribute('#summary', 'data-points')),
});

// The open suggestion list, once it shows `names` (or what it shows after 5 s).
async function suggestions(page, names) {
  const items = page.locator('.suggestions:visible li');
  let shown = [];
  for (const until = Date.now() + 5000; Date.now() < until; await page.waitForTimeout(50)) {
    shown = await items.allTextContents();
    if (JSON.stringify(shown) === JSON.stringify(names)) break;
  }
  return shown;
}

const hash = (page) => decodeURIComponent(new URL(page.url()).hash.slice(1)).replace(/\+/g, ' ');

// The plot area's box, and a point in it at fraction `fx` of its width.
async function plotAt(page, fx) {
  const box = await page.locator('#chart .u-over').boundingBox();
  return { box, x: box.x + box.width * fx, y: box.y + box.height / 2 };
}

before(async () => {
  assert.ok(BASE, 'HOURGLASS_URL must give the base URL of the TSD under test, e.g. http://127.0.0.1:4242');
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

test('a query built with autocomplete is run, charted, and restored from the URL', async () => {
  const page = await open('/');
  await page.waitForSelector('#version:not(:empty)');
  assert.match(await page.textContent('#version'), /^TSD 2\.4\.1/);

  // The range: one end typed, the other from the calendar (shown on the box's time).
  await page.selectOption('#tz', 'UTC');
  await page.fill('#start', START);
  await page.fill('#end', '2013/01/02');
  await page.getByRole('button', { name: 'Pick the end on a calendar' }).click();
  assert.equal(await page.inputValue('#end-picker'), '2013-01-02T00:00');
  await page.locator('#end-picker').fill('2013-01-01T03:00', { force: true });
  assert.equal(await page.inputValue('#end'), END);
  assert.equal(await page.textContent('#range'), `${START} → ${END}`);
  assert.equal(await page.isHidden('#error'), true, 'no metric yet is not an error');

  // Metric: a prefix, then the suggestion picked with the keyboard.
  const metric = page.locator('.query .metric');
  await metric.click();
  await metric.pressSequentially('sys.cpu.u', { delay: 15 });
  assert.deepEqual(await suggestions(page, ['sys.cpu.user']), ['sys.cpu.user']);
  await metric.press('ArrowDown');
  await metric.press('Enter');
  assert.equal(await metric.inputValue(), 'sys.cpu.user');
  assert.equal(await page.getAttribute('#view', 'data-state'), 'idle', 'Enter on a suggestion picks, not runs');

  // A tag filter: the key, then two values, each from suggestions.
  await page.click('.add-filter');
  const tagk = page.locator('.filter .tagk');
  await tagk.pressSequentially('ho', { delay: 15 });
  assert.deepEqual(await suggestions(page, ['host']), ['host']);
  await page.click('.suggestions:visible li');
  assert.equal(await tagk.inputValue(), 'host');
  const tagv = page.locator('.filter .tagv');
  await tagv.click();
  await tagv.pressSequentially('web0', { delay: 15 });
  assert.deepEqual(await suggestions(page, ['web01', 'web02']), ['web01', 'web02']);
  await page.click('.suggestions:visible li >> text=web01');
  await tagv.pressSequentially('|we', { delay: 15 });
  assert.deepEqual(await suggestions(page, ['web01', 'web02']), ['web01', 'web02']);
  await page.click('.suggestions:visible li >> text=web02');
  assert.equal(await tagv.inputValue(), 'web01|web02', 'a pick replaces only the value being typed');
  assert.equal(await page.locator('.filter .group-by').isChecked(), true);
  await shot(page, '01-query-builder');

  await run(page);
  assert.deepEqual(await stats(page), { series: 2, points: 600 });
  const rows = await legend(page);
  assert.deepEqual(Object.keys(rows), ['sys.cpu.user{host=web01}', 'sys.cpu.user{host=web02}']);
  assert.deepEqual(rows['sys.cpu.user{host=web01}'], { axis: 'left', last: '300', min: '1', max: '300', hover: '—' });
  assert.deepEqual(rows['sys.cpu.user{host=web02}'], { axis: 'left', last: '1', min: '1', max: '300', hover: '—' });
  assert.equal(await page.isHidden('#error'), true);

  // Hovering shows each series' value at the time under the cursor.
  const { x, y } = await plotAt(page, 0.3);
  await page.mouse.move(x, y);
  const ts = Number(await page.getAttribute('#cursor-time', 'data-ts'));
  const step = (ts / 1000 - T0 - 30) / 30;
  assert.ok(Number.isInteger(step) && step > 50 && step < 130, `cursor at ${ts}`);
  const hovered = await legend(page);
  assert.equal(hovered['sys.cpu.user{host=web01}'].hover, String(step + 1));
  assert.equal(hovered['sys.cpu.user{host=web02}'].hover, String(300 - step));
  await shot(page, '02-chart-hover');

  // The view is in the URL in OpenTSDB's /q form; a reload restores the same view.
  const view = hash(page);
  for (const part of [`start=${START}`, `end=${END}`, 'm=sum:sys.cpu.user{host=web01|web02}', 'tz=UTC']) {
    assert.ok(view.includes(part), `${part} in ${view}`);
  }
  await page.reload();
  await settled(page);
  assert.equal(await metric.inputValue(), 'sys.cpu.user');
  assert.equal(await tagk.inputValue(), 'host');
  assert.equal(await tagv.inputValue(), 'web01|web02');
  assert.equal(await page.inputValue('#start'), START);
  assert.equal(await page.inputValue('#end'), END);
  assert.equal(await page.inputValue('#tz'), 'UTC');
  assert.deepEqual(Object.keys(await legend(page)), ['sys.cpu.user{host=web01}', 'sys.cpu.user{host=web02}']);
  assert.deepEqual(await stats(page), { series: 2, points: 600 });
  await page.close();
});

test('dragging across the chart zooms in, Back undoes it, Zoom out doubles the range', async () => {
  const page = await open(`/#${RANGE}&m=sum:sys.cpu.user{host=*}`);
  await settled(page);
  assert.deepEqual(await stats(page), { series: 2, points: 600 });

  // The plot spans the requested three hours: a quarter to a half is 00:45 to 01:30.
  const from = await plotAt(page, 0.25);
  const to = await plotAt(page, 0.5);
  await page.mouse.move(from.x, from.y);
  await page.mouse.down();
  await page.mouse.move(to.x, to.y, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction((s) => document.querySelector('#start').value !== s, START);
  await settled(page);
  const start = await page.inputValue('#start');
  const end = await page.inputValue('#end');
  const minutes = (t) => {
    const m = /^2013\/01\/01-(\d\d):(\d\d):(\d\d)$/.exec(t);
    assert.ok(m, `an OpenTSDB date: ${t}`);
    return Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) / 60;
  };
  assert.ok(Math.abs(minutes(start) - 45) < 2, start);
  assert.ok(Math.abs(minutes(end) - 90) < 2, end);
  const zoomed = await stats(page);
  assert.equal(zoomed.series, 2);
  assert.ok(zoomed.points > 160 && zoomed.points < 200, `points after zoom: ${zoomed.points}`);
  assert.ok(hash(page).includes(`start=${start}&end=${end}`), hash(page));
  await shot(page, '03-zoomed');

  await page.goBack();
  await page.waitForFunction((s) => document.querySelector('#start').value === s, START);
  await settled(page);
  assert.equal(await page.inputValue('#end'), END);
  assert.deepEqual(await stats(page), { series: 2, points: 600 });

  await page.click('#zoom-out');
  await page.waitForFunction((s) => document.querySelector('#start').value !== s, START);
  await settled(page);
  assert.equal(await page.inputValue('#start'), '2012/12/31-22:30:00');
  assert.equal(await page.inputValue('#end'), '2013/01/01-04:30:00');
  await page.close();
});

test('a right axis, log scales and a global annotation round-trip through the URL', async () => {
  const page = await open(`/#${RANGE}&m=sum:sys.cpu.user{host=web01}&o=&m=sum:sys.cpu.system&o=axis+x1y2&ylog`);
  await settled(page);
  const rows = await legend(page);
  assert.deepEqual(Object.keys(rows), ['sys.cpu.user{host=web01}', 'sys.cpu.system{}']);
  assert.equal(rows['sys.cpu.user{host=web01}'].axis, 'left');
  assert.deepEqual(rows['sys.cpu.system{}'], { axis: 'right', last: '1196', min: '0', max: '1196', hover: '—' });
  assert.equal(await page.isChecked('#ylog'), true);
  assert.equal(await page.isChecked('#y2log'), false);
  assert.deepEqual(await page.locator('.query .right-axis').evaluateAll((cs) => cs.map((c) => c.checked)), [false, true]);
  assert.equal(await page.locator('#chart .u-axis').count(), 3, 'time, left and right axes');

  // The global annotation: one marker, at its time, with its description on hover.
  const marker = page.locator('#chart .annotation-marker');
  assert.equal(await marker.count(), 1);
  assert.equal(await marker.getAttribute('title'), 'deploy v2');
  assert.equal(await marker.isVisible(), true);
  const { box } = await plotAt(page, 0);
  const at = await marker.boundingBox();
  const expected = box.x + (box.width * (NOTE_TIME - T0)) / (3 * 3600);
  assert.ok(Math.abs(at.x + at.width / 2 - expected) < 2, `marker at ${at.x}, expected ${expected}`);
  await shot(page, '04-two-axes-annotation');

  // Log scale on the right: in the URL, and kept by a reload.
  await page.check('#y2log');
  await settled(page);
  assert.match(hash(page), /&m=sum:sys\.cpu\.system&o=axis x1y2&tz=UTC&ylog&y2log$/);
  await page.reload();
  await settled(page);
  assert.equal(await page.isChecked('#ylog'), true);
  assert.equal(await page.isChecked('#y2log'), true);
  assert.equal(await page.locator('#chart .u-axis').count(), 3);
  assert.equal((await legend(page))['sys.cpu.system{}'].axis, 'right');

  // Back on the left axis: two axes, and the URL says so.
  await page.locator('.query .right-axis').nth(1).uncheck();
  await run(page);
  assert.equal((await legend(page))['sys.cpu.system{}'].axis, 'left');
  assert.equal(await page.locator('#chart .u-axis').count(), 2);
  assert.ok(!hash(page).includes('x1y2'), hash(page));
  await page.close();
});

test('OpenTSDB links: /q redirects here and the m syntax round-trips', async () => {
  // /q without png/json/ascii is redirected to /#..., parameters the page does not use kept.
  let page = await open(`/q?${RANGE}&m=sum:sys.cpu.user{host=*}&o=&key=out+right+top+box&wxh=1300x600`);
  await settled(page);
  assert.equal(new URL(page.url()).pathname, '/');
  assert.deepEqual(Object.keys(await legend(page)), ['sys.cpu.user{host=web01}', 'sys.cpu.user{host=web02}']);
  assert.ok(hash(page).endsWith('&key=out right top box&wxh=1300x600'), hash(page));
  await page.close();

  // Every part of a full m shows in the builder and is written back unchanged.
  const m = 'sum:1m-avg-none:rate{counter,100,0}:sys.if.bytes{host=web01|web02}{dc=wildcard(lga*)}';
  page = await open(`/#${RANGE}&m=${encodeURIComponent(m)}&o=`);
  await settled(page);
  assert.deepEqual(Object.keys(await legend(page)), ['sys.if.bytes{dc=lga,host=web01}']);
  const q = page.locator('.query');
  assert.equal(await q.locator('.agg').inputValue(), 'sum');
  assert.equal(await q.locator('.ds-interval').inputValue(), '1m');
  assert.equal(await q.locator('.ds-fn').inputValue(), 'avg');
  assert.equal(await q.locator('.ds-fill').inputValue(), 'none');
  assert.equal(await q.locator('.rate').isChecked(), true);
  assert.equal(await q.locator('.counter').isChecked(), true);
  assert.equal(await q.locator('.counter-max').inputValue(), '100');
  assert.equal(await q.locator('.reset-value').inputValue(), '0');
  const filters = await q.locator('.filter').evaluateAll((rows) => rows.map((r) => [
    r.querySelector('.tagk').value, r.querySelector('.ftype').value,
    r.querySelector('.tagv').value, r.querySelector('.group-by').checked,
  ]));
  assert.deepEqual(filters, [['host', 'literal_or', 'web01|web02', true], ['dc', 'wildcard', 'lga*', false]]);
  assert.ok(hash(page).includes(`&m=${m}&o=`), hash(page));

  // Edited in the builder down to a plain rate: 1000 every 30 s.
  await q.locator('.filter').nth(1).locator('.remove-filter').click();
  await q.locator('.ds-interval').fill('');
  await q.locator('.counter').uncheck();
  await q.locator('.tagv').fill('web01');
  await run(page);
  assert.deepEqual(await legend(page), {
    'sys.if.bytes{dc=lga,host=web01}': { axis: 'left', last: '33.333', min: '33.333', max: '33.333', hover: '—' },
  });
  assert.ok(hash(page).includes('&m=sum:rate:sys.if.bytes{host=web01}&o=&'), hash(page));
  await page.close();
});

test('API errors are shown plainly, not as an empty chart', async () => {
  const page = await open(`/#${RANGE}&m=sum:sys.cpu.user`);
  await settled(page);
  assert.equal(await page.locator('#chart canvas').count() > 0, true);

  await page.fill('.query .metric', 'nope');
  await page.click('#run');
  await settled(page, 'error');
  const error = page.locator('#error');
  assert.equal(await error.isVisible(), true);
  assert.equal(await error.locator('strong').textContent(), "No such name for 'metrics': 'nope'");
  assert.equal(await page.locator('#chart canvas').count(), 0, 'the old chart is gone');
  assert.equal(await page.locator('#legend tr').count(), 0);
  await shot(page, '05-error');

  await page.fill('#start', 'yesterday');
  assert.equal(await page.getAttribute('#start', 'aria-invalid'), 'true');
  await page.click('#run');
  await settled(page, 'error');
  assert.match(await error.textContent(), /yesterday/);
  await page.close();
});

test('expression rows are charted beside the sub-queries and kept in the URL', async () => {
  const page = await open(`/#${RANGE}&m=sum:sys.cpu.user{host=web01}&o=`);
  await settled(page);
  assert.deepEqual(await stats(page), { series: 1, points: 300 });

  // web02 (300 down to 1) times 10, through /api/query/gexp, on the same chart.
  const exp = 'scale(sum:sys.cpu.user{host=web02},10)';
  const label = `${exp} → sys.cpu.user{host=web02}`;
  await page.click('#add-expression');
  const input = page.locator('.expression-row .expression');
  assert.equal(await input.evaluate((e) => e === document.activeElement), true, 'the new row has the focus');
  await input.fill(exp);
  await run(page);
  assert.deepEqual(await stats(page), { series: 2, points: 600 });
  let rows = await legend(page);
  assert.deepEqual(Object.keys(rows), ['sys.cpu.user{host=web01}', label]);
  assert.deepEqual(rows[label], { axis: 'left', last: '10', min: '10', max: '3000', hover: '—' });
  assert.ok(hash(page).includes(`&m=sum:sys.cpu.user{host=web01}&o=&exp=${exp}&tz=UTC`), hash(page));

  // Hovering: the expression's value under the cursor beside the sub-query's.
  const { x, y } = await plotAt(page, 0.4);
  await page.mouse.move(x, y);
  const step = (Number(await page.getAttribute('#cursor-time', 'data-ts')) / 1000 - T0 - 30) / 30;
  assert.ok(Number.isInteger(step) && step > 100 && step < 200, `cursor at step ${step}`);
  rows = await legend(page);
  assert.equal(rows['sys.cpu.user{host=web01}'].hover, String(step + 1));
  assert.equal(rows[label].hover, String(10 * (300 - step)));
  await shot(page, '07-expression');

  // A reload restores the row and draws it again.
  await page.reload();
  await settled(page);
  assert.equal(await page.locator('.expression-row').count(), 1);
  assert.equal(await input.inputValue(), exp);
  assert.deepEqual(Object.keys(await legend(page)), ['sys.cpu.user{host=web01}', label]);
  assert.deepEqual(await stats(page), { series: 2, points: 600 });

  // The TSD's parse error, naming the expression; then the row removed, from the URL too.
  await input.fill('scale(sum:sys.cpu.user{host=web02}');
  await page.click('#run');
  await settled(page, 'error');
  assert.match(await page.locator('#error strong').textContent(), /^Failed to parse scale\(sum:sys\.cpu\.user\{host=web02\}/);
  assert.match(await page.locator('#error pre').textContent(), /^Expression 1: scale\(sum:sys\.cpu\.user\{host=web02\}\n/);
  await page.click('.remove-expression');
  assert.equal(await page.locator('.expression-row').count(), 0);
  await run(page);
  assert.deepEqual(Object.keys(await legend(page)), ['sys.cpu.user{host=web01}']);
  assert.ok(!hash(page).includes('exp='), hash(page));
  await page.close();
});

test('an expression alone, from a link', async () => {
  // user summed over hosts is 301 at every step, system 4i: 301 + 4i, named by alias.
  const exp = 'alias(sumSeries(sum:sys.cpu.user,sum:sys.cpu.system),busy)';
  const page = await open(`/#${RANGE}&exp=${encodeURIComponent(exp)}`);
  await settled(page);
  assert.deepEqual(await legend(page), {
    [`${exp} → busy{}`]: { axis: 'left', last: '1497', min: '301', max: '1497', hover: '—' },
  });
  assert.deepEqual(await stats(page), { series: 1, points: 300 });
  assert.equal(await page.locator('#chart .annotation-marker').count(), 1, 'the global annotation');
  await page.close();
});

test('dozens of series and 100,000 points are charted', async () => {
  const started = Date.now();
  const page = await open(`/#${RANGE}&m=sum:load.test{host=*}`);
  await settled(page);
  const elapsed = Date.now() - started;
  assert.deepEqual(await stats(page), { series: HOSTS, points: HOSTS * LOAD_POINTS });
  const rows = await legend(page);
  assert.equal(Object.keys(rows).length, HOSTS);
  assert.deepEqual(rows['load.test{host=host24}'], { axis: 'left', last: '2499', min: '2400', max: '2499', hover: '—' });
  // A figure for the report, not a pass/fail threshold (speed lives in benchmarks).
  console.log(`25 series, 100,000 points: loaded and drawn in ${elapsed} ms`);
  const { x, y } = await plotAt(page, 0.5);
  await page.mouse.move(x, y);
  const ts = Number(await page.getAttribute('#cursor-time', 'data-ts'));
  const i = (ts / 1000 - T0) / 2;
  assert.equal((await legend(page))['load.test{host=host03}'].hover, String(300 + (i % 100)));
  await shot(page, '06-many-series');
  await page.close();
});
