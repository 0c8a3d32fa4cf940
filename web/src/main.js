// The query page: builds sub-queries, keeps the whole view in the URL fragment (OpenTSDB's
// /q query string), runs /api/query and draws the answer.

import * as api from './api.js';
import { autocomplete } from './autocomplete.js';
import { drawChart, seriesLabel } from './chart.js';
import {
  FILTER_TYPES, defaultState, fromHash, newFilter, newQuery, queryBody, toHash,
} from './state.js';

const $ = (sel, root = document) => root.querySelector(sel);
const FALLBACK_AGGREGATORS = ['sum', 'avg', 'min', 'max', 'count', 'dev', 'zimsum', 'mimmin', 'mimmax', 'none'];
const FILLS = ['none', 'nan', 'null', 'zero'];

let state = defaultState();
let aggregatorNames = FALLBACK_AGGREGATORS;
let refreshTimer = 0;
let running = 0;

// Small DOM builder: el('input', {class: 'x', value: 'y'}, ...children).
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k in node && typeof v !== 'string') node[k] = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

function select(options, value, attrs) {
  const s = el('select', attrs, ...options.map((o) => el('option', { value: o }, o)));
  s.value = options.includes(value) ? value : options[0];
  return s;
}

// Two-way binding of an input to a field of an object.
function bind(input, obj, key, after = () => {}) {
  const checkbox = input.type === 'checkbox';
  if (checkbox) input.checked = Boolean(obj[key]);
  else input.value = obj[key] ?? '';
  input.addEventListener(checkbox || input.tagName === 'SELECT' ? 'change' : 'input', () => {
    obj[key] = checkbox ? input.checked : input.value;
    after();
  });
  return input;
}

function labelled(text, control) {
  return el('label', {}, `${text} `, control);
}

// `1m-avg-nan` ⇄ interval / function / fill controls.
function downsampleControls(q) {
  const [interval = '', fn = 'avg', fill = 'none'] = q.downsample ? q.downsample.split('-') : [];
  const intervalInput = el('input', { class: 'ds-interval', placeholder: 'e.g. 1m, 1h, 1dc, 0all', size: 8, value: interval });
  const fnSelect = select(aggregatorNames.filter((a) => a !== 'none'), fn, { class: 'ds-fn' });
  const fillSelect = select(FILLS, fill, { class: 'ds-fill' });
  const sync = () => {
    const i = intervalInput.value.trim();
    q.downsample = i ? [i, fnSelect.value, ...(fillSelect.value !== 'none' ? [fillSelect.value] : [])].join('-') : '';
  };
  for (const c of [intervalInput, fnSelect, fillSelect]) c.addEventListener('input', sync);
  for (const c of [fnSelect, fillSelect]) c.addEventListener('change', sync);
  return el('span', { class: 'group' }, labelled('Downsample', intervalInput), fnSelect, fillSelect);
}

function filterRow(q, f, rerender) {
  const tagk = bind(el('input', { class: 'tagk', placeholder: 'tag key', size: 12 }), f, 'tagk');
  const value = bind(el('input', { class: 'tagv', placeholder: 'value, a|b, * …', size: 16 }), f, 'value');
  const type = bind(select(FILTER_TYPES, f.type, { class: 'ftype' }), f, 'type');
  const groupBy = bind(el('input', { type: 'checkbox', class: 'group-by' }), f, 'groupBy');
  const remove = el('button', { type: 'button', class: 'remove-filter', title: 'Remove filter' }, '×');
  remove.addEventListener('click', () => {
    q.filters.splice(q.filters.indexOf(f), 1);
    rerender();
  });
  const row = el('div', { class: 'filter' },
    el('span', { class: 'ac' }, tagk), type, el('span', { class: 'ac' }, value),
    el('label', {}, groupBy, ' group by'), remove);
  autocomplete(tagk, (text) => api.suggest('tagk', text));
  // Values are suggested from the last alternative being typed (`web01|we…`).
  autocomplete(value, (text) => api.suggest('tagv', text.split('|').pop()), () => {});
  return row;
}

function queryCard(q, index) {
  const card = el('fieldset', { class: 'query panel', 'data-index': String(index) });
  const render = () => card.replaceWith(queryCard(q, index));
  const metric = bind(el('input', { class: 'metric', placeholder: 'metric', size: 28 }), q, 'metric');
  const agg = bind(select(aggregatorNames, q.aggregator, { class: 'agg' }), q, 'aggregator');
  const rate = bind(el('input', { type: 'checkbox', class: 'rate' }), q, 'rate', () => render());
  const right = bind(el('input', { type: 'checkbox', class: 'right-axis' }), q, 'right');
  const remove = el('button', { type: 'button', class: 'remove-query', title: 'Remove sub-query' }, 'Remove');
  remove.addEventListener('click', () => {
    state.queries.splice(state.queries.indexOf(q), 1);
    if (!state.queries.length) state.queries.push(newQuery());
    renderQueries();
  });
  const addFilter = el('button', { type: 'button', class: 'add-filter' }, '+ Tag filter');
  addFilter.addEventListener('click', () => {
    q.filters.push(newFilter());
    render();
  });
  const rateOptions = q.rate
    ? el('span', { class: 'group' },
      el('label', {}, bind(el('input', { type: 'checkbox', class: 'counter' }), q, 'counter'), ' counter'),
      labelled('max', bind(el('input', { class: 'counter-max', size: 10, inputmode: 'numeric' }), q, 'counterMax')),
      labelled('reset', bind(el('input', { class: 'reset-value', size: 6, inputmode: 'numeric' }), q, 'resetValue')),
      el('label', {}, bind(el('input', { type: 'checkbox', class: 'drop-resets' }), q, 'dropResets'), ' drop resets'))
    : '';
  card.append(
    el('legend', {}, `Sub-query ${index + 1}`),
    el('div', { class: 'row' },
      el('span', { class: 'ac' }, metric), labelled('Aggregator', agg), downsampleControls(q),
      el('label', {}, rate, ' rate'), rateOptions,
      el('label', {}, right, ' right axis'), remove),
    el('div', { class: 'filters' }, ...q.filters.map((f) => filterRow(q, f, render)), addFilter),
  );
  autocomplete(metric, (text) => api.suggest('metrics', text));
  return card;
}

function renderQueries() {
  $('#queries').replaceChildren(...state.queries.map(queryCard));
}

function renderControls() {
  $('#start').value = state.start;
  $('#end').value = state.end;
  $('#tz').value = state.tz;
  $('#ylog').checked = state.ylog;
  $('#y2log').checked = state.y2log;
  renderQueries();
}

function showError(message, details) {
  const box = $('#error');
  box.hidden = !message;
  box.replaceChildren();
  if (message) {
    box.append(el('strong', {}, message));
    if (details && details !== message) box.append(el('pre', {}, details));
  }
}

function readControls() {
  state.start = $('#start').value.trim() || '1h-ago';
  state.end = $('#end').value.trim();
  state.tz = $('#tz').value;
  state.ylog = $('#ylog').checked;
  state.y2log = $('#y2log').checked;
}

async function run() {
  readControls();
  const hash = toHash(state);
  if (location.hash.slice(1) !== hash) history.replaceState(null, '', `#${hash}`);
  const wanted = state.queries.filter((q) => q.metric.trim());
  if (!wanted.length) {
    showError('Enter a metric to query.');
    return;
  }
  const ticket = ++running;
  $('#run').disabled = true;
  $('#summary').textContent = 'Running…';
  const started = performance.now();
  try {
    const view = { ...state, queries: wanted };
    const results = await api.query(queryBody(view));
    if (ticket !== running) return;
    showError('');
    draw(results, view, performance.now() - started);
  } catch (e) {
    if (ticket !== running) return;
    $('#summary').textContent = '';
    showError(e.message, e.details);
  } finally {
    if (ticket === running) $('#run').disabled = false;
  }
}

function draw(results, view, elapsed) {
  const rightMetrics = new Set();
  const lines = [];
  const notes = new Map();
  for (const r of results) {
    if (!r.metric) continue; // a statistics entry
    const sub = view.queries[r.query?.index ?? -1];
    const right = sub ? sub.right : view.queries.some((q) => q.right && q.metric.trim() === r.metric);
    if (right) rightMetrics.add(r.metric);
    lines.push({ label: seriesLabel(r), right, points: r.dps || [] });
    for (const n of [...(r.annotations || []), ...(r.globalAnnotations || [])]) {
      const time = n.startTime > 1e11 ? n.startTime / 1000 : n.startTime;
      notes.set(`${n.tsuid || ''}:${n.startTime}`, { time, description: n.description || '', notes: n.notes || '' });
    }
  }
  const points = lines.reduce((sum, l) => sum + l.points.length, 0);
  $('#summary').textContent = `${lines.length} series, ${points} points, ${Math.round(elapsed)} ms`;
  $('#summary').dataset.series = String(lines.length);
  $('#summary').dataset.points = String(points);
  if (!lines.length) {
    $('#chart').replaceChildren(el('p', { class: 'empty' }, 'No data in this range.'));
    $('#legend').replaceChildren();
    return;
  }
  drawChart($('#chart'), $('#legend'), lines, {
    tz: view.tz || undefined,
    ylog: view.ylog,
    y2log: view.y2log,
    notes: [...notes.values()],
    onZoom: (from, to) => {
      state.start = String(from);
      state.end = String(to);
      renderControls();
      run();
    },
  });
}

function loadFromHash() {
  const parsed = fromHash(location.hash);
  if (!parsed) return false;
  state = parsed;
  renderControls();
  run();
  return true;
}

function setupTimeZones() {
  const zones = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : [];
  const local = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const tz = $('#tz');
  tz.append(el('option', { value: '' }, `UTC (server default)`));
  for (const z of ['UTC', ...zones.filter((z) => z !== 'UTC')]) {
    tz.append(el('option', { value: z }, z === local ? `${z} (this browser)` : z));
  }
}

async function init() {
  setupTimeZones();
  try {
    const names = await api.aggregators();
    if (Array.isArray(names) && names.length) aggregatorNames = [...names].sort();
  } catch {
    // The fallback list serves.
  }
  api.version().then((v) => {
    $('#version').textContent = `TSD ${v.version}${v.hourglass ? ` · Hourglass ${v.hourglass}` : ''}`;
  }).catch(() => {});

  $('#run').addEventListener('click', run);
  $('#add-query').addEventListener('click', () => {
    state.queries.push(newQuery());
    renderQueries();
  });
  for (const b of document.querySelectorAll('[data-range]')) {
    b.addEventListener('click', () => {
      $('#start').value = b.dataset.range;
      $('#end').value = '';
      run();
    });
  }
  $('#zoom-out').addEventListener('click', () => {
    // Twice the span, centred on the same middle, when the range is absolute.
    const from = Number(state.start);
    const to = Number(state.end || Date.now());
    if (!Number.isFinite(from) || !Number.isFinite(to)) return;
    const half = to - from;
    state.start = String(Math.max(0, Math.round(from - half / 2)));
    state.end = String(Math.round(to + half / 2));
    renderControls();
    run();
  });
  for (const id of ['ylog', 'y2log', 'tz']) $(`#${id}`).addEventListener('change', run);
  for (const id of ['start', 'end']) {
    $(`#${id}`).addEventListener('keydown', (e) => {
      if (e.key === 'Enter') run();
    });
  }
  $('#queries').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && e.target.tagName === 'INPUT' && e.defaultPrevented === false) run();
  });
  $('#refresh').addEventListener('change', () => {
    clearInterval(refreshTimer);
    const secs = Number($('#refresh').value);
    if (secs > 0) refreshTimer = setInterval(run, secs * 1000);
  });
  window.addEventListener('hashchange', () => {
    if (location.hash.slice(1) !== toHash(state)) loadFromHash();
  });
  window.addEventListener('resize', () => {
    clearTimeout(window.resizeTimer);
    window.resizeTimer = setTimeout(() => state.queries.some((q) => q.metric) && run(), 250);
  });
  if (!loadFromHash()) renderControls();
}

init();
