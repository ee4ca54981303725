// Unit tests of the service worker's small decisions (extension/worker/*.js): the badge and the
// connection status, when settings mean another daemon or other tabs, which captured items are
// sent, the /sync loop's waits, and which commands need the pilot (node:test; run by
// tests/test_extension_units.py). The modules read the manifest's version when loaded: a minimal
// chrome.* stands in, and no request leaves this process (fetch refuses).
import { test } from 'node:test';
import assert from 'node:assert/strict';

const badges = [];
globalThis.chrome = {
  runtime: { getManifest: () => ({ version: '0.0.1-test' }) },
  action: {
    setBadgeText: async ({ text }) => { badges.push(['text', text]); },
    setBadgeBackgroundColor: async ({ color }) => { badges.push(['color', color]); },
  },
};
globalThis.fetch = async () => { throw new TypeError('no network in unit tests'); };

const { settingsFromStorage, STORAGE_KEYS } = await import('../../extension/lib/settings.js');
const status = await import('../../extension/worker/status.js');
const { daemonChanged, trackingChanged, tracksAnything, reportedSettingsChanged } = await import('../../extension/worker/config.js');
const { tagItem } = await import('../../extension/worker/capture.js');
const { nextPollMs, failureDelayMs, pollDelayMs, statusSnapshot, IDLE_POLL_MS, wakeSync, sleepOrWake } = await import('../../extension/worker/sync.js');
const { needsPilot } = await import('../../extension/worker/commands.js');

const settings = (raw = {}) => settingsFromStorage(raw);

test('the badge: nothing before the first answer, "!" in red after two failures, the entry count once connected', () => {
  assert.deepEqual(status.badgeOf({ connected: false, consecutiveFailures: 0 }), { text: '', color: '#c0392b' });
  assert.deepEqual(status.badgeOf({ connected: false, consecutiveFailures: 2 }), { text: '!', color: '#c0392b' });
  assert.deepEqual(status.badgeOf({ connected: true, entries: null }), { text: '', color: '#888888' });
  assert.deepEqual(status.badgeOf({ connected: true, entries: 999 }), { text: '999', color: '#f28c28' });
  assert.deepEqual(status.badgeOf({ connected: true, entries: 12345 }), { text: '12k', color: '#f28c28' });
});

test('the connection: down until a poll answers; one failure is forgiven, two are not, a pairing refusal never', () => {
  const st = status.connection();
  assert.equal(st.connected, false);
  assert.equal(status.wasDown(), true);
  status.syncSucceeded({ server_version: '0.7.99', capture_overrides: { logs: false } }, 1000);
  assert.deepEqual([st.connected, st.consecutiveFailures, st.lastSyncAt, st.serverVersion, st.captureOverrides], [true, 0, 1000, '0.7.99', { logs: false }]);
  assert.equal(status.wasDown(), false);
  status.syncFailed(new Error('timeout'));
  assert.deepEqual([st.connected, st.consecutiveFailures, st.lastError], [true, 1, 'timeout']);
  assert.equal(status.wasDown(), true);
  status.syncFailed('again');
  assert.deepEqual([st.connected, st.consecutiveFailures, st.lastError], [false, 2, 'again']);
  status.syncSucceeded({ capture_overrides: 'junk' }, 2000);
  assert.deepEqual([st.connected, st.lastError, st.serverVersion, st.captureOverrides], [true, '', '', {}]);
  status.syncFailed(new Error('not the paired daemon'), true);
  assert.equal(st.connected, false);
  status.syncSucceeded({}, 3000);
  status.disconnected();
  assert.equal(status.wasDown(), true);
});

test('entry counts reach the badge; /health gives them too', () => {
  status.syncSucceeded({}, 4000);
  badges.length = 0;
  status.noteEntries(1500);
  assert.deepEqual(badges, [['text', '1k'], ['color', '#f28c28']]);
  status.noteHealth({ logs: { entries: 42 } });
  assert.equal(status.connection().entries, 42);
  assert.deepEqual(status.connection().health, { logs: { entries: 42 } });
  status.noteHealth({ status: 'ok' });
  assert.equal(status.connection().entries, 42);
});

test('another daemon is another URL or another pinned identity; other tabs are other tracked ids', () => {
  const a = settings({ [STORAGE_KEYS.serverUrl]: '7890' });
  assert.equal(daemonChanged(null, a), true);
  assert.equal(daemonChanged(a, settings({ [STORAGE_KEYS.serverUrl]: '7890', [STORAGE_KEYS.pilotEnabled]: true })), false);
  assert.equal(daemonChanged(a, settings({ [STORAGE_KEYS.serverUrl]: '7891' })), true);
  const pinned = settings({ [STORAGE_KEYS.daemonIdentity]: { key: 'k1', fingerprint: 'f1' } });
  assert.equal(daemonChanged(a, pinned), true);
  assert.equal(daemonChanged(pinned, settings({ [STORAGE_KEYS.daemonIdentity]: { key: 'k1', fingerprint: 'f1' } })), false);
  assert.equal(daemonChanged(pinned, settings({ [STORAGE_KEYS.daemonIdentity]: { key: 'k2', fingerprint: 'f2' } })), true);

  const t = settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.extraTabs]: [4] });
  assert.equal(trackingChanged(null, t), true);
  assert.equal(trackingChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.extraTabs]: [4], [STORAGE_KEYS.captureLogs]: false })), false);
  assert.equal(trackingChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.extraTabs]: [4, 5] })), true);
  assert.equal(trackingChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 5, [STORAGE_KEYS.extraTabs]: [4] })), true);
  assert.equal(trackingChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.extraTabs]: [4], [STORAGE_KEYS.trackAllTabs]: true })), true);
  assert.equal(tracksAnything(settings()), false);
  assert.equal(tracksAnything(t), true);
  assert.equal(tracksAnything(settings({ [STORAGE_KEYS.trackAllTabs]: true })), true);
});

test('what a /sync reports beside the tracked tabs: a change of it is pushed to the daemon at once', () => {
  const t = settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.trackedTabUrl]: 'http://a.test/1', [STORAGE_KEYS.pilotEnabled]: true });
  assert.equal(reportedSettingsChanged(null, t), true);
  assert.equal(reportedSettingsChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.trackedTabUrl]: 'http://a.test/1', [STORAGE_KEYS.pilotEnabled]: true })), false);
  assert.equal(reportedSettingsChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.trackedTabUrl]: 'http://a.test/2', [STORAGE_KEYS.pilotEnabled]: true })), true);
  assert.equal(reportedSettingsChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.trackedTabUrl]: 'http://a.test/1' })), true);
  assert.equal(reportedSettingsChanged(t, settings({ [STORAGE_KEYS.trackedTabId]: 3, [STORAGE_KEYS.trackedTabUrl]: 'http://a.test/1', [STORAGE_KEYS.pilotEnabled]: true, [STORAGE_KEYS.captureNetwork]: false })), true);
});

test('captured items carry their tab; each capture switch stops its kind; unknown kinds are not sent', () => {
  const on = settings();
  assert.deepEqual(tagItem(on, 'log', { type: 'console', level: 'log' }, 5), { type: 'console', level: 'log', tabId: 5 });
  assert.deepEqual(tagItem(on, 'action', { type: 'click' }, 5), { type: 'click', tab_id: 5 });
  assert.equal(tagItem(on, 'mystery', {}, 5), null);
  const off = settings({ [STORAGE_KEYS.captureLogs]: false, [STORAGE_KEYS.captureNetwork]: false, [STORAGE_KEYS.captureWebSocket]: false, [STORAGE_KEYS.captureActions]: false });
  assert.equal(tagItem(off, 'log', { type: 'console' }, 5), null);
  assert.deepEqual(tagItem(off, 'log', { type: 'exception' }, 5), { type: 'exception', tabId: 5 }); // errors are not console output
  assert.equal(tagItem(off, 'network_body', {}, 5), null);
  assert.equal(tagItem(off, 'ws', {}, 5), null);
  assert.equal(tagItem(off, 'action', {}, 5), null);
  assert.deepEqual(tagItem(off, 'perf', { lcp: 1 }, 5), { lcp: 1, tab_id: 5 });
});

test('the /sync waits: what the daemon asks (at most 30 s), back-off after failures, idle and results', () => {
  assert.equal(nextPollMs({ next_poll_ms: 0 }), 0);
  assert.equal(nextPollMs({ next_poll_ms: 250 }), 250);
  assert.equal(nextPollMs({ next_poll_ms: 99999 }), 30000);
  for (const junk of [{}, { next_poll_ms: -1 }, { next_poll_ms: 'soon' }]) assert.equal(nextPollMs(junk), 1000);
  assert.deepEqual([1, 2, 3, 4, 5, 9].map((n) => failureDelayMs(n)), [1000, 2000, 4000, 5000, 5000, 5000]);
  assert.equal(failureDelayMs(4, 'unpaired'), 2000);
  assert.equal(failureDelayMs(4, 'mismatch'), 5000);
  assert.equal(pollDelayMs(100, { idle: true, connected: true, resultsWaiting: false }), IDLE_POLL_MS);
  assert.equal(pollDelayMs(100, { idle: true, connected: false, resultsWaiting: false }), 100);
  assert.equal(pollDelayMs(1000, { idle: false, connected: true, resultsWaiting: true }), 50);
  assert.equal(pollDelayMs(1000, { idle: false, connected: false, resultsWaiting: true }), 1000);
  assert.equal(pollDelayMs(5000, { idle: false, connected: true, resultsWaiting: false }), 5000);
});

test('acting and reads beyond the capture stream need the pilot; DOM reads do not', () => {
  for (const type of ['execute', 'browser_action', 'draw_mode', 'tabs', 'state_capture', 'link_health']) assert.equal(needsPilot(type, {}), true, type);
  assert.equal(needsPilot('dom_action', { action: 'click' }), true);
  assert.equal(needsPilot('dom_action', {}), true);
  for (const action of ['get_text', 'get_value', 'get_attribute', 'list_interactive', 'wait_for']) assert.equal(needsPilot('dom_action', { action }), false, action);
  for (const type of ['dom', 'a11y', 'page_info', 'screenshot', 'visual_diff', 'annotations', 'waterfall']) assert.equal(needsPilot(type, {}), false, type);
  assert.equal(needsPilot('dom_action', null), true);
});

test("the popup's status: connection, pairing, this run, and each capture queue's counts", () => {
  const snap = statusSnapshot();
  assert.deepEqual(Object.keys(snap), [
    'connected', 'last_sync_at', 'last_error', 'entries', 'server_url', 'server_version', 'ai_controlled', 'pairing',
    'ext_session_id', 'version', 'results_pushed', 'queues', 'capturing_tabs', 'capture_starts', 'pulled', 'dropped',
    'failed_loads',
  ]);
  assert.equal(snap.version, '0.0.1-test');
  assert.equal(snap.results_pushed, 0);
  assert.match(snap.ext_session_id, /^ext_\d+_[a-z0-9]+$/);
  assert.deepEqual(Object.keys(snap.pairing), ['state', 'message', 'fingerprint', 'offered_fingerprint', 'extension_fingerprint']);
  assert.deepEqual(Object.keys(snap.queues).sort(), ['action', 'log', 'network_body', 'perf', 'ws']);
  assert.deepEqual(snap.queues.log, { buffered: 0, sent: 0, dropped: 0, rejected: 0, backoff_ms: 0 });
  assert.deepEqual([snap.capturing_tabs, snap.pulled, snap.dropped], [[], { untracked: 0 }, 0]);
  // The failed-load listener is not installed here (no chrome.webRequest): only the tab filter's count.
  assert.deepEqual(snap.failed_loads, { untracked: 0 });
});

test('a wake cuts the sync loop\'s sleep short, and one that comes mid-poll skips the next sleep', async () => {
  const started = Date.now();
  const sleeping = sleepOrWake(5000);
  wakeSync();
  await sleeping;
  assert.ok(Date.now() - started < 1000, 'a sleeping loop wakes at once');
  // The popup's Pair while a poll is under way (no sleep to cut): the next sleep is skipped, so
  // the worker does not wait out a full delay (up to 5 s) before it pairs.
  wakeSync();
  const again = Date.now();
  await sleepOrWake(5000);
  assert.ok(Date.now() - again < 1000, 'a wake mid-poll is kept for the next sleep');
  const plain = Date.now();
  await sleepOrWake(50);
  assert.ok(Date.now() - plain >= 40, 'without a wake the loop sleeps as asked');
});
