// The view's state, its URL form and the /api/query body it asks for.
//
// The URL fragment is OpenTSDB's /q query string, so links made for OpenTSDB open here and
// the TSD's redirect of /q?... to /#... lands on the same view:
//   start=2013/01/01-00:00:00&end=...&m=sum:1m-avg-none:rate{counter,100,0}:sys.cpu.user
//   {host=web01|web02}{dc=wildcard(lga*)}&o=axis+x1y2&m=...&o=&tz=UTC&ylog&y2log&autoreload=30
// m: AGG:[INTERVAL-FUNC[-FILL]:][rate[{counter[,max[,reset]]}]:]METRIC[{grouped}][{not grouped}]
// with each filter `tagk=v1|v2` (literal_or), `tagk=glob*` (iwildcard) or `tagk=type(expr)`.
// o: gnuplot options, one per m; `axis x1y2` puts that sub-query on the right axis.
// exp: a Graphite-style expression over m sub-queries, as /api/query/gexp takes it
//   (`scale(sum:sys.cpu.user{host=*},10)`), one per expression row, drawn beside the m ones.
// Parameters and m tokens the page does not use (key, wxh, yrange, pre-agg, ...) are kept
// and written back unchanged.

export const FILTER_TYPES = [
  'literal_or', 'wildcard', 'regexp', 'not_literal_or',
  'iliteral_or', 'iwildcard', 'not_iliteral_or',
];
export const FILLS = ['none', 'nan', 'null', 'zero'];

export function newFilter() {
  return { tagk: '', type: 'literal_or', value: '', groupBy: true };
}

export function newQuery() {
  return {
    aggregator: 'sum', metric: '', downsample: '',
    rate: false, counter: false, counterMax: '', resetValue: '', dropResets: false,
    explicitTags: false, right: false, filters: [],
    tokens: [], // m tokens not edited here (pre-agg, rollup_..., percentiles...)
    options: '', // the o= text besides `axis x1y2`
  };
}

function defaultState(tz) {
  return {
    start: '1h-ago', end: '', tz, ylog: false, y2log: false, autoreload: 0,
    queries: [newQuery()],
    expressions: [], // the exp texts, one per expression row
    extra: [], // [name, value] of parameters not used here
  };
}

// Splits on `sep` outside braces and parentheses.
function splitTop(text, sep) {
  const parts = [''];
  let depth = 0;
  for (const c of text) {
    if (c === '{' || c === '(') depth++;
    if (c === '}' || c === ')') depth = Math.max(0, depth - 1);
    if (c === sep && depth === 0) parts.push('');
    else parts[parts.length - 1] += c;
  }
  return parts;
}

// The bodies of the top-level `{...}` groups of `text` (braces may nest, as in regexps).
function braceGroups(text) {
  const groups = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '{' && depth++ === 0) start = i + 1;
    else if (text[i] === '}' && depth > 0 && --depth === 0) groups.push(text.slice(start, i));
  }
  return groups;
}

// One `tagk=value` as OpenTSDB reads it: `type(expr)`, a glob (a case-insensitive wildcard,
// marked `bare` to be written back the same way), or literal values.
function parseFilter(pair, groupBy) {
  const eq = pair.indexOf('=');
  const tagk = (eq < 0 ? pair : pair.slice(0, eq)).trim();
  const raw = eq < 0 ? '' : pair.slice(eq + 1).trim();
  const fn = /^([A-Za-z_]+)\((.*)\)$/s.exec(raw);
  if (fn) return { tagk, type: fn[1].toLowerCase(), value: fn[2], groupBy };
  if (raw === '*') return { tagk, type: 'wildcard', value: raw, groupBy };
  if (raw.includes('*')) return { tagk, type: 'iwildcard', value: raw, groupBy, bare: true };
  return { tagk, type: 'literal_or', value: raw, groupBy };
}

function formatFilter(f) {
  const bare = f.type === 'literal_or'
    || (f.type === 'wildcard' && f.value === '*')
    || (f.type === 'iwildcard' && f.bare && f.value.includes('*'));
  return bare ? `${f.tagk}=${f.value}` : `${f.tagk}=${f.type}(${f.value})`;
}

// `rate{counter,max,reset}` (`dropcounter` also drops resets), as OpenTSDB parses it.
function parseRate(token, q) {
  q.rate = true;
  const inner = /^rate\{(.*)\}$/i.exec(token);
  if (!inner) return;
  const [kind = '', max = '', reset = ''] = inner[1].split(',');
  q.counter = kind.endsWith('counter');
  q.dropResets = kind === 'dropcounter';
  q.counterMax = max;
  q.resetValue = reset;
}

// The counter options mean nothing without `counter`, and are left out then.
function formatRate(q) {
  if (!q.counter) return 'rate';
  const kind = q.dropResets ? 'dropcounter' : 'counter';
  return `rate{${[kind, q.counterMax, q.resetValue].join(',').replace(/,+$/, '')}}`;
}

export function parseM(m) {
  const q = newQuery();
  const tokens = splitTop(m, ':');
  q.aggregator = tokens.shift() || 'sum';
  const target = tokens.pop() || '';
  for (const t of tokens) {
    if (/^rate/i.test(t)) parseRate(t, q);
    else if (/^\d/.test(t)) q.downsample = t;
    else if (t === 'explicit_tags') q.explicitTags = true;
    else if (t) q.tokens.push(t);
  }
  const brace = target.indexOf('{');
  q.metric = brace < 0 ? target : target.slice(0, brace);
  braceGroups(target).slice(0, 2).forEach((body, i) => {
    if (body.trim()) q.filters.push(...splitTop(body, ',').map((pair) => parseFilter(pair, i === 0)));
  });
  return q;
}

// Filters that say something (a key and a value).
const usedFilters = (q) => q.filters.filter((f) => f.tagk.trim() && f.value.trim());

export function formatM(q) {
  const parts = [q.aggregator || 'sum'];
  if (q.downsample.trim()) parts.push(q.downsample.trim());
  if (q.rate) parts.push(formatRate(q));
  if (q.explicitTags) parts.push('explicit_tags');
  parts.push(...q.tokens);
  const used = usedFilters(q);
  const grouped = used.filter((f) => f.groupBy).map(formatFilter).join(',');
  const others = used.filter((f) => !f.groupBy).map(formatFilter).join(',');
  let target = q.metric.trim();
  if (used.length) target += `{${grouped}}`;
  if (others) target += `{${others}}`;
  parts.push(target);
  return parts.join(':');
}

const RIGHT_AXIS = /(^|\s)axis\s+x1y2(\s|$)/;

function formatO(q) {
  return [q.options, q.right ? 'axis x1y2' : ''].filter(Boolean).join(' ');
}

// Escapes only what must be, so the fragment stays readable; spaces become `+`.
function encode(text) {
  return encodeURIComponent(text)
    .replace(/%(3A|2F|7B|7D|7C|3D|2C|2A|28|29|5B|5D)/g, (_, h) => String.fromCharCode(parseInt(h, 16)))
    .replace(/%20/g, '+');
}

const param = (name, value) => (value === '' ? name : `${name}=${encode(value)}`);

export function toHash(state) {
  const parts = [param('start', state.start)];
  if (state.end) parts.push(param('end', state.end));
  for (const q of state.queries) parts.push(param('m', formatM(q)), `o=${encode(formatO(q))}`);
  for (const e of state.expressions) parts.push(param('exp', e));
  if (state.tz) parts.push(param('tz', state.tz));
  if (state.ylog) parts.push('ylog');
  if (state.y2log) parts.push('y2log');
  if (state.autoreload > 0) parts.push(param('autoreload', String(state.autoreload)));
  parts.push(...state.extra.map(([k, v]) => param(k, v)));
  return parts.join('&');
}

const KNOWN = new Set(['start', 'end', 'tz', 'm', 'o', 'exp', 'ylog', 'y2log', 'autoreload']);

// The state a fragment describes; `tz` is the zone when it names none.
export function fromHash(hash, tz) {
  const params = new URLSearchParams(hash.replace(/^#/, ''));
  const state = defaultState(tz);
  state.start = params.get('start') || state.start;
  state.end = params.get('end') || '';
  state.tz = params.get('tz') || tz;
  state.ylog = params.has('ylog');
  state.y2log = params.has('y2log');
  state.autoreload = Math.max(0, Number.parseInt(params.get('autoreload'), 10) || 0);
  const os = params.getAll('o');
  const ms = params.getAll('m');
  if (ms.length) {
    state.queries = ms.map((m, i) => {
      const o = os[i] || '';
      return { ...parseM(m), right: RIGHT_AXIS.test(o), options: o.replace(RIGHT_AXIS, ' ').trim() };
    });
  }
  state.expressions = params.getAll('exp');
  state.extra = [...params].filter(([k]) => !KNOWN.has(k));
  return state;
}

// An integer option of a rate, or undefined when blank.
function integer(text, what) {
  if (String(text).trim() === '') return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`The ${what} must be a whole number, not '${text}'.`);
  return n;
}

// A time as /api/query takes it: digits as a number, anything else as OpenTSDB text.
const timeValue = (t) => (/^\d+$/.test(t) ? Number(t) : t);

// The /api/query body for the sub-queries of `state` that name a metric. Throws an Error
// with a message for the page when an option cannot be sent.
export function queryBody(state) {
  const queries = state.queries.filter((q) => q.metric.trim());
  return {
    start: timeValue(state.start),
    ...(state.end ? { end: timeValue(state.end) } : {}),
    timezone: state.tz,
    // Calendar downsampling (`1dc`) aligns buckets on the zone's days, weeks, months.
    useCalendar: queries.some((q) => /^\d+[a-z]+c-/.test(q.downsample.trim())),
    // Always milliseconds: seconds would merge points written less than a second apart
    // into duplicate timestamps, and they cost only three digits a point.
    msResolution: true,
    globalAnnotations: true,
    showQuery: true, // each result names the sub-query it answers (query.index)
    queries: queries.map((q) => {
      const sub = { aggregator: q.aggregator, metric: q.metric.trim() };
      if (q.downsample.trim()) sub.downsample = q.downsample.trim();
      if (q.rate) {
        sub.rate = true;
        sub.rateOptions = q.counter ? {
          counter: true,
          dropResets: q.dropResets,
          counterMax: integer(q.counterMax, 'counter max'),
          resetValue: integer(q.resetValue, 'reset value'),
        } : { counter: false };
      }
      if (q.explicitTags) sub.explicitTags = true;
      sub.filters = usedFilters(q).map((f) => ({
        type: f.type, tagk: f.tagk.trim(), filter: f.value.trim(), groupBy: f.groupBy,
      }));
      return sub;
    }),
  };
}

// The /api/query/gexp query string for the expression `exp` over the view's range: points
// as [ms, value] arrays, with the global annotations.
export function gexpParams(state, exp) {
  const params = new URLSearchParams({ start: state.start });
  if (state.end) params.set('end', state.end);
  params.set('tz', state.tz);
  params.set('exp', exp.trim());
  return `${params}&ms&arrays&global_annotations`;
}
