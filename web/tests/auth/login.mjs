// The web UI behind authentication, in headless Chromium (not named *.test.mjs: it needs a
// TSD of its own, so `npm test` leaves it to browser.rs): HOURGLASS_URL names a TSD with
// tsd.core.authentication.enable (started by crates/server/tests/browser.rs with a user
// `viewer`, password HOURGLASS_PASSWORD, holding `read`). A browser without credentials is
// asked for them (401 with a Basic challenge); one that gives them (Playwright's
// httpCredentials answer the login prompt as a person would) gets the UI, and the UI's own
// requests (version, suggest, query) carry them for the rest of the session.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const BASE = process.env.HOURGLASS_URL;
const PASSWORD = process.env.HOURGLASS_PASSWORD;
const ARTIFACTS = process.env.HOURGLASS_ARTIFACTS || new URL('../../test-artifacts/', import.meta.url).pathname;
let browser;

before(async () => {
  assert.ok(BASE && PASSWORD, 'HOURGLASS_URL and HOURGLASS_PASSWORD must be set');
  await mkdir(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.HOURGLASS_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
});

after(async () => {
  await browser?.close();
});

test('without credentials the UI is refused with a Basic challenge', async () => {
  const raw = await fetch(`${BASE}/`);
  assert.equal(raw.status, 401);
  assert.match(raw.headers.get('www-authenticate'), /Basic realm="hourglass"/);
  // Headless, nobody answers the login prompt: the browser gives up on the challenge.
  const context = await browser.newContext();
  const page = await context.newPage();
  await assert.rejects(page.goto(`${BASE}/`), /ERR_INVALID_AUTH_CREDENTIALS/);
  await context.close();
});

test('a wrong password is refused', async () => {
  const context = await browser.newContext({ httpCredentials: { username: 'viewer', password: 'wrong' } });
  const page = await context.newPage();
  const response = await page.goto(`${BASE}/`);
  assert.equal(response.status(), 401);
  await context.close();
});

test('logged in, the UI loads and its queries carry the credentials', async () => {
  const context = await browser.newContext({
    httpCredentials: { username: 'viewer', password: PASSWORD },
    viewport: { width: 1280, height: 900 },
  });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const statuses = [];
  page.on('response', (r) => statuses.push([new URL(r.url()).pathname, r.status()]));
  const response = await page.goto(`${BASE}/#start=2013/01/01-00:00:00&end=2013/01/01-03:00:00&tz=UTC&m=sum:sys.cpu.user`);
  assert.equal(response.status(), 200);
  await page.waitForSelector('#version:not(:empty)');
  assert.match(await page.textContent('#version'), /^TSD 2\.4\.1/);
  await page.waitForSelector('#view[data-state="done"], #view[data-state="error"]');
  assert.equal(await page.getAttribute('#view', 'data-state'), 'done', `error shown: ${await page.textContent('#error')}`);
  assert.equal(await page.getAttribute('#summary', 'data-points'), '10');
  await page.screenshot({ path: `${ARTIFACTS}/logged-in.png`, fullPage: true });
  const refused = statuses.filter(([, s]) => s === 401 || s === 403);
  assert.deepEqual(refused, [], 'requests refused after logging in');
  assert.ok(statuses.some(([p]) => p === '/api/query'), `the query ran: ${JSON.stringify(statuses)}`);
  assert.deepEqual(errors, [], 'errors in the page');
  await context.close();
});
