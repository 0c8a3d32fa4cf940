// The URL form (OpenTSDB's /q query string), the /api/query body and OpenTSDB times, without
// a browser or a TSD.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatM, fromHash, gexpParams, parseM, queryBody, toHash } from '../src/state.js';
import { formatTime, parseTime } from '../src/time.js';

test('m expressions round-trip unchanged', () => {
  for (const m of [
    'sum:sys.cpu.user',
    'sum:1m-avg-none:rate{counter,100,0}:sys.cpu.user{host=web01|web02}{dc=wildcard(lga*)}',
    'avg:1dc-sum-zero:sys.cpu{}{dc=lga}',
    'max:rate{dropcounter,,5}:m{host=*}',
    'zimsum:0all-sum:rate:explicit_tags:pre-agg:m{host=regexp(web{2}[0-9]),rack=web*,dc=not_literal_or(x|y)}',
    'p99:m{host=iliteral_or(WEB01),dc=iwildcard(a*b),x=not_iliteral_or(q),y=wildcard(Web*)}',
  ]) {
    assert.equal(formatM(parseM(m)), m);
  }
});

test('m expressions are read as OpenTSDB reads them', () => {
  const q = parseM('sum:1m-avg-none:rate{counter,100,0}:sys.cpu.user{host=web01|web02}{dc=wildcard(lga*)}');
  assert.equal(q.aggregator, 'sum');
  assert.equal(q.metric, 'sys.cpu.user');
  assert.equal(q.downsample, '1m-avg-none');
  assert.deepEqual([q.rate, q.counter, q.counterMax, q.resetValue, q.dropResets], [true, true, '100', '0', false]);
  assert.deepEqual(q.filters, [
    { tagk: 'host', type: 'literal_or', value: 'web01|web02', groupBy: true },
    { tagk: 'dc', type: 'wildcard', value: 'lga*', groupBy: false },
  ]);
  // A bare glob is a case-insensitive wildcard; `wildcard(*)` is written as `*`.
  assert.deepEqual(parseM('sum:m{host=Web*}').filters[0], { tagk: 'host', type: 'iwildcard', value: 'Web*', groupBy: true, bare: true });
  assert.equal(formatM(parseM('sum:m{host=wildcard(*)}')), 'sum:m{host=*}');
  // Counter options without `counter` mean nothing and are dropped.
  assert.equal(formatM(parseM('sum:rate{,100}:m')), 'sum:rate:m');
  assert.equal(parseM('sum:rate{dropcounter}:m').counter, true);
});

test('OpenTSDB /q links round-trip, keeping what the page does not use', () => {
  const link = 'start=2013/01/01-00:00:00&end=1357000000&m=sum:1m-avg-none:rate{counter,100,0}:sys.cpu.user'
    + '{host=web01|web02}{dc=wildcard(lga*)}&o=axis+x1y2&m=avg:x&o=with+lines&tz=UTC&ylog&y2log'
    + '&autoreload=30&key=out+right+top+box&wxh=1300x600&nokey';
  const state = fromHash(`#${link}`, 'Europe/Paris');
  assert.deepEqual([state.start, state.end, state.tz, state.ylog, state.y2log, state.autoreload],
    ['2013/01/01-00:00:00', '1357000000', 'UTC', true, true, 30]);
  assert.deepEqual(state.queries.map((q) => [q.right, q.options]), [[true, ''], [false, 'with lines']]);
  assert.deepEqual(state.extra, [['key', 'out right top box'], ['wxh', '1300x600'], ['nokey', '']]);
  assert.equal(toHash(state), link);

  // %20 for a space reads the same; a link without tz takes the given zone and says so.
  const plain = fromHash('start=1h-ago&m=sum:a&o=axis%20x1y2', 'Europe/Paris');
  assert.equal(plain.queries[0].right, true);
  assert.equal(toHash(plain), 'start=1h-ago&m=sum:a&o=axis+x1y2&tz=Europe/Paris');
  // An empty fragment is the default view.
  assert.equal(toHash(fromHash('', 'UTC')), 'start=1h-ago&m=sum:&o=&tz=UTC');
});

test('the /api/query body', () => {
  const state = fromHash('start=2013/01/01-00:00:00&m=sum:1dc-avg-nan:rate{counter,4294967295,0}:a{host=web*}{dc=lga}'
    + '&m=max:explicit_tags:b&m=avg:&tz=America/Denver', 'UTC');
  assert.deepEqual(queryBody(state), {
    start: '2013/01/01-00:00:00',
    timezone: 'America/Denver',
    useCalendar: true,
    msResolution: true,
    globalAnnotations: true,
    showQuery: true,
    queries: [
      {
        aggregator: 'sum',
        metric: 'a',
        downsample: '1dc-avg-nan',
        rate: true,
        rateOptions: { counter: true, dropResets: false, counterMax: 4294967295, resetValue: 0 },
        filters: [
          { type: 'iwildcard', tagk: 'host', filter: 'web*', groupBy: true },
          { type: 'literal_or', tagk: 'dc', filter: 'lga', groupBy: false },
        ],
      },
      { aggregator: 'max', metric: 'b', explicitTags: true, filters: [] },
    ],
  });
  assert.equal(queryBody(fromHash('start=1357000000&end=1357000000123&m=sum:a', 'UTC')).end, 1357000000123);
  assert.throws(() => queryBody(fromHash('m=sum:rate{counter,lots}:a', 'UTC')), /counter max must be a whole number/);
});

test('expression rows round-trip through the URL and make /api/query/gexp parameters', () => {
  const link = 'start=2013/01/01-00:00:00&m=sum:a&o=&exp=scale(sum:sys.cpu.user{host=*},10)'
    + '&exp=alias(sumSeries(sum:a,sum:b),a+b)&tz=UTC&wxh=1300x600';
  const state = fromHash(`#${link}`, 'Europe/Paris');
  assert.deepEqual(state.expressions, ['scale(sum:sys.cpu.user{host=*},10)', 'alias(sumSeries(sum:a,sum:b),a b)']);
  assert.deepEqual(state.extra, [['wxh', '1300x600']]);
  assert.equal(toHash(state), link);
  // An empty row is kept too; a view without expressions writes none.
  assert.deepEqual(fromHash('m=sum:a&exp', 'UTC').expressions, ['']);
  assert.equal(toHash(fromHash('m=sum:a&exp', 'UTC')), 'start=1h-ago&m=sum:a&o=&exp&tz=UTC');
  assert.deepEqual(fromHash('m=sum:a', 'UTC').expressions, []);

  assert.equal(gexpParams(state, ' scale(sum:sys.cpu.user{host=*},10) '),
    'start=2013%2F01%2F01-00%3A00%3A00&tz=UTC&exp=scale%28sum%3Asys.cpu.user%7Bhost%3D*%7D%2C10%29&ms&arrays&global_annotations');
  const ranged = fromHash('start=1357000000&end=1357003600&tz=America/Denver', 'UTC');
  assert.equal(gexpParams(ranged, 'absolute(sum:a)'),
    'start=1357000000&end=1357003600&tz=America%2FDenver&exp=absolute%28sum%3Aa%29&ms&arrays&global_annotations');
});

test('OpenTSDB times, in a zone', () => {
  const now = Date.UTC(2024, 0, 1);
  assert.equal(parseTime('2013/01/01-00:00:00', 'UTC'), Date.UTC(2013, 0, 1));
  assert.equal(parseTime('2013/01/01', 'America/Denver'), Date.UTC(2013, 0, 1, 7));
  assert.equal(parseTime('2013/07/01 12:30', 'America/Denver'), Date.UTC(2013, 6, 1, 18, 30)); // daylight time
  assert.equal(parseTime('1357000000', 'UTC'), 1357000000000);
  assert.equal(parseTime('1357000000.123', 'UTC'), 1357000000123);
  assert.equal(parseTime('1357000000123', 'UTC'), 1357000000123);
  assert.equal(parseTime('90m-ago', 'UTC', now), now - 5400000);
  assert.equal(parseTime('', 'UTC', now), now);
  assert.equal(parseTime('now', 'UTC', now), now);
  assert.ok(Number.isNaN(parseTime('yesterday', 'UTC')));
  assert.equal(formatTime(Date.UTC(2013, 6, 1, 18, 30), 'America/Denver'), '2013/07/01-12:30:00');
  assert.equal(formatTime(Date.UTC(2013, 0, 1), 'UTC'), '2013/01/01-00:00:00');
});
