// OpenTSDB's time strings, read and written the way the TSD does, so the page can show the
// range it asked for, zoom and step back without a round trip:
//   now | N{ms,s,m,h,d,w,n,y}-ago | yyyy/MM/dd[-HH:mm[:ss]] (in a time zone) | seconds | ms

const UNIT_MS = {
  ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5, w: 6048e5, n: 2592e6, y: 31536e6,
};

const formatters = new Map();

// The wall-clock fields of `ms` in `tz`.
function fields(ms, tz) {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: tz, hourCycle: 'h23',
      year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit',
    });
    formatters.set(tz, f);
  }
  const out = {};
  for (const p of f.formatToParts(ms)) out[p.type] = p.value;
  return out;
}

// How far `tz` is ahead of UTC at the instant `ms`.
function offset(ms, tz) {
  const f = fields(ms, tz);
  const wall = Date.UTC(f.year, f.month - 1, f.day, f.hour, f.minute, f.second);
  return wall - Math.floor(ms / 1000) * 1000;
}

// Milliseconds of a wall-clock time in `tz` (the offset is taken twice, which settles it
// across daylight saving changes).
function fromWallClock(y, mo, d, h, mi, s, tz) {
  const wall = Date.UTC(y, mo - 1, d, h, mi, s);
  const guess = wall - offset(wall, tz);
  return wall - offset(guess, tz);
}

// Milliseconds since the epoch for an OpenTSDB time, or NaN when it is not one.
export function parseTime(text, tz, now = Date.now()) {
  const t = String(text).trim().toLowerCase();
  if (t === '' || t === 'now') return now;
  const rel = /^(\d+)(ms|s|m|h|d|w|n|y)-ago$/.exec(t);
  if (rel) return now - Number(rel[1]) * UNIT_MS[rel[2]];
  const abs = /^(\d{4})\/(\d\d?)\/(\d\d?)(?:[- ](\d\d?):(\d\d)(?::(\d\d))?)?$/.exec(t);
  if (abs) {
    const [y, mo, d, h = 0, mi = 0, s = 0] = abs.slice(1).map((v) => Number(v ?? 0));
    return fromWallClock(y, mo, d, h, mi, s, tz);
  }
  if (/^\d{10}\.\d{3}$/.test(t)) return Number(t.replace('.', ''));
  if (/^\d+$/.test(t)) return t.length <= 10 ? Number(t) * 1000 : Number(t);
  return NaN;
}

// `yyyy/MM/dd-HH:mm:ss` in `tz`, the absolute form OpenTSDB reads.
export function formatTime(ms, tz) {
  const f = fields(ms, tz);
  return `${f.year}/${f.month}/${f.day}-${f.hour}:${f.minute}:${f.second}`;
}
