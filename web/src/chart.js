// The chart: uPlot with a left and an optional right axis, log scales, annotations as
// vertical markers, drag-to-zoom handed back to the page, and a legend table of our own
// (series, axis, last, min, max, and the value under the cursor).

import uPlot from 'uplot';
import { formatTime } from './time.js';

const PALETTE = [
  '#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf',
  '#bcbd22', '#7f7f7f', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd',
];

// Past the palette, hues a golden angle apart stay distinguishable.
const color = (i) => PALETTE[i] || `hsl(${Math.round(i * 137.508) % 360} 65% 45%)`;

// `metric{tagk=tagv,...}` with the tags in key order.
export function seriesLabel(result) {
  const tags = Object.keys(result.tags || {}).sort().map((k) => `${k}=${result.tags[k]}`);
  return `${result.metric}{${tags.join(',')}}`;
}

// 24-hour time labels. uPlot's table: the tick step (s), its format, then the formats used
// when the year, month, day, hour, minute or second changes.
const TIME_LABELS = [
  [3600 * 24 * 365, '{YYYY}', null, null, null, null, null, null, 1],
  [3600 * 24 * 28, '{MMM}', '\n{YYYY}', null, null, null, null, null, 1],
  [3600 * 24, '{MMM} {D}', '\n{YYYY}', null, null, null, null, null, 1],
  [3600, '{HH}:{mm}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
  [60, '{HH}:{mm}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
  [1, '{HH}:{mm}:{ss}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
  [0.001, '{HH}:{mm}:{ss}.{fff}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
];

function formatValue(v) {
  if (v === null || v === undefined) return '—';
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e9 || a < 1e-3)) return v.toExponential(3);
  return String(Math.round(v * 1000) / 1000);
}

// The series on one shared time axis, as uPlot wants them: [times (s), ...values]. A series
// without a point at a time gets `undefined` there, which uPlot draws across; `null` (a NaN
// or null the TSD filled in, or a value a log axis cannot show) breaks the line. Points come
// sorted, so merging is linear once the union of times is sorted. Also returns each series'
// last, min and max.
function align(lines, logAxis) {
  const first = lines[0].points;
  const shared = lines.every((l) => l.points.length === first.length
    && l.points.every((p, i) => p[0] === first[i][0]));
  let times;
  if (shared) {
    times = first.map((p) => p[0]);
  } else {
    const all = new Float64Array(lines.reduce((n, l) => n + l.points.length, 0));
    let n = 0;
    for (const l of lines) for (const p of l.points) all[n++] = p[0];
    all.sort();
    times = [];
    for (const t of all) if (t !== times[times.length - 1]) times.push(t);
  }
  const stats = [];
  const columns = lines.map((l) => {
    const col = new Array(times.length).fill(undefined);
    const log = logAxis(l);
    let last = null;
    let min = Infinity;
    let max = -Infinity;
    let j = 0;
    for (const [t, raw] of l.points) {
      while (times[j] < t) j++;
      const v = typeof raw === 'number' ? raw : null; // "NaN", "Infinity" or null
      col[j] = log && v !== null && v <= 0 ? null : v;
      if (v !== null) {
        last = v;
        if (v < min) min = v;
        if (v > max) max = v;
      }
    }
    stats.push({ last, min: last === null ? null : min, max: last === null ? null : max });
    return col;
  });
  return { data: [times.map((t) => t / 1000), ...columns], stats };
}

// Annotations as dashed vertical lines on the canvas, each with a dot above the plot that
// shows its description on hover.
function annotationsPlugin(notes, stroke) {
  const markers = [];
  return {
    hooks: {
      init(u) {
        for (const note of notes) {
          const m = document.createElement('div');
          m.className = 'annotation-marker';
          m.dataset.testid = 'annotation';
          m.dataset.time = String(note.time);
          m.title = [note.description, note.notes].filter(Boolean).join('\n');
          m.setAttribute('role', 'img');
          m.setAttribute('aria-label', `Annotation: ${m.title}`);
          u.over.appendChild(m);
          markers.push([note, m]);
        }
      },
      draw(u) {
        const { ctx, bbox } = u;
        ctx.save();
        ctx.strokeStyle = stroke;
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = uPlot.pxRatio;
        for (const [note, m] of markers) {
          const x = u.valToPos(note.time / 1000, 'x');
          const inside = x >= 0 && x <= bbox.width / uPlot.pxRatio;
          m.hidden = !inside;
          m.style.left = `${x}px`;
          if (!inside) continue;
          const cx = Math.round(u.valToPos(note.time / 1000, 'x', true));
          ctx.beginPath();
          ctx.moveTo(cx, bbox.top);
          ctx.lineTo(cx, bbox.top + bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      },
    },
  };
}

// The plot's size for its container.
export function chartSize(target) {
  const width = Math.max(320, target.clientWidth || 800);
  const height = Math.round(Math.min(Math.max(260, width * 0.4), window.innerHeight * 0.65));
  return { width, height };
}

// Draws `lines` ([{label, right, points: [[ms, value], ...]}]) into `target` and their legend
// into the table `legend`. `range` is [from, to] in ms; `notes` are [{time (ms), description,
// notes}]; `onZoom(from, to)` gets a range dragged out on the plot. Returns the uPlot.
export function drawChart(target, legend, lines, options) {
  const { tz, range, ylog, y2log, notes, onZoom } = options;
  const { data, stats } = align(lines, (l) => (l.right ? y2log : ylog));
  const css = getComputedStyle(document.documentElement);
  const fg = css.getPropertyValue('--muted').trim();
  const grid = css.getPropertyValue('--grid').trim();
  const hasRight = lines.some((l) => l.right);
  const scales = {
    x: { time: true, ...(range.every(Number.isFinite) ? { range: () => range.map((t) => t / 1000) } : {}) },
    y: { distr: ylog ? 3 : 1 },
  };
  // Log axes leave some ticks unlabelled (null).
  const tickLabels = (u, ticks) => ticks.map((v) => (v === null ? '' : formatValue(v)));
  const axis = { stroke: fg, grid: { stroke: grid }, ticks: { stroke: grid } };
  const axes = [
    { ...axis, values: TIME_LABELS },
    { ...axis, scale: 'y', size: 64, values: tickLabels },
  ];
  if (hasRight) {
    scales.y2 = { distr: y2log ? 3 : 1 };
    axes.push({ ...axis, scale: 'y2', side: 1, size: 64, grid: { show: false }, values: tickLabels });
  }
  const series = [{}, ...lines.map((l, i) => ({
    label: l.label,
    scale: l.right ? 'y2' : 'y',
    stroke: color(i),
    width: 1.5,
  }))];

  const hovers = [];
  const cursorTime = document.createElement('th');
  cursorTime.id = 'cursor-time';
  cursorTime.className = 'num';
  cursorTime.textContent = 'at cursor';
  const opts = {
    ...chartSize(target),
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), tz),
    scales,
    axes,
    series,
    legend: { show: false },
    cursor: { drag: { x: true, y: false, setScale: false } },
    plugins: [annotationsPlugin(notes, css.getPropertyValue('--annotation').trim())],
    hooks: {
      setSelect: [(u) => {
        if (u.select.width < 3) return;
        const from = u.posToVal(u.select.left, 'x');
        const to = u.posToVal(u.select.left + u.select.width, 'x');
        u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
        onZoom(from * 1000, to * 1000);
      }],
      setCursor: [(u) => {
        const idx = u.cursor.idx;
        if (idx === null || idx === undefined) {
          cursorTime.textContent = 'at cursor';
          delete cursorTime.dataset.ts;
        } else {
          const ms = Math.round(u.data[0][idx] * 1000);
          cursorTime.textContent = `at ${formatTime(ms, tz)}${ms % 1000 ? `.${String(ms % 1000).padStart(3, '0')}` : ''}`;
          cursorTime.dataset.ts = String(ms);
        }
        // Each series' nearest point to the cursor (idxs skips the times it has no point at).
        hovers.forEach((td, i) => {
          const j = u.cursor.idxs?.[i + 1];
          td.textContent = formatValue(idx === null || j === null || j === undefined ? null : u.data[i + 1][j]);
        });
      }],
    },
  };
  target.replaceChildren();
  const plot = new uPlot(opts, data, target);

  // The legend: one row per series; a click hides or shows it.
  const row = (cells, tag) => {
    const tr = document.createElement('tr');
    for (const [text, cls] of cells) {
      const td = document.createElement(tag);
      td.textContent = text;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    return tr;
  };
  const head = row([['', ''], ['Series', ''], ['Axis', ''], ['Last', 'num'], ['Min', 'num'], ['Max', 'num']], 'th');
  head.appendChild(cursorTime);
  const body = lines.map((l, i) => {
    const s = stats[i];
    const tr = row([
      ['', 'swatch'], [l.label, 'label'], [l.right ? 'right' : 'left', 'axis'],
      [formatValue(s.last), 'last num'], [formatValue(s.min), 'min num'], [formatValue(s.max), 'max num'],
      ['—', 'hover num'],
    ], 'td');
    tr.dataset.series = l.label;
    tr.firstChild.style.setProperty('--color', color(i));
    tr.tabIndex = 0;
    tr.title = 'Click to hide or show';
    hovers.push(tr.lastChild);
    const toggle = () => {
      const show = !plot.series[i + 1].show;
      plot.setSeries(i + 1, { show });
      tr.classList.toggle('hidden-series', !show);
    };
    tr.addEventListener('click', toggle);
    tr.addEventListener('keydown', (e) => (e.key === 'Enter' || e.key === ' ') && (e.preventDefault(), toggle()));
    return tr;
  });
  const thead = document.createElement('thead');
  thead.appendChild(head);
  const tbody = document.createElement('tbody');
  tbody.append(...body);
  legend.replaceChildren(thead, tbody);
  return plot;
}
