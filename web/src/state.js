// The view's state and its URL form. The URL fragment uses OpenTSDB's /q query string, so
// links made for OpenTSDB open here and /q?... redirects land on the same view:
//   start=1h-ago&end=...&tz=UTC&m=sum:1m-avg-none:rate{counter,100,0}:sys.cpu{host=*}{dc=lga}
//   &o=axis x1y2&ylog&y2log
// m syntax: AGG:[INTERVAL-FUNC[-FILL]:][rate[{counter[,max[,reset]]}]:]METRIC[{grouped}][{not grouped}]

export const FILTER_TYPES = [
  'literal_or', 'wildcard', 'regexp', 'not_literal_or',
  'iliteral_or', 'iwildcard', 'not_iliteral_or',
];

export function newFilter() {
  return { tagk: '', type: 'literal_or', value: '', groupBy: true };
}

export function newQuery() {
  return {
    aggregator: 'sum', metric: '', downsample: '', rate: false,
    counter: false, counterMax: '', resetValue: '', dropResets: false,
    right: false, filters: [],
  };
}

export function defaultState() {
  return { start: '1h-ago', end: '', tz: '', ylog: false, y2log: false, queries: [newQuery()] };
}

// Splits on `sep` outside braces and parentheses.
function splitTop(text, sep) {
  const parts = [];
  let depth = 0;
  let cur = '';
  for (const c of text) {
    if (c === '{' || c === '(') depth++;
    if (c === '}' || c === ')') depth = Math.max(0, depth - 1);
    if (c === sep && depth === 0) {
      parts.push(cur);
      cur = '';
    } else {
      cur += c;
    }
  }
  parts.push(cur);
  return parts;
}

// `host=web01|web02,dc=wildcard(lga*)` → filters.
function parseFilters(body, groupBy) {
  if (!body.trim()) return [];
  return splitTop(body, ',').map((pair) => {
    const eq = pair.indexOf('=');
    const tagk = (eq < 0 ? pair : pair.slice(0, eq)).trim();
    const raw = eq < 0 ? '' : pair.slice(eq + 1).trim();
    const fn = /^([a-z_]+)\((.*)\)$/s.exec(raw);
    if (fn && FILTER_TYPES.includes(fn[1])) return { tagk, type: fn[1], value: fn[2], groupBy };
    if (raw === '*') return { tagk, type: 'wildcard', value: '*', groupBy };
    return { tagk, type: 'literal_or', value: raw, groupBy };
  });
}

export function parseM(m) {
  const q = newQuery();
  const tokens = splitTop(m, ':');
  q.aggregator = tokens.shift() || 'sum';
  let target = tokens.pop() || '';
  for (const t of tokens) {
    const rate = /^rate(?:\{(.*)\})?$/.exec(t);
    if (rate) {
      q.rate = true;
      if (rate[1] !== undefined) {
        const [kind, max, reset, drop] = rate[1].split(',');
        q.counter = kind === 'counter' || kind === 'dropcounter';
        q.dropResets = kind === 'dropcounter' || drop === 'true';
        q.counterMax = max || '';
        q.resetValue = reset || '';
      }
    } else if (t) {
      q.downsample = t;
    }
  }
  const brace = target.indexOf('{');
  q.metric = brace < 0 ? target : target.slice(0, brace);
  target = brace < 0 ? '' : target.slice(brace);
  const groups = [];
  let depth = 0;
  let start = -1;
  for (let i = 0; i < target.length; i++) {
    if (target[i] === '{' && depth++ === 0) start = i + 1;
    if (target[i] === '}' && --depth === 0) groups.push(target.slice(start, i));
  }
  q.filters = [...parseFilters(groups[0] || '', true), ...parseFilters(groups[1] || '', false)];
  return q;
}

function filterText(f) {
  if (f.type === 'literal_or') return `${f.tagk}=${f.value}`;
  if (f.type === 'wildcard' && f.value === '*') return `${f.tagk}=*`;
  return `${f.tagk}=${f.type}(${f.value})`;
}

export function formatM(q) {
  const parts = [q.aggregator || 'sum'];
  if (q.downsample.trim()) parts.push(q.downsample.trim());
  if (q.rate) {
    if (q.counter || q.counterMax || q.resetValue || q.dropResets) {
      const kind = q.dropResets ? 'dropcounter' : q.counter ? 'counter' : '';
      const opts = [kind, q.counterMax, q.resetValue].join(',').replace(/,+$/, '');
      parts.push(`rate{${opts}}`);
    } else {
      parts.push('rate');
    }
  }
  const used = q.filters.filter((f) => f.tagk.trim() && f.value.trim());
  const grouped = used.filter((f) => f.groupBy).map(filterText).join(',');
  const others = used.filter((f) => !f.groupBy).map(filterText).join(',');
  let target = q.metric.trim();
  if (grouped || others) target += `{${grouped}}`;
  if (others) target += `{${others}}`;
  parts.push(target);
  return parts.join(':');
}

// A readable fragment: only what must be escaped is escaped.
function encode(text) {
  return encodeURIComponent(text)
    .replace(/%(3A|2F|7B|7D|7C|3D|2C|2A|28|29)/g, (_, h) => String.fromCharCode(parseInt(h, 16)));
}

export function toHash(state) {
  const parts = [`start=${encode(state.start)}`];
  if (state.end) parts.push(`end=${encode(state.end)}`);
  if (state.tz) parts.push(`tz=${encode(state.tz)}`);
  for (const q of state.queries) {
    parts.push(`m=${encode(formatM(q))}`);
    parts.push(`o=${q.right ? encode('axis x1y2') : ''}`);
  }
  if (state.ylog) parts.push('ylog');
  if (state.y2log) parts.push('y2log');
  return parts.join('&');
}

export function fromHash(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ''));
  const ms = params.getAll('m');
  if (!ms.length) return null;
  const os = params.getAll('o');
  const state = defaultState();
  state.start = params.get('start') || '1h-ago';
  state.end = params.get('end') || '';
  state.tz = params.get('tz') || '';
  state.ylog = params.has('ylog');
  state.y2log = params.has('y2log');
  state.queries = ms.map((m, i) => ({ ...parseM(m), right: (os[i] || '').includes('x1y2') }));
  return state;
}

// The /api/query body for a state.
export function queryBody(state) {
  return {
    start: /^\d+$/.test(state.start) ? Number(state.start) : state.start,
    ...(state.end ? { end: /^\d+$/.test(state.end) ? Number(state.end) : state.end } : {}),
    ...(state.tz ? { timezone: state.tz } : {}),
    useCalendar: state.queries.some((q) => /^\d+[a-z]+c-/.test(q.downsample.trim())),
    msResolution: true,
    globalAnnotations: true,
    showQuery: true,
    queries: state.queries.map((q) => {
      const sub = { aggregator: q.aggregator, metric: q.metric.trim() };
      if (q.downsample.trim()) sub.downsample = q.downsample.trim();
      if (q.rate) {
        sub.rate = true;
        sub.rateOptions = { counter: q.counter, dropResets: q.dropResets };
        if (q.counterMax !== '') sub.rateOptions.counterMax = Number(q.counterMax);
        if (q.resetValue !== '') sub.rateOptions.resetValue = Number(q.resetValue);
      }
      sub.filters = q.filters
        .filter((f) => f.tagk.trim() && f.value.trim())
        .map((f) => ({ type: f.type, tagk: f.tagk.trim(), filter: f.value.trim(), groupBy: f.groupBy }));
      return sub;
    }),
  };
}
