// The chart: uPlot with a left and an optional right axis, log scales, annotations as
// vertical markers, drag-to-zoom handed back to the page, and our own legend table (label,
// axis, last, min, max, and the value under the cursor).

import uPlot from 'uplot';

const PALETTE = [
  '#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf',
  '#bcbd22', '#7f7f7f', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd',
];

// `metric{tagk=tagv, ...}`, as OpenTSDB titles a series.
export function seriesLabel(result) {
  const tags = Object.entries(result.tags || {}).map(([k, v]) => `${k}=${v}`).join(', ');
  return `${result.metric}{${tags}}`;
}

// 24-hour time labels (uPlot's table: tick step, format, then the formats used when the
// year, month, day, hour, minute or second changes).
const TIME_LABELS = [
  [3600 * 24 * 365, '{YYYY}', null, null, null, null, null, null, 1],
  [3600 * 24 * 28, '{MMM}', '\n{YYYY}', null, null, null, null, null, 1],
  [3600 * 24, '{MMM} {D}', '\n{YYYY}', null, null, null, null, null, 1],
  [3600, '{HH}:{mm}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
  [60, '{HH}:{mm}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
  [1, '{HH}:{mm}:{ss}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
  [0.001, '{HH}:{mm}:{ss}.{fff}', '\n{YYYY}-{MM}-{DD}', null, '\n{MMM} {D}', null, null, null, 1],
];

const number = (v) => (v === null || v === undefined || Number.isNaN(v) ? null : Number(v));

function formatValue(v) {
  if (v === null || v === undefined) return '—';
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e9 || a < 1e-3)) return v.toExponential(3);
  return String(Math.round(v * 1000) / 1000);
}

// Series on one shared, sorted time axis (seconds); missing points are null.
function align(lines) {
  const first = lines[0]?.points;
  const shared = first && lines.every((l) => l.points.length === first.length
    && l.points.every((p, i) => p[0] === first[i][0]));
  if (shared) {
    return [first.map((p) => p[0] / 1000), ...lines.map((l) => l.points.map((p) => p[1]))];
  }
  const times = [...new Set(lines.flatMap((l) => l.points.map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(times.map((t, i) => [t, i]));
  const columns = lines.map((l) => {
    const col = new Array(times.length).fill(null);
    for (const [t, v] of l.points) col[index.get(t)] = v;
    return col;
  });
  return [times.map((t) => t / 1000), ...columns];
}

// Vertical markers for annotations: drawn on the canvas, plus hoverable DOM markers.
function annotationsPlugin(notes) {
  const markers = [];
  return {
    hooks: {
      init(u) {
        for (const note of notes) {
          const m = document.createElement('div');
          m.className = 'annotation-marker';
          m.dataset.testid = 'annotation';
          m.title = note.description + (note.notes ? `\n${note.notes}` : '');
          u.over.appendChild(m);
          markers.push([note, m]);
        }
      },
      draw(u) {
        const { ctx } = u;
        ctx.save();
        ctx.strokeStyle = '#8250df';
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = uPlot.pxRatio;
        for (const [note, m] of markers) {
          const x = u.valToPos(note.time, 'x');
          const inside = x >= 0 && x <= u.over.clientWidth;
          m.style.display = inside ? '' : 'none';
          m.style.left = `${x}px`;
          if (!inside) continue;
          const cx = Math.round(u.valToPos(note.time, 'x', true));
          ctx.beginPath();
          ctx.moveTo(cx, u.bbox.top);
          ctx.lineTo(cx, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      },
    },
  };
}

// Draws `lines` ([{label, right, points: [[ms, value]]}]) into `target`, the legend into
// `legend`. Returns the uPlot instance.
export function drawChart(target, legend, lines, options) {
  const { tz, ylog, y2log, notes, onZoom } = options;
  const data = align(lines.map((l) => ({ ...l, points: l.points.map(([t, v]) => [t, number(v)]) })));
  const hasRight = lines.some((l) => l.right);
  const width = Math.max(320, target.clientWidth || 800);
  const scales = {
    x: { time: true },
    y: { distr: ylog ? 3 : 1 },
  };
  // Log axes leave some ticks unlabelled (null).
  const tickLabels = (u, ticks) => ticks.map((v) => (v === null ? '' : formatValue(v)));
  const axes = [
    { values: TIME_LABELS },
    { scale: 'y', size: 60, values: tickLabels },
  ];
  if (hasRight) {
    scales.y2 = { distr: y2log ? 3 : 1 };
    axes.push({ scale: 'y2', side: 1, size: 60, grid: { show: false }, values: tickLabels });
  }
  const series = [
    {},
    ...lines.map((l, i) => ({
      label: l.label,
      scale: l.right ? 'y2' : 'y',
      stroke: PALETTE[i % PALETTE.length],
      width: 1.5,
      spanGaps: true,
      points: { show: false },
    })),
  ];
  const rows = [];
  const opts = {
    width,
    height: Math.max(260, Math.round(width * 0.42)),
    tzDate: tz ? (ts) => uPlot.tzDate(new Date(ts * 1e3), tz) : undefined,
    scales,
    axes,
    series,
    legend: { show: false },
    cursor: { drag: { x: true, y: false, setScale: false } },
    plugins: [annotationsPlugin(notes)],
    hooks: {
      setSelect: [(u) => {
        if (u.select.width > 2 && onZoom) {
          const from = u.posToVal(u.select.left, 'x');
          const to = u.posToVal(u.select.left + u.select.width, 'x');
          u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
          onZoom(Math.floor(from * 1000), Math.ceil(to * 1000));
        }
      }],
      setCursor: [(u) => {
        const idx = u.cursor.idx;
        rows.forEach((row, i) => {
          const v = idx === null || idx === undefined ? null : u.data[i + 1][idx];
          row.hover.textContent = formatValue(v);
        });
      }],
    },
  };
  target.replaceChildren();
  const plot = new uPlot(opts, data, target);

  // The legend: one row per series; a click hides or shows it.
  const body = lines.map((l, i) => {
    const values = data[i + 1].filter((v) => v !== null && !Number.isNaN(v));
    const last = values.length ? values[values.length - 1] : null;
    const tr = document.createElement('tr');
    tr.dataset.series = l.label;
    const cell = (text, cls) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls) td.className = cls;
      tr.appendChild(td);
      return td;
    };
    const swatch = cell('', 'swatch');
    swatch.style.setProperty('--color', PALETTE[i % PALETTE.length]);
    cell(l.label, 'label');
    cell(l.right ? 'right' : 'left', 'axis');
    cell(formatValue(last), 'last num');
    cell(formatValue(values.length ? values.reduce((a, b) => (b < a ? b : a)) : null), 'min num');
    cell(formatValue(values.length ? values.reduce((a, b) => (b > a ? b : a)) : null), 'max num');
    const hover = cell('—', 'hover num');
    tr.addEventListener('click', () => {
      const show = !plot.series[i + 1].show;
      plot.setSeries(i + 1, { show });
      tr.classList.toggle('hidden-series', !show);
    });
    rows.push({ hover });
    return tr;
  });
  const head = document.createElement('tr');
  for (const h of ['', 'series', 'axis', 'last', 'min', 'max', 'at cursor']) {
    const th = document.createElement('th');
    th.textContent = h;
    head.appendChild(th);
  }
  legend.replaceChildren(head, ...body);
  return plot;
}
