// Unit tests of extension/worker/queues.js: the capture queues' batching, back-off, retry and
// bounded buffers (node:test; run by tests/test_extension_units.py). The sender, the wait for page
// loads and the timers are fakes; no chrome.* is involved.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  CAPTURE_LOAD_HOLD_MS, GATHER_MS, QUEUE_SPECS, createCaptureQueues, isPermanentRefusal, nextBackoffMs, pushCapped,
} from '../../extension/worker/queues.js';
import { deferred, fakeTimers } from './fake_timers.mjs';

const answer = (status, { json = null, retryAfter = null } = {}) => ({
  ok: status >= 200 && status < 300,
  status,
  headers: { get: (name) => (name === 'Retry-After' ? retryAfter : null) },
  json: async () => { if (json === null) throw new Error('no body'); return json; },
});

/** Queues over a scripted daemon: `reply(spec, batch)` answers each send (default 200). */
function harness({ reply = () => answer(200), specs } = {}) {
  const timers = fakeTimers();
  const sent = [];
  const logged = [];
  const entries = [];
  const settledWith = [];
  const queues = createCaptureQueues({
    send: async (spec, batch) => { sent.push({ path: spec.path, key: spec.key, batch: batch.slice() }); return reply(spec, batch); },
    settled: async (ms) => { settledWith.push(ms); },
    onEntries: (n) => entries.push(n),
    log: (...args) => logged.push(args),
    timers,
    ...(specs ? { specs } : {}),
  });
  return { timers, queues, sent, logged, entries, settledWith };
}

test('the back-off doubles from 1 s to 30 s; Retry-After lengthens it, up to 60 s, never shortens it', () => {
  const steps = [];
  let ms = 0;
  for (let i = 0; i < 7; i += 1) { ms = nextBackoffMs(ms); steps.push(ms); }
  assert.deepEqual(steps, [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  assert.equal(nextBackoffMs(0, 45), 45000);
  assert.equal(nextBackoffMs(0, 600), 60000);
  assert.equal(nextBackoffMs(8000, 2), 16000);
  assert.equal(nextBackoffMs(0, -3), 1000);
});

test('4xx refusals are final except 408 and 429; 5xx and success are not refusals', () => {
  for (const status of [400, 403, 404, 413, 422, 499]) assert.equal(isPermanentRefusal(status), true, String(status));
  for (const status of [200, 204, 408, 429, 500, 502, 503, 0]) assert.equal(isPermanentRefusal(status), false, String(status));
});

test('a bounded buffer drops the oldest items and says how many', () => {
  const items = [1, 2, 3];
  assert.equal(pushCapped(items, 4, 5), 0);
  assert.deepEqual(items, [1, 2, 3, 4]);
  assert.equal(pushCapped(items, 5, 3), 2);
  assert.deepEqual(items, [3, 4, 5]);
});

test('every route has a path, a body key, a batch size and a cap at least one batch', () => {
  assert.deepEqual(Object.keys(QUEUE_SPECS).sort(), ['action', 'log', 'network_body', 'perf', 'ws']);
  for (const [name, spec] of Object.entries(QUEUE_SPECS)) {
    assert.match(spec.path, /^\/[a-z-]+$/, name);
    assert.ok(spec.key && spec.batch > 0 && spec.cap >= spec.batch, name);
  }
});

test('items wait GATHER_MS for company, then go in protocol-sized batches, in order, one at a time', async () => {
  const h = harness();
  for (let i = 0; i < 120; i += 1) assert.equal(h.queues.enqueue('log', { n: i }), true);
  await h.timers.advance(GATHER_MS - 1);
  assert.equal(h.sent.length, 0);
  await h.timers.advance(1);
  assert.deepEqual(h.sent.map((s) => [s.path, s.key, s.batch.length]), [['/logs', 'entries', 50], ['/logs', 'entries', 50], ['/logs', 'entries', 20]]);
  assert.deepEqual(h.sent.flatMap((s) => s.batch.map((x) => x.n)), Array.from({ length: 120 }, (_, i) => i));
  assert.deepEqual(h.settledWith, [CAPTURE_LOAD_HOLD_MS, CAPTURE_LOAD_HOLD_MS, CAPTURE_LOAD_HOLD_MS]);
  assert.deepEqual(h.queues.snapshot().log, { buffered: 0, sent: 120, dropped: 0, rejected: 0, backoff_ms: 0 });
  assert.equal(h.queues.enqueue('nonsense', {}), false);
});

test('a batch waits for the page loads to settle before it is taken', async () => {
  const gate = deferred();
  const timers = fakeTimers();
  const sent = [];
  const queues = createCaptureQueues({ send: async (spec, batch) => { sent.push(batch.length); return answer(200); }, settled: () => gate.promise, timers });
  queues.enqueue('perf', 'a');
  await timers.advance(GATHER_MS);
  queues.enqueue('perf', 'b'); // arrives while the batch waits: it joins the batch
  await timers.advance(GATHER_MS);
  assert.deepEqual(sent, []);
  gate.resolve();
  await timers.advance(0);
  assert.deepEqual(sent, [2]);
});

test('while one batch is on its way no second one goes out', async () => {
  const pending = deferred();
  const timers = fakeTimers();
  let inFlight = 0;
  let most = 0;
  const queues = createCaptureQueues({
    send: async () => { inFlight += 1; most = Math.max(most, inFlight); await pending.promise; inFlight -= 1; return answer(200); },
    timers,
  });
  queues.enqueue('ws', 1);
  await timers.advance(GATHER_MS);
  queues.enqueue('ws', 2);
  await timers.advance(10 * GATHER_MS);
  assert.equal(most, 1);
  pending.resolve();
  await timers.advance(0);
  assert.equal(queues.snapshot().ws.sent, 2);
  assert.equal(most, 1);
});

test('nothing answered: the batch stays and is retried after 1, 2, 4 s; success clears the back-off', async () => {
  let down = true;
  const h = harness({ reply: () => { if (down) throw new TypeError('Failed to fetch'); return answer(200); } });
  h.queues.enqueue('action', { a: 1 });
  await h.timers.advance(GATHER_MS);
  assert.equal(h.sent.length, 1);
  assert.equal(h.queues.snapshot().action.backoff_ms, 1000);
  assert.deepEqual(h.timers.delays(), [1000]);
  await h.timers.advance(1000);
  assert.equal(h.queues.snapshot().action.backoff_ms, 2000);
  await h.timers.advance(2000);
  assert.equal(h.sent.length, 3);
  assert.equal(h.queues.snapshot().action.backoff_ms, 4000);
  // While backing off, a new item does not cut the wait short.
  h.queues.enqueue('action', { a: 2 });
  assert.deepEqual(h.timers.delays(), [4000]);
  down = false;
  await h.timers.advance(4000);
  assert.deepEqual(h.queues.snapshot().action, { buffered: 0, sent: 2, dropped: 0, rejected: 0, backoff_ms: 0 });
  assert.deepEqual(h.sent.at(-1).batch, [{ a: 1 }, { a: 2 }]);
});

test('429/503 answers back off for at least Retry-After; 408 is retried too', async () => {
  const replies = [answer(503, { retryAfter: '20' }), answer(429), answer(408), answer(200)];
  const h = harness({ reply: () => replies.shift() });
  h.queues.enqueue('network_body', { b: 1 });
  await h.timers.advance(GATHER_MS);
  assert.equal(h.queues.snapshot().network_body.backoff_ms, 20000);
  await h.timers.advance(20000);
  assert.equal(h.queues.snapshot().network_body.backoff_ms, 30000); // doubled, capped
  await h.timers.advance(30000);
  await h.timers.advance(30000);
  assert.equal(h.sent.length, 4);
  assert.deepEqual(h.queues.snapshot().network_body, { buffered: 0, sent: 1, dropped: 0, rejected: 0, backoff_ms: 0 });
});

test('a batch the daemon refuses for good is dropped, counted as rejected and logged, without back-off', async () => {
  const h = harness({ reply: () => answer(413) });
  for (let i = 0; i < 3; i += 1) h.queues.enqueue('ws', i);
  await h.timers.advance(GATHER_MS);
  assert.deepEqual(h.queues.snapshot().ws, { buffered: 0, sent: 0, dropped: 0, rejected: 3, backoff_ms: 0 });
  assert.deepEqual(h.logged, [['warn', '/websocket-events refused a batch of 3: HTTP 413', 'capture']]);
});

test("the log route's answer gives the daemon's entry count and the entries it rejected", async () => {
  const h = harness({ reply: (spec) => (spec.path === '/logs' ? answer(200, { json: { entries: 1234, rejected: 2 } }) : answer(200, { json: { entries: 9 } })) });
  h.queues.enqueue('log', { m: 'x' });
  h.queues.enqueue('action', { a: 1 });
  await h.timers.advance(GATHER_MS);
  assert.deepEqual(h.entries, [1234]);
  assert.equal(h.queues.snapshot().log.rejected, 2);
  assert.equal(h.queues.snapshot().log.sent, 1);
});

test('a full buffer drops the oldest; the drops are reported once, then only new ones', async () => {
  const specs = { log: { path: '/logs', key: 'entries', batch: 2, cap: 3 }, perf: { path: '/p', key: 's', batch: 2, cap: 2 } };
  const h = harness({ reply: () => { throw new TypeError('down'); }, specs });
  for (let i = 0; i < 5; i += 1) h.queues.enqueue('log', i);
  for (let i = 0; i < 3; i += 1) h.queues.enqueue('perf', i);
  assert.equal(h.queues.totalDropped(), 3);
  const first = h.queues.dropReport();
  assert.deepEqual(first, { dropped: 3, warning: { message: 'buffer full while the daemon was unreachable: dropped 3 oldest item(s)', data: { log: 2, perf: 1 } } });
  h.queues.dropsReported(first.dropped);
  assert.deepEqual(h.queues.dropReport(), { dropped: 3, warning: null });
  h.queues.enqueue('log', 5);
  assert.equal(h.queues.dropReport().warning.message, 'buffer full while the daemon was unreachable: dropped 1 oldest item(s)');
  await h.timers.advance(GATHER_MS);
  assert.deepEqual(h.sent.find((s) => s.path === '/logs').batch, [3, 4]); // the newest survived
});

test('retryNow: every queue drops its back-off and what waits goes out at once', async () => {
  let down = true;
  const h = harness({ reply: () => { if (down) throw new TypeError('down'); return answer(200); } });
  h.queues.enqueue('log', 'l');
  h.queues.enqueue('perf', 'p');
  await h.timers.advance(GATHER_MS);
  for (let i = 0; i < 5; i += 1) await h.timers.advance(Math.max(...h.timers.delays()));
  assert.ok(h.queues.snapshot().log.backoff_ms >= 16000);
  const before = h.sent.length;
  down = false;
  h.queues.retryNow();
  assert.deepEqual(h.timers.delays(), [0, 0]);
  await h.timers.advance(0);
  assert.equal(h.sent.length, before + 2);
  for (const q of Object.values(h.queues.snapshot())) assert.deepEqual([q.buffered, q.backoff_ms], [0, 0]);
});

test('retryNow on empty queues only clears their back-off; it sends nothing', async () => {
  const h = harness({ reply: () => { throw new TypeError('down'); } });
  h.queues.enqueue('ws', 1);
  await h.timers.advance(GATHER_MS);
  const before = h.sent.length;
  h.queues.retryNow();
  assert.equal(h.timers.delays().length, 1); // the ws queue, now due at once
  assert.deepEqual(h.timers.delays(), [0]);
  await h.timers.advance(0);
  assert.equal(h.sent.length, before + 1);
  assert.equal(h.queues.snapshot().log.backoff_ms, 0);
});
