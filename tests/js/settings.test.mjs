// Unit tests of extension/lib/settings.js (node:test; run by tests/test_extension_units.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  DEFAULT_SERVER_URL, STORAGE_KEYS, isTrackedTab, normalizeServerUrl, portOf, settingsFromStorage,
} from '../../extension/lib/settings.js';

test('a server URL is a port, host:port or URL on this machine, normalised to scheme://host:port', () => {
  assert.equal(normalizeServerUrl(''), DEFAULT_SERVER_URL);
  assert.equal(normalizeServerUrl(undefined), 'http://127.0.0.1:7890');
  assert.equal(normalizeServerUrl(' 7891 '), 'http://127.0.0.1:7891');
  assert.equal(normalizeServerUrl('localhost:9000'), 'http://localhost:9000');
  assert.equal(normalizeServerUrl('https://127.0.0.1:8443/some/path?q=1'), 'https://127.0.0.1:8443');
  assert.equal(normalizeServerUrl('http://[::1]:7890'), 'http://[::1]:7890');
});

test('a server URL off this machine or a port out of range is refused', () => {
  assert.throws(() => normalizeServerUrl('0'), /between 1 and 65535/);
  assert.throws(() => normalizeServerUrl('65536'), /between 1 and 65535/);
  assert.throws(() => normalizeServerUrl('http://example.com:7890'), /on this machine/);
  assert.throws(() => normalizeServerUrl('192.168.1.2:7890'), /on this machine/);
  assert.throws(() => normalizeServerUrl('http://127.0.0.1.evil.test:7890'), /on this machine/);
});

test('portOf reads the port, the scheme default, or the daemon default for garbage', () => {
  assert.equal(portOf('http://127.0.0.1:7891'), 7891);
  assert.equal(portOf('https://localhost'), 443);
  assert.equal(portOf('http://localhost'), 80);
  assert.equal(portOf('not a url'), 7890);
});

test('settings default to nothing tracked, the pilot off and every capture on', () => {
  assert.deepEqual(settingsFromStorage({}), {
    serverUrl: DEFAULT_SERVER_URL, trackedTabId: 0, trackedTabUrl: '', trackedTabTitle: '', extraTabs: [],
    trackAllTabs: false, pilotEnabled: false, captureLogs: true, captureNetwork: true,
    captureWebSocket: true, captureActions: true, allowFileUrls: false, agentsMayTrack: false,
    daemonIdentity: null, launchedBy: null,
  });
});

test('a browser `gasoline browser` started says so (headless or not), nothing else is kept', () => {
  const launched = (v) => settingsFromStorage({ [STORAGE_KEYS.launchedBy]: v }).launchedBy;
  assert.deepEqual(launched({ by: 'gasoline browser', headless: true }), { headless: true });
  assert.deepEqual(launched({ by: 'gasoline browser', headless: 'yes' }), { headless: false });
  assert.equal(launched('x'), null);
  assert.equal(launched(undefined), null);
});

test('stored values of the wrong type fall back to the defaults', () => {
  const s = settingsFromStorage({
    [STORAGE_KEYS.serverUrl]: 'http://example.com', [STORAGE_KEYS.pilotEnabled]: 'yes',
    [STORAGE_KEYS.captureLogs]: 0, [STORAGE_KEYS.extraTabs]: [3, '4', -1, 2.5, 'x', null],
    [STORAGE_KEYS.trackedTabId]: 'nope', [STORAGE_KEYS.daemonIdentity]: { key: '' },
  });
  assert.equal(s.serverUrl, DEFAULT_SERVER_URL);
  assert.equal(s.pilotEnabled, false);
  assert.equal(s.captureLogs, true);
  assert.deepEqual(s.extraTabs, [3, 4]);
  assert.equal(s.trackedTabId, 0);
  assert.equal(s.daemonIdentity, null);
  const pinned = { key: 'BASE64KEY', fingerprint: 'ab:cd' };
  assert.deepEqual(settingsFromStorage({ [STORAGE_KEYS.daemonIdentity]: pinned }).daemonIdentity, pinned);
});

test('a tab is tracked when it is the primary, an extra one, or every tab is (unless excluded)', () => {
  const s = settingsFromStorage({ [STORAGE_KEYS.trackedTabId]: 7, [STORAGE_KEYS.extraTabs]: [9] });
  assert.equal(isTrackedTab(s, 7), true);
  assert.equal(isTrackedTab(s, 9), true);
  assert.equal(isTrackedTab(s, 8), false);
  assert.equal(isTrackedTab(s, -7), false);
  assert.equal(isTrackedTab(s, 7.5), false);
  assert.equal(isTrackedTab(s, '7'), false);
  const all = { ...s, trackAllTabs: true };
  assert.equal(isTrackedTab(all, 8), true);
  assert.equal(isTrackedTab(all, 8, false), false);
  assert.equal(isTrackedTab(all, 9, false), true);
});
