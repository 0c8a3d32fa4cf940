// The query page: sub-queries, expressions over them, time range and chart. The whole view lives in the URL
// fragment in OpenTSDB's /q form, so a reload, a shared link or Back shows the same thing.

import * as api from './api.js';
import { autocomplete } from './autocomplete.js';
import { chartSize, drawChart, seriesLabel } from './chart.js';
import {
  FILLS, FILTER_TYPES, fromHash, gexpParams, newFilter, newQuery, queryBody, toHash,
} from './state.js';
import { formatTime, parseTime } from './time.js';
import { setupTrees } from './trees.js';

const $ = (sel) => document.querySelector(sel);
const BROWSER_TZ = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
// Until /api/aggregators answers (OpenTSDB 2.4's list).
const FALLBACK_AGGREGATORS = [
  'avg', 'count', 'dev', 'first', 'last', 'max', 'min', 'mimmax', 'mimmin', 'none', 'sum', 'zimsum',
];

let state = fromHash(location.hash, BROWSER_TZ);
let aggregators = FALLBACK_AGGREGATORS;
let plot = null; // the uPlot on the page, if any
let inflight = null; // AbortController of the query under way
let reloadTimer = 0;

// el('input', {class: 'x', size: 8}, ...children): attributes, or properties for non-strings.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (typeof v === 'string') node.setAttribute(k, v);
    else node[k] = v;
  }
  node.append(...children);
  return node;
}

// A <select> of `options` showing `value`, which is added if it is not one of them (a URL may
// name an aggregator or filter type this page does not list; the TSD then says what is wrong).
function select(options, value, attrs) {
  const all = options.includes(value) || value === '' ? options : [...options, value];
  const s = el('select', attrs, ...all.map((o) => el('option', { value: o }, o)));
  s.value = value || all[0];
  return s;
}

// Keeps `obj[key]` equal to what the control shows.
function bind(control, obj, key, after = () => {}) {
  const checkbox = control.type === 'checkbox';
  if (checkbox) control.checked = Boolean(obj[key]);
  else control.value = obj[key] ?? '';
  control.addEventListener(checkbox || control.tagName === 'SELECT' ? 'change' : 'input', () => {
    obj[key] = checkbox ? control.checked : control.value;
    after();
  });
  return control;
}

const labelled = (text, control) => el('label', {}, `${text} `, control);
const check = (text, control) => el('label', {}, control, ` ${text}`);

// `1m-avg-nan` as interval, function and fill controls. The text is rebuilt only when one of
// them is edited, so a URL's spelling survives untouched.
function downsampleControls(q) {
  const [interval = '', fn = 'avg', fill = 'none'] = q.downsample ? q.downsample.split('-') : [];
  const intervalInput = el('input', {
    class: 'ds-interval', placeholder: '1m, 1h, 1dc', size: 6, value: interval, 'aria-label': 'Downsample interval',
  });
  const fnSelect = select(aggregators.filter((a) => a !== 'none'), fn, { class: 'ds-fn', 'aria-label': 'Downsample function' });
  const fillSelect = select(FILLS, fill, { class: 'ds-fill', 'aria-label': 'Fill policy' });
  const sync = () => {
    const i = intervalInput.value.trim();
    q.downsample = i ? `${i}-${fnSelect.value}-${fillSelect.value}` : '';
  };
  intervalInput.addEventListener('input', sync);
  fnSelect.addEventListener('change', sync);
  fillSelect.addEventListener('change', sync);
  return el('span', { class: 'group' }, labelled('Downsample', intervalInput), fnSelect, fillSelect);
}

// Tag values are suggested for the alternative being typed: `web01|we` asks for `we`.
const LAST_ALTERNATIVE = {
  term: (value) => value.split('|').pop(),
  apply: (value, name) => value.replace(/[^|]*$/, name),
};

// Tag values are suggested from the series of the query's metric having its other filters'
// single literal values (`/api/suggest`'s `metric`, `tagk`, `tags`), once metric and key are
// typed; before that, from every value.
function valuesWithin(q, f) {
  const text = (v) => String(v ?? '').trim();
  const metric = text(q.metric);
  const tagk = text(f.tagk);
  if (!metric || !tagk) return {};
  const tags = q.filters
    .filter((o) => o !== f && o.type === 'literal_or' && text(o.tagk) && /^[^|*,=]+$/.test(text(o.value)))
    .map((o) => `${text(o.tagk)}=${text(o.value)}`)
    .join(',');
  return { metric, tagk, tags };
}

function filterRow(q, f, rerender) {
  const tagk = bind(el('input', { class: 'tagk', placeholder: 'tag key', size: 12, 'aria-label': 'Tag key' }), f, 'tagk');
  const value = bind(el('input', {
    class: 'tagv', placeholder: 'web01|web02, web*', size: 18, 'aria-label': 'Tag value filter',
  }), f, 'value');
  const type = bind(select(FILTER_TYPES, f.type, { class: 'ftype', 'aria-label': 'Filter type' }), f, 'type');
  const groupBy = bind(el('input', { type: 'checkbox', class: 'group-by' }), f, 'groupBy');
  const remove = el('button', { type: 'button', class: 'remove-filter', title: 'Remove this filter', 'aria-label': 'Remove filter' }, '×');
  remove.addEventListener('click', () => {
    q.filters.splice(q.filters.indexOf(f), 1);
    rerender();
  });
  const row = el('div', { class: 'filter' },
    el('span', { class: 'ac' }, tagk), type, el('span', { class: 'ac' }, value), check('group by', groupBy), remove);
  autocomplete(tagk, (text) => api.suggest('tagk', text, 25, q.metric ? { metric: q.metric } : {}));
  autocomplete(value, (text) => api.suggest('tagv', text, 25, valuesWithin(q, f)), LAST_ALTERNATIVE);
  return row;
}

function queryCard(q, index) {
  const metric = bind(el('input', { class: 'metric', placeholder: 'metric, e.g. sys.cpu.user', size: 30, 'aria-label': 'Metric' }), q, 'metric');
  const agg = bind(select(aggregators, q.aggregator, { class: 'agg' }), q, 'aggregator');

  // Rate, and the counter options that go with it.
  const counterOnly = [];
  const counterOption = (control) => {
    counterOnly.push(control);
    return control;
  };
  const syncRate = () => {
    rateOptions.hidden = !q.rate;
    for (const c of counterOnly) c.disabled = !q.counter;
  };
  const rate = bind(el('input', { type: 'checkbox', class: 'rate' }), q, 'rate', syncRate);
  const rateOptions = el('span', { class: 'group rate-options' },
    check('counter', bind(el('input', { type: 'checkbox', class: 'counter' }), q, 'counter', syncRate)),
    labelled('max', counterOption(bind(el('input', { class: 'counter-max', size: 10, inputmode: 'numeric' }), q, 'counterMax'))),
    labelled('reset', counterOption(bind(el('input', { class: 'reset-value', size: 6, inputmode: 'numeric' }), q, 'resetValue'))),
    check('drop resets', counterOption(bind(el('input', { type: 'checkbox', class: 'drop-resets' }), q, 'dropResets'))));
  syncRate();

  const filters = el('div', { class: 'filters' });
  const addFilter = el('button', { type: 'button', class: 'add-filter' }, '+ Tag filter');
  const renderFilters = () => filters.replaceChildren(
    ...q.filters.map((f) => filterRow(q, f, renderFilters)),
    addFilter,
  );
  addFilter.addEventListener('click', () => {
    q.filters.push(newFilter());
    renderFilters();
    filters.querySelector('.filter:last-of-type .tagk').focus();
  });
  renderFilters();

  const remove = el('button', { type: 'button', class: 'remove-query', 'aria-label': `Remove sub-query ${index + 1}` }, 'Remove');
  remove.addEventListener('click', () => {
    state.queries.splice(state.queries.indexOf(q), 1);
    if (!state.queries.length) state.queries.push(newQuery());
    renderQueries();
  });

  const card = el('fieldset', { class: 'query panel', 'data-index': String(index) },
    el('legend', {}, `Sub-query ${index + 1}`, remove),
    el('div', { class: 'row' },
      el('span', { class: 'ac' }, metric), labelled('Aggregator', agg), downsampleControls(q),
      check('rate', rate), rateOptions,
      check('right axis', bind(el('input', { type: 'checkbox', class: 'right-axis' }), q, 'right')),
      check('explicit tags', bind(el('input', { type: 'checkbox', class: 'explicit-tags' }), q, 'explicitTags'))),
    filters);
  autocomplete(metric, (text) => api.suggest('metrics', text));
  return card;
}

function renderQueries() {
  $('#queries').replaceChildren(...state.queries.map(queryCard));
}

// An expression row: a Graphite-style expression over m sub-queries (/api/query/gexp).
function expressionCard(text, index) {
  const input = el('input', {
    class: 'expression',
    placeholder: 'scale(sum:sys.cpu.user{host=*},10)',
    size: 60,
    spellcheck: false,
    'aria-label': `Expression ${index + 1}`,
    value: text,
  });
  input.addEventListener('input', () => {
    state.expressions[index] = input.value;
  });
  const remove = el('button', { type: 'button', class: 'remove-expression', 'aria-label': `Remove expression ${index + 1}` }, 'Remove');
  remove.addEventListener('click', () => {
    state.expressions.splice(index, 1);
    renderExpressions();
  });
  return el('fieldset', { class: 'expression-row panel', 'data-index': String(index) },
    el('legend', {}, `Expression ${index + 1}`, remove),
    el('div', { class: 'row' }, input,
      el('span', { class: 'muted hint' },
        'Graphite-style functions over sub-queries: absolute, alias, scale, movingAverage, highestCurrent, '
        + 'highestMax, timeShift, sumSeries, diffSeries, multiplySeries, divideSeries')));
}

function renderExpressions() {
  $('#expressions').replaceChildren(...state.expressions.map(expressionCard));
}

function renderTime() {
  $('#start').value = state.start;
  $('#end').value = state.end;
  if (![...$('#tz').options].some((o) => o.value === state.tz)) $('#tz').append(el('option', {}, state.tz));
  $('#tz').value = state.tz;
  showRange();
}

function renderControls() {
  renderTime();
  $('#ylog').checked = state.ylog;
  $('#y2log').checked = state.y2log;
  const reload = $('#refresh');
  if (![...reload.options].some((o) => Number(o.value) === state.autoreload)) {
    reload.append(el('option', { value: String(state.autoreload) }, `${state.autoreload}s`));
  }
  reload.value = String(state.autoreload);
  renderQueries();
  renderExpressions();
}

function readControls() {
  state.start = $('#start').value.trim() || '1h-ago';
  state.end = $('#end').value.trim();
  state.tz = $('#tz').value;
  state.ylog = $('#ylog').checked;
  state.y2log = $('#y2log').checked;
  state.autoreload = Number($('#refresh').value);
}

// The absolute range the time inputs stand for, next to them; unreadable times are flagged.
function showRange() {
  const tz = $('#tz').value;
  const now = Date.now();
  const from = parseTime($('#start').value || '1h-ago', tz, now);
  const to = parseTime($('#end').value, tz, now);
  $('#start').setAttribute('aria-invalid', String(Number.isNaN(from)));
  $('#end').setAttribute('aria-invalid', String(Number.isNaN(to)));
  $('#range').textContent = Number.isNaN(from) || Number.isNaN(to)
    ? 'Times are OpenTSDB dates (2013/01/01-00:00:00), N{s,m,h,d,w,n,y}-ago, or Unix seconds or ms.'
    : `${formatTime(from, tz)} → ${$('#end').value ? formatTime(to, tz) : 'now'}`;
}

// The page's state: idle, running, done or error (for scripts and tests).
function setStatus(status, summary = '') {
  $('#view').dataset.state = status;
  $('#chart').setAttribute('aria-busy', String(status === 'running'));
  $('#summary').textContent = summary;
}

function clearChart(message = '') {
  plot?.destroy();
  plot = null;
  $('#chart').replaceChildren(...(message ? [el('p', { class: 'empty' }, message)] : []));
  $('#legend').replaceChildren();
  delete $('#summary').dataset.series;
  delete $('#summary').dataset.points;
}

function showError(message, details = '') {
  const box = $('#error');
  box.hidden = !message;
  box.replaceChildren(...(message ? [el('strong', {}, message)] : []),
    ...(details && details !== message ? [el('pre', {}, details)] : []));
}

function fail(message, details) {
  clearChart();
  showError(message, details);
  setStatus('error');
}

// Records the view in the URL, spelled out in full (time zone included, so a shared link
// shows the same times anywhere): as a new history entry when `push` and the view changed
// (Back then returns to the previous one), else in place.
function writeHash(push) {
  const hash = toHash(state);
  if (location.hash.slice(1) === hash) return;
  const changed = toHash(fromHash(location.hash, BROWSER_TZ)) !== hash;
  history[push && changed ? 'pushState' : 'replaceState'](null, '', `#${hash}`);
}

function scheduleReload() {
  clearTimeout(reloadTimer);
  if (state.autoreload > 0) {
    reloadTimer = setTimeout(() => (document.hidden ? scheduleReload() : run({ push: false })), state.autoreload * 1000);
  }
}

// Runs one expression; an error names the expression it is about.
async function runExpression(exp, index, signal) {
  try {
    return await api.gexp(gexpParams(state, exp), signal);
  } catch (e) {
    if (e.name !== 'AbortError') {
      e.details = [`Expression ${index + 1}: ${exp.trim()}`, e.details].filter(Boolean).join('\n');
    }
    throw e;
  }
}

// Runs the view's sub-queries (one /api/query) and expressions (one /api/query/gexp each)
// and draws the answers on one chart. `explicit`: the Run button, which asks for a metric
// when there is nothing to run (other triggers then do nothing).
async function run({ push = true, explicit = false } = {}) {
  readControls();
  writeHash(push);
  clearTimeout(reloadTimer);
  inflight?.abort();
  inflight = null;
  const subs = state.queries.filter((q) => q.metric.trim());
  const exps = state.expressions.filter((e) => e.trim());
  if (!subs.length && !exps.length) {
    if (explicit) fail('Enter a metric or an expression to query.');
    else setStatus('idle');
    return;
  }
  let body;
  try {
    body = subs.length ? queryBody(state) : null;
  } catch (e) {
    fail(e.message);
    return;
  }
  const ctl = new AbortController();
  inflight = ctl;
  const now = Date.now();
  const started = performance.now();
  setStatus('running', 'Running…');
  try {
    const [results, ...expResults] = await Promise.all([
      body ? api.query(body, ctl.signal) : [],
      ...exps.map((e, i) => runExpression(e, i, ctl.signal)),
    ]);
    showError('');
    const lines = results.map((r) => ({ label: seriesLabel(r), right: Boolean(subs[r.query?.index]?.right), result: r }));
    exps.forEach((e, i) => {
      for (const r of expResults[i]) lines.push({ label: `${e.trim()} → ${seriesLabel(r)}`, right: false, result: r });
    });
    draw(lines, [parseTime(state.start, state.tz, now), parseTime(state.end, state.tz, now)], performance.now() - started);
  } catch (e) {
    if (e.name !== 'AbortError') fail(e.message, e.details);
  } finally {
    if (inflight === ctl) {
      inflight = null;
      scheduleReload();
    }
  }
}

// Annotations are stored with seconds, or milliseconds past 2^32 as OpenTSDB tells them.
const annotationMs = (t) => (t > 0xffffffff ? t : t * 1000);

// Draws `series` ([{label, right, result}], result an answer of /api/query or
// /api/query/gexp), their annotations once each.
function draw(series, range, elapsed) {
  const lines = [];
  const notes = new Map();
  for (const { label, right, result: r } of series) {
    lines.push({ label, right, points: r.dps || [] });
    for (const n of [...(r.annotations || []), ...(r.globalAnnotations || [])]) {
      notes.set(`${n.tsuid || ''}:${n.startTime}`, { ...n, time: annotationMs(n.startTime) });
    }
  }
  const points = lines.reduce((sum, l) => sum + l.points.length, 0);
  if (!lines.length) {
    clearChart('No data points in this range.');
  } else {
    plot?.destroy();
    plot = drawChart($('#chart'), $('#legend'), lines, {
      tz: state.tz,
      range,
      ylog: state.ylog,
      y2log: state.y2log,
      notes: [...notes.values()],
      onZoom: zoomTo,
    });
  }
  setStatus('done', `${lines.length} series, ${points.toLocaleString('en-US')} points, ${Math.round(elapsed)} ms`);
  $('#summary').dataset.series = String(lines.length);
  $('#summary').dataset.points = String(points);
}

// Sets the range (ms; `to` null for now) as OpenTSDB dates in the view's zone, to the whole
// second, or as ms when the span is too short for that.
function setRange(from, to) {
  const precise = (to ?? Date.now()) - from < 2000;
  const text = (t, round) => (precise ? String(round(t)) : formatTime(round(t / 1000) * 1000, state.tz));
  state.start = text(from, Math.floor);
  state.end = to === null ? '' : text(to, Math.ceil);
  renderTime();
}

const zoomTo = (from, to) => {
  setRange(from, to);
  run();
};

// Twice the span: up to now stays relative (1h-ago becomes 120m-ago), otherwise around the
// same middle, an end past now becoming now.
function zoomOut() {
  readControls();
  const now = Date.now();
  const from = parseTime(state.start, state.tz, now);
  const to = parseTime(state.end, state.tz, now);
  if (Number.isNaN(from) || Number.isNaN(to)) return;
  if (!state.end) {
    state.start = `${Math.ceil((now - from) / 30000)}m-ago`;
    renderTime();
    run();
    return;
  }
  const half = (to - from) / 2;
  zoomTo(Math.max(0, from - half), to + half >= now ? null : to + half);
}

// The calendar buttons open the browser's date-time picker on the box's time; a pick is
// written back as an OpenTSDB date. Both are wall-clock times in the view's zone.
function setupPickers() {
  for (const picker of document.querySelectorAll('input[type="datetime-local"]')) {
    const box = $(`#${picker.dataset.for}`);
    picker.previousElementSibling.addEventListener('click', () => {
      const t = parseTime(box.value || 'now', $('#tz').value);
      if (!Number.isNaN(t)) {
        const [date, clock] = formatTime(t, $('#tz').value).split('-');
        picker.value = `${date.replaceAll('/', '-')}T${clock}`;
      }
      picker.showPicker();
    });
    picker.addEventListener('change', () => {
      if (!picker.value) return;
      const [date, clock] = picker.value.split('T');
      box.value = `${date.replaceAll('-', '/')}-${clock.length === 5 ? `${clock}:00` : clock}`;
      showRange();
    });
  }
}

function setupTimeZones() {
  const zones = new Set(['UTC', ...(Intl.supportedValuesOf?.('timeZone') ?? [])]);
  $('#tz').replaceChildren(...[...zones].map((z) => el('option', { value: z }, z === BROWSER_TZ ? `${z} (this browser)` : z)));
}

// Another view in the URL (Back, Forward, an edited or followed link).
function followHash() {
  const next = fromHash(location.hash, BROWSER_TZ);
  if (toHash(next) === toHash(state)) return;
  state = next;
  renderControls();
  run({ push: false });
}

async function init() {
  setupTimeZones();
  setupPickers();
  api.version().then((v) => {
    $('#version').textContent = `TSD ${v.version}${v.hourglass ? ` · Hourglass ${v.hourglass}` : ''}`;
  }, () => {});
  try {
    const names = await api.aggregators();
    if (Array.isArray(names) && names.length) aggregators = [...names].sort();
  } catch {
    // The fallback list serves.
  }
  renderControls();

  $('#add-query').addEventListener('click', () => {
    state.queries.push(newQuery());
    renderQueries();
    $('#queries .query:last-of-type .metric').focus();
  });
  // A leaf picked in the tree browser becomes a sub-query (the empty one, if any).
  setupTrees($('#trees'), (metric, tags) => {
    let q = state.queries.find((x) => !x.metric.trim());
    if (!q) {
      q = newQuery();
      state.queries.push(q);
    }
    q.metric = metric;
    q.filters = Object.entries(tags).map(([tagk, value]) => ({ ...newFilter(), tagk, value }));
    renderQueries();
    run({ explicit: true });
  }, (e) => showError(e.message, e.details));
  $('#add-expression').addEventListener('click', () => {
    state.expressions.push('');
    renderExpressions();
    $('#expressions .expression-row:last-of-type .expression').focus();
  });
  for (const b of document.querySelectorAll('[data-range]')) {
    b.addEventListener('click', () => {
      $('#start').value = b.dataset.range;
      $('#end').value = '';
      run();
    });
  }
  $('#zoom-out').addEventListener('click', zoomOut);
  for (const id of ['ylog', 'y2log', 'tz']) $(`#${id}`).addEventListener('change', () => run());
  for (const id of ['start', 'end', 'tz']) $(`#${id}`).addEventListener('input', showRange);
  // Run, or Enter in a text box (unless it picked a suggestion).
  $('#query-form').addEventListener('submit', (e) => {
    e.preventDefault();
    run({ explicit: true });
  });
  $('#refresh').addEventListener('change', () => {
    readControls();
    writeHash(false);
    scheduleReload();
  });
  window.addEventListener('popstate', followHash);
  window.addEventListener('hashchange', followHash);
  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => plot?.setSize(chartSize($('#chart'))), 150);
  });

  if (state.queries.some((q) => q.metric.trim()) || state.expressions.some((e) => e.trim())) run({ push: false });
  else setStatus('idle');
}

init();
