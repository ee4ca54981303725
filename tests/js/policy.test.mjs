// Unit tests of extension/lib/policy.js (node:test; run by tests/test_extension_units.py).
// `chrome.tabs.get` is the one browser API the policy calls: a fake stands in for it.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  LIMITS, Refused, boundResult, checkParams, checkUrl, initPolicy, isPrivateHost, isTracked,
  requestedTabId, requirePilot, targetTab,
} from '../../extension/lib/policy.js';
import { STORAGE_KEYS, settingsFromStorage } from '../../extension/lib/settings.js';

const TABS = {
  7: { id: 7, url: 'https://app.example.com/' },
  8: { id: 8, url: 'https://other.example.com/' },
  9: { id: 9, url: 'file:///home/user/report.html' },
};
globalThis.chrome = {
  tabs: { get: async (id) => { if (!TABS[id]) throw new Error(`No tab with id: ${id}`); return TABS[id]; } },
};

let stored = {};
const use = (raw) => { stored = raw; };

async function refusedWith(code, promise) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof Refused, `not a Refused: ${err}`);
    assert.equal(err.code, code);
    return true;
  });
}

test('the policy refuses to decide before it is given the settings', async () => {
  await assert.rejects(isTracked(7), /before initPolicy/);
  initPolicy(async () => settingsFromStorage(stored));
});

test('the tab a command names: tab_id, then params.tab_id, positive integers only', () => {
  assert.equal(requestedTabId({ tab_id: 5 }), 5);
  assert.equal(requestedTabId({ params: { tab_id: '6' } }), 6);
  assert.equal(requestedTabId({ tab_id: 5, params: { tab_id: 6 } }), 5);
  for (const cmd of [{}, null, { tab_id: -1 }, { tab_id: 1.5 }, { params: 'x' }, { tab_id: 'abc' }]) {
    assert.equal(requestedTabId(cmd), 0, JSON.stringify(cmd));
  }
});

test('a command reaches only a tracked tab, the primary one when it names none', async () => {
  use({ [STORAGE_KEYS.trackedTabId]: 7 });
  assert.equal((await targetTab({})).id, 7);
  assert.equal((await targetTab({ tab_id: 7 })).id, 7);
  await refusedWith('tab_not_tracked', targetTab({ tab_id: 8 }));
  use({});
  await refusedWith('no_tracked_tab', targetTab({}));
  use({ [STORAGE_KEYS.trackAllTabs]: true, [STORAGE_KEYS.trackedTabId]: 7 });
  assert.equal((await targetTab({ tab_id: 8 })).id, 8);
  await refusedWith('no_tab', targetTab({ tab_id: 42 }));
});

test('a file: tab is refused unless the user allowed local files', async () => {
  use({ [STORAGE_KEYS.trackedTabId]: 9 });
  await refusedWith('file_url_refused', targetTab({}));
  use({ [STORAGE_KEYS.trackedTabId]: 9, [STORAGE_KEYS.allowFileUrls]: true });
  assert.equal((await targetTab({})).id, 9);
});

test('agents may load http(s) and about:blank; file: only when allowed; nothing else', async () => {
  use({});
  assert.equal(await checkUrl('https://example.com/a', 'navigate'), 'https://example.com/a');
  assert.equal(await checkUrl('HTTP://example.com', 'navigate'), 'HTTP://example.com');
  assert.equal(await checkUrl('about:blank', 'new_tab'), 'about:blank');
  await refusedWith('file_url_refused', checkUrl('file:///etc/passwd', 'navigate'));
  for (const url of ['javascript:alert(1)', 'chrome://settings', 'data:text/html,x', '', null]) {
    await refusedWith('invalid_param', checkUrl(url, 'navigate'));
  }
  use({ [STORAGE_KEYS.allowFileUrls]: true });
  assert.equal(await checkUrl('file:///tmp/a.html', 'navigate'), 'file:///tmp/a.html');
});

test('acting needs the AI Web Pilot, and the refusal says what needed it', async () => {
  use({});
  await assert.rejects(requirePilot('interact click'), (err) => {
    assert.equal(err.code, 'pilot_disabled');
    assert.match(err.message, /^interact click needs the AI Web Pilot/);
    return true;
  });
  use({ [STORAGE_KEYS.pilotEnabled]: true });
  await requirePilot('interact click');
});

test('private hosts: loopback, link-local, RFC 1918, CGNAT, ULA, mapped, local names', () => {
  for (const url of ['http://localhost/', 'http://a.localhost', 'http://127.0.0.1:80', 'http://10.1.2.3',
    'http://172.16.0.1', 'http://172.31.255.255', 'http://192.168.0.10', 'http://169.254.169.254/latest',
    'http://100.64.0.1', 'http://0.0.0.0', 'http://[::1]/', 'http://[fd00::1]', 'http://[fe80::1]',
    'http://[::ffff:127.0.0.1]', 'http://printer.local', 'http://db.internal', 'http://router.home.arpa',
    'http://intranet', 'not a url']) {
    assert.equal(isPrivateHost(url), true, url);
  }
  for (const url of ['https://example.com', 'http://172.32.0.1', 'http://8.8.8.8', 'http://100.128.0.1',
    'http://[2001:db8::1]', 'https://localhost.example.com']) {
    assert.equal(isPrivateHost(url), false, url);
  }
});

test('parameters over the limits are refused with invalid_param', () => {
  checkParams({ params: { script: 'x'.repeat(LIMITS.script), selector: '#a' } });
  checkParams({});
  const over = [
    { script: 'x'.repeat(LIMITS.script + 1) },
    { selector: 'a'.repeat(LIMITS.selector + 1) },
    { text: 't'.repeat(LIMITS.text + 1) },
    { url: 'https://e.com/' + 'a'.repeat(8192) },
    { files: Array.from({ length: LIMITS.uploadFiles + 1 }, () => ({ data: '' })) },
    { files: [{ data: 'A'.repeat(LIMITS.upload + 1) }] },
    { n: 10n },
  ];
  for (const params of over) {
    assert.throws(() => checkParams({ params }), (err) => err instanceof Refused && err.code === 'invalid_param',
      Object.keys(params).join());
  }
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => checkParams({ params: cyclic }), /not JSON/);
});

test('a result over the limit, or not JSON, becomes an error result', () => {
  const small = { text: 'ok' };
  assert.equal(boundResult(small), small);
  assert.equal(boundResult(undefined), undefined);
  const big = boundResult({ text: 'x'.repeat(LIMITS.result) });
  assert.equal(big.error, 'result_too_large');
  assert.match(big.message, /at most 4194304/);
  assert.equal(boundResult({ n: 1n }).error, 'result_not_json');
});
