// Gasoline — the capture queues: what tracked pages captured, on its way to the daemon's capture
// routes in protocol-sized batches. One queue per route; each sends one batch at a time, and
// retries with back-off; while the daemon is down a bounded buffer per route drops the oldest items
// and counts them.
//
// Nothing here touches chrome.*: the sender, the wait for page loads and the timers are given to
// `createCaptureQueues` (worker/capture.js wires them; tests/js/queues.test.mjs fakes them).

export const QUEUE_SPECS = Object.freeze({
  log: { path: '/logs', key: 'entries', batch: 50, cap: 5000, countsEntries: true },
  network_body: { path: '/network-bodies', key: 'bodies', batch: 50, cap: 1000 },
  ws: { path: '/websocket-events', key: 'events', batch: 100, cap: 5000 },
  action: { path: '/enhanced-actions', key: 'actions', batch: 50, cap: 2000 },
  perf: { path: '/performance-snapshots', key: 'snapshots', batch: 10, cap: 100 },
});

// A new item waits this long for others to join its batch.
export const GATHER_MS = 250;
// While a tab loads a page, a batch waits for the load (lib/loads.js) at most this long; nothing is dropped.
export const CAPTURE_LOAD_HOLD_MS = 3000;

/** The back-off after a failed send: 1 s, doubling up to 30 s; a Retry-After (seconds) lengthens it, up to 60 s. */
export function nextBackoffMs(currentMs, retryAfterSeconds = 0) {
  let next = Math.min(currentMs ? currentMs * 2 : 1000, 30000);
  if (retryAfterSeconds > 0) next = Math.max(next, Math.min(retryAfterSeconds * 1000, 60000));
  return next;
}

/** A refusal that sending the batch again cannot change: any 4xx but 408 (timeout) and 429 (too many). */
export function isPermanentRefusal(status) {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/** Appends `item` to `items`, dropping the oldest beyond `cap`; returns how many were dropped. */
export function pushCapped(items, item, cap) {
  items.push(item);
  if (items.length <= cap) return 0;
  const over = items.length - cap;
  items.splice(0, over);
  return over;
}

/**
 * The queues, one per entry of `specs`.
 *
 * `send(spec, batch)` posts `{[spec.key]: batch}` to `spec.path` and resolves to the Response (or
 * rejects: nothing answered); `settled(maxWaitMs)` resolves when no page is loading (or after
 * `maxWaitMs`); `onEntries(n)` receives the daemon's entry count from a queue with
 * `countsEntries`; `log(level, message, category)` reports batches the daemon refused; `timers`
 * supplies setTimeout/clearTimeout.
 */
export function createCaptureQueues({
  send, settled = async () => {}, onEntries = () => {}, log = () => {}, timers = globalThis, specs = QUEUE_SPECS,
}) {
  const queues = {};
  for (const name of Object.keys(specs)) {
    queues[name] = { items: [], dropped: 0, sent: 0, rejected: 0, sending: false, backoffMs: 0, timer: null };
  }
  // How many dropped items the daemon has been told of (worker/sync.js reports the rest).
  const drops = { reported: 0 };

  function schedule(name, delay) {
    const q = queues[name];
    if (q.timer || q.sending) return;
    const wait = delay === null ? q.backoffMs : delay;
    q.timer = timers.setTimeout(() => { q.timer = null; flush(name); }, wait);
  }

  /** Queues `item` for the route `name`; false for a name no queue has. */
  function enqueue(name, item) {
    const q = queues[name];
    if (!q) return false;
    q.dropped += pushCapped(q.items, item, specs[name].cap);
    schedule(name, q.backoffMs ? null : GATHER_MS);
    return true;
  }

  /**
   * The daemon is (back) there, or another one is: every queue drops its back-off and sends what
   * waits now (none waits out a back-off earned against a daemon that was down, or another one).
   */
  function retryNow() {
    for (const name of Object.keys(queues)) {
      const q = queues[name];
      q.backoffMs = 0;
      if (q.timer) { timers.clearTimeout(q.timer); q.timer = null; }
      if (q.items.length) schedule(name, 0);
    }
  }

  async function flush(name) {
    const q = queues[name];
    const spec = specs[name];
    if (q.sending || !q.items.length) return;
    q.sending = true;
    await settled(CAPTURE_LOAD_HOLD_MS);
    const batch = q.items.slice(0, spec.batch);
    try {
      const resp = await send(spec, batch);
      const permanent = isPermanentRefusal(resp.status);
      if (resp.ok || permanent) {
        const sent = new Set(batch);
        q.items = q.items.filter((x) => !sent.has(x));
        q.backoffMs = 0;
        if (resp.ok) {
          q.sent += batch.length;
          if (spec.countsEntries) {
            const data = await resp.json().catch(() => null);
            if (data && typeof data.entries === 'number') onEntries(data.entries);
            if (data && data.rejected) q.rejected += data.rejected;
          }
        } else {
          q.rejected += batch.length;
          log('warn', `${spec.path} refused a batch of ${batch.length}: HTTP ${resp.status}`, 'capture');
        }
      } else {
        q.backoffMs = nextBackoffMs(q.backoffMs, Number(resp.headers.get('Retry-After')) || 0);
      }
    } catch (e) {
      q.backoffMs = nextBackoffMs(q.backoffMs, 0);
    } finally {
      q.sending = false;
    }
    if (q.items.length) schedule(name, q.backoffMs ? null : 0);
  }

  function totalDropped() {
    return Object.values(queues).reduce((n, q) => n + q.dropped, 0);
  }

  /**
   * What to tell the daemon about drops: {dropped (the total so far), warning (null when nothing
   * new was dropped, else {message, data: dropped per queue})}. Once delivered, pass `dropped` to
   * `dropsReported`.
   */
  function dropReport() {
    const dropped = totalDropped();
    if (dropped <= drops.reported) return { dropped, warning: null };
    return {
      dropped,
      warning: {
        message: `buffer full while the daemon was unreachable: dropped ${dropped - drops.reported} oldest item(s)`,
        data: Object.fromEntries(Object.entries(queues).map(([k, q]) => [k, q.dropped])),
      },
    };
  }

  function dropsReported(dropped) {
    drops.reported = dropped;
  }

  /** Per queue: {buffered, sent, dropped, rejected, backoff_ms} (the status snapshot). */
  function snapshot() {
    return Object.fromEntries(Object.entries(queues).map(([k, q]) => [k, { buffered: q.items.length, sent: q.sent, dropped: q.dropped, rejected: q.rejected, backoff_ms: q.backoffMs }]));
  }

  return { enqueue, retryNow, flush, totalDropped, dropReport, dropsReported, snapshot };
}
