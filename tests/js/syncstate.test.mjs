// Unit tests of extension/worker/syncstate.js: the /sync loop's command bookkeeping in
// chrome.storage.session (node:test; run by tests/test_extension_units.py). A Map stands in for
// chrome.storage.session; it can be told to refuse large writes, as the real one does past 10 MB.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  SEEN_LIMIT, SYNC_RESULTS_KEY, SYNC_STATE_KEY, acceptCommands, addResult, loadSyncState, resultsDelivered,
  saveSyncState, tooLargeResults,
} from '../../extension/worker/syncstate.js';

const stored = new Map();
let quota = Infinity; // characters of JSON a single write may hold
const writes = [];
globalThis.chrome = {
  storage: {
    session: {
      get: async (keys) => Object.fromEntries(keys.filter((k) => stored.has(k)).map((k) => [k, structuredClone(stored.get(k))])),
      set: async (items) => {
        if (JSON.stringify(items).length > quota) throw new Error('Session storage quota bytes exceeded');
        for (const [k, v] of Object.entries(items)) { stored.set(k, structuredClone(v)); writes.push(k); }
      },
    },
  },
};

const fresh = () => ({ lastAck: null, seen: [], results: [] });

test('new commands are acknowledged and run once; ids already run and malformed entries are not', () => {
  const st = fresh();
  const first = acceptCommands(st, { commands: [{ id: 'q-1' }, null, { id: 7 }, { id: 'q-2' }] });
  assert.deepEqual(first.map((c) => c.id), ['q-1', 'q-2']);
  assert.equal(st.lastAck, 'q-2');
  const again = acceptCommands(st, { commands: [{ id: 'q-2' }, { id: 'q-3' }] });
  assert.deepEqual(again.map((c) => c.id), ['q-3']);
  assert.equal(st.lastAck, 'q-3');
  assert.deepEqual(acceptCommands(st, {}), []);
  assert.deepEqual(acceptCommands(st, { commands: 'junk' }), []);
});

test("another daemon process starts its ids at q-1 again: they are not taken for the last one's", () => {
  const st = fresh();
  assert.equal(acceptCommands(st, { daemon_instance: 'A', commands: [{ id: 'q-1' }] }).length, 1);
  assert.equal(acceptCommands(st, { daemon_instance: 'A', commands: [{ id: 'q-1' }] }).length, 0);
  const after = acceptCommands(st, { daemon_instance: 'B', commands: [{ id: 'q-1' }] });
  assert.deepEqual(after.map((c) => c.id), ['q-1']);
  assert.equal(st.daemonInstance, 'B');
  assert.deepEqual(st.seen, ['q-1']);
});

test('at most SEEN_LIMIT ids are remembered, the newest', () => {
  const st = fresh();
  const commands = Array.from({ length: SEEN_LIMIT + 20 }, (_, i) => ({ id: `q-${i + 1}` }));
  assert.equal(acceptCommands(st, { commands }).length, SEEN_LIMIT + 20);
  assert.equal(st.seen.length, SEEN_LIMIT);
  assert.equal(st.seen[0], 'q-21');
});

test('delivered results are forgotten; those that came after stay', () => {
  const st = fresh();
  st.results = [{ id: 'q-1' }, { id: 'q-2' }, { id: 'q-3' }];
  const sent = st.results.slice(0, 2);
  resultsDelivered(st, sent);
  assert.deepEqual(st.results, [{ id: 'q-3' }]);
  resultsDelivered(st, []);
  assert.deepEqual(st.results, [{ id: 'q-3' }]);
});

test('the state survives the worker: read back from session storage, results kept apart', async () => {
  stored.set(SYNC_STATE_KEY, { lastAck: 'q-4', seen: ['q-3', 'q-4'], results: [], daemonInstance: 'A' });
  stored.set(SYNC_RESULTS_KEY, [{ id: 'q-4', status: 'complete', result: 1 }]);
  const st = await loadSyncState();
  assert.deepEqual(st, { lastAck: 'q-4', seen: ['q-3', 'q-4'], results: [{ id: 'q-4', status: 'complete', result: 1 }], daemonInstance: 'A' });
  assert.equal(await loadSyncState(), st); // read once
  await addResult({ id: 'q-5', status: 'complete', result: 2 });
  assert.deepEqual(stored.get(SYNC_STATE_KEY).results, []);
  assert.deepEqual(stored.get(SYNC_RESULTS_KEY).map((r) => r.id), ['q-4', 'q-5']);
});

test('results too large to keep become result_too_large errors; the ids already run are written first and kept', async () => {
  const st = await loadSyncState();
  st.seen.push('q-6');
  st.lastAck = 'q-6';
  writes.length = 0;
  quota = 10000;
  await addResult({ id: 'q-6', correlation_id: 'c-1', status: 'complete', result: 'x'.repeat(20000) });
  quota = Infinity;
  assert.equal(writes[0], SYNC_STATE_KEY);
  assert.deepEqual(stored.get(SYNC_STATE_KEY).seen, ['q-3', 'q-4', 'q-6']);
  const kept = stored.get(SYNC_RESULTS_KEY);
  assert.deepEqual(kept.map((r) => [r.id, r.status, r.error]), [['q-4', 'error', 'result_too_large'], ['q-5', 'error', 'result_too_large'], ['q-6', 'error', 'result_too_large']]);
  assert.equal(kept[2].correlation_id, 'c-1');
  assert.match(kept[2].result.message, /could not be kept for delivery: Session storage quota/);
  assert.deepEqual(st.results, kept);
  await saveSyncState();
  assert.deepEqual(stored.get(SYNC_RESULTS_KEY), kept);
});

test('tooLargeResults keeps each id and correlation id and says why', () => {
  assert.deepEqual(tooLargeResults([{ id: 'q-1', result: 'big' }], 'full'), [
    { id: 'q-1', correlation_id: undefined, status: 'error', error: 'result_too_large', result: { error: 'result_too_large', message: 'the result could not be kept for delivery: full' } },
  ]);
});
