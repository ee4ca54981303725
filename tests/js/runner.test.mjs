// Unit tests of extension/worker/runner.js: commands in order per tab, tabs independent, the
// timeout and its grace period, and the result entries (node:test; run by
// tests/test_extension_units.py). What carries a command out and the timers are fakes.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Refused, LIMITS } from '../../extension/lib/policy.js';
import { chainKey, createCommandRunner, failureEntry, resultEntry } from '../../extension/worker/runner.js';
import { deferred, fakeTimers, settle } from './fake_timers.mjs';

/** A runner whose commands finish when the test says: `finish(id, value)` / `fail(id, error)`. */
function harness(options = {}) {
  const timers = fakeTimers();
  const started = [];
  const running = new Map();
  const results = [];
  const runner = createCommandRunner({
    execute: (cmd) => { started.push(cmd.id); const d = deferred(); running.set(cmd.id, d); return d.promise; },
    timers, now: () => `t${timers.now()}`, ...options,
  });
  const onResult = async (r) => { results.push(r); };
  return {
    timers, runner, started, results,
    enqueue: (cmd) => runner.enqueue(cmd, onResult),
    finish: async (id, value) => { running.get(id).resolve(value); await settle(); },
    fail: async (id, error) => { running.get(id).reject(error); await settle(); },
  };
}

test('a command waits in its tab\'s chain: tab_id, then params.tab_id, else the primary tracked tab', () => {
  assert.equal(chainKey({ tab_id: 4, params: { tab_id: 5 } }), '4');
  assert.equal(chainKey({ params: { tab_id: 5 } }), '5');
  assert.equal(chainKey({ params: 'junk' }), 'tracked');
  assert.equal(chainKey({}), 'tracked');
});

test('commands for one tab run one after another in queue order; another tab does not wait', async () => {
  const h = harness();
  h.enqueue({ id: 'q-1', type: 'dom', tab_id: 7 });
  h.enqueue({ id: 'q-2', type: 'browser_action', tab_id: 7 });
  h.enqueue({ id: 'q-3', type: 'dom', tab_id: 8 });
  await settle();
  assert.deepEqual(h.started, ['q-1', 'q-3']);
  assert.deepEqual(h.runner.inProgress().map((c) => [c.id, c.status]), [['q-1', 'running'], ['q-2', 'pending'], ['q-3', 'running']]);
  await h.finish('q-3', { ok: 3 });
  assert.deepEqual(h.started, ['q-1', 'q-3']);
  await h.finish('q-1', { ok: 1 });
  assert.deepEqual(h.started, ['q-1', 'q-3', 'q-2']);
  await h.finish('q-2', { ok: 2 });
  assert.deepEqual(h.results.map((r) => [r.id, r.status]), [['q-3', 'complete'], ['q-1', 'complete'], ['q-2', 'complete']]);
  assert.equal(h.runner.busy(), false);
  assert.deepEqual(h.timers.delays(), []); // no timeout timer outlives its command
});

test('results: the correlation id travels, errors keep their code, a refusal its code and message', async () => {
  const h = harness();
  h.enqueue({ id: 'q-1', type: 'dom', correlation_id: 'c-9' });
  await settle();
  await h.finish('q-1', { error: 'element_not_found', message: 'no #x', password: 'hunter2' });
  h.enqueue({ id: 'q-2', type: 'dom' });
  await settle();
  await h.fail('q-2', new Refused('tab_not_tracked', 'tab 9 is not tracked'));
  h.enqueue({ id: 'q-3', type: 'dom' });
  await settle();
  await h.fail('q-3', new Error('Cannot access a chrome:// URL'));
  assert.deepEqual(h.results, [
    { id: 'q-1', correlation_id: 'c-9', status: 'error', error: 'element_not_found', result: { error: 'element_not_found', message: 'no #x', password: '[REDACTED:password]' } },
    { id: 'q-2', status: 'error', error: 'tab_not_tracked', result: { error: 'tab_not_tracked', message: 'tab 9 is not tracked' } },
    { id: 'q-3', status: 'error', error: 'Cannot access a chrome:// URL' },
  ]);
});

test('a command that throws before it starts (bad params) fails alone; the next one runs', async () => {
  const timers = fakeTimers();
  const results = [];
  const runner = createCommandRunner({
    execute: (cmd) => { if (cmd.params.bad) throw new Refused('invalid_param', 'too long'); return { fine: true }; },
    timers,
  });
  runner.enqueue({ id: 'q-1', type: 'dom', params: { bad: true } }, async (r) => results.push(r));
  await runner.enqueue({ id: 'q-2', type: 'dom', params: {} }, async (r) => results.push(r));
  assert.deepEqual(results.map((r) => [r.id, r.status, r.error]), [['q-1', 'error', 'invalid_param'], ['q-2', 'complete', undefined]]);
  assert.deepEqual(timers.delays(), []);
});

test("results pass the redactor except the agent's own script value and images; a screenshot answered elsewhere has none", () => {
  assert.deepEqual(resultEntry({ type: 'execute' }, { token: 'abc' }), { status: 'complete', result: { token: 'abc' } });
  assert.deepEqual(resultEntry({ type: 'visual_diff' }, { url: 'https://e.com/?code=1' }), { status: 'complete', result: { url: 'https://e.com/?code=1' } });
  assert.deepEqual(resultEntry({ type: 'dom' }, { token: 'abc' }), { status: 'complete', result: { token: '[REDACTED:token]' } });
  assert.deepEqual(resultEntry({ type: 'tabs' }, null), { status: 'complete', result: null });
  assert.equal(resultEntry({ type: 'screenshot' }, { __answered: true }), null);
  assert.deepEqual(failureEntry('plain'), { status: 'error', error: 'plain' });
});

test('a result larger than the limit becomes a result_too_large error', async () => {
  const h = harness();
  h.enqueue({ id: 'q-1', type: 'dom' });
  await settle();
  await h.finish('q-1', { text: 'x'.repeat(LIMITS.result + 1) });
  assert.equal(h.results[0].status, 'error');
  assert.equal(h.results[0].error, 'result_too_large');
});

test('a command that outlives its timeout reports it; the next one for its tab waits for it, or for the grace period', async () => {
  const h = harness({ timeoutMs: 1000, graceMs: 500 });
  h.enqueue({ id: 'q-1', type: 'browser_action', tab_id: 3 });
  h.enqueue({ id: 'q-2', type: 'dom', tab_id: 3 });
  await settle();
  await h.timers.advance(1000);
  assert.deepEqual(h.results, [{ id: 'q-1', status: 'timeout', error: 'command browser_action did not finish within 1 s' }]);
  assert.deepEqual(h.started, ['q-1']); // still running: q-2 waits
  await h.timers.advance(499);
  assert.deepEqual(h.started, ['q-1']);
  await h.timers.advance(1);
  assert.deepEqual(h.started, ['q-1', 'q-2']);
  // q-1 finishing late changes nothing: its result was the timeout.
  await h.finish('q-1', { late: true });
  assert.equal(h.results.length, 1);
  await h.finish('q-2', { ok: 2 });

  // A timed-out command that stops within the grace period lets the next one start at once.
  h.enqueue({ id: 'q-3', type: 'dom', tab_id: 4 });
  h.enqueue({ id: 'q-4', type: 'dom', tab_id: 4 });
  await settle();
  await h.timers.advance(1000);
  await h.fail('q-3', new Error('gave up'));
  assert.ok(h.started.includes('q-4'));
  assert.deepEqual(h.results.map((r) => [r.id, r.status]), [['q-1', 'timeout'], ['q-2', 'complete'], ['q-3', 'timeout']]);
});
