// The TSD's HTTP API. Errors come back as Error objects carrying OpenTSDB's message and
// details, so the page can show them as the server wrote them.

class ApiError extends Error {
  constructor(status, message, details) {
    super(message);
    this.status = status;
    this.details = details || '';
  }
}

async function call(path, options = {}) {
  let response;
  try {
    response = await fetch(path, options);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `The TSD did not answer: ${e.message}`);
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const err = body && body.error;
    throw new ApiError(
      response.status,
      (err && err.message) || `${response.status} ${response.statusText}`,
      err && err.details,
    );
  }
  return body;
}

// `within` ({ metric, tagk, tags }, each optional) restricts tag keys and values to a
// metric's series (Hourglass's parameters, answered from the tag index when it covers them).
export function suggest(type, q, max = 25, within = {}) {
  const params = new URLSearchParams({ type, q, max: String(max) });
  for (const key of ['metric', 'tagk', 'tags']) {
    if (within[key]) params.set(key, within[key]);
  }
  return call(`/api/suggest?${params}`);
}

export const aggregators = () => call('/api/aggregators');
export const version = () => call('/api/version');

// `arrays`: points come as [[ms, value], ...], cheaper to read than an object. `signal`
// cancels a query that a newer one replaces.
export function query(body, signal) {
  return call('/api/query?arrays', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
}

// A Graphite-style expression (`params` from state.js's gexpParams); answered as /api/query
// answers, one object per series.
export function gexp(params, signal) {
  return call(`/api/query/gexp?${params}`, { signal });
}

// Trees (/api/tree): the definitions, and one branch by `{ branch }` id or `{ treeid }` (the
// root), with its child branches and leaves.
export const trees = () => call('/api/tree');
export function branch(which) {
  return call(`/api/tree/branch?${new URLSearchParams(which)}`);
}
