// The popup's "Pair" reaches the worker as a message: once the key is pinned the /sync loop is
// woken at once (the worker pairs within a poll, not after its current wait). node:test; run by
// tests/test_extension_units.py. A minimal chrome.* stands in; no request leaves this process.
import { test } from 'node:test';
import assert from 'node:assert/strict';

let listener = null;
globalThis.chrome = {
  runtime: {
    getManifest: () => ({ version: '0.0.1-test' }),
    getURL: (p) => `chrome-extension://test/${p}`,
    onMessage: { addListener: (fn) => { listener = fn; } },
  },
  action: { setBadgeText: async () => {}, setBadgeBackgroundColor: async () => {} },
  storage: { local: { get: async () => ({}), set: async () => {}, remove: async () => {} },
             session: { get: async () => ({}), set: async () => {} } },
};
globalThis.fetch = async () => { throw new TypeError('no network in unit tests'); };

const { installMessages } = await import('../../extension/worker/messages.js');
const popup = { url: 'chrome-extension://test/popup/popup.html' };

function send(msg, sender = popup) {
  return new Promise((resolve) => {
    const async = listener(msg, sender, resolve);
    if (!async) resolve(undefined);
  });
}

test('a successful pair wakes the sync loop once; a refused one does not', async () => {
  const woken = [];
  let answer = { ok: true, fingerprint: 'ab:cd' };
  installMessages({ pair: async () => answer, onPaired: () => woken.push(Date.now()) });
  assert.deepEqual(await send({ type: 'gasoline:pair', fingerprint: 'ab:cd' }), answer);
  assert.equal(woken.length, 1);
  answer = { ok: false, error: 'the daemon now offers ef:01' };
  assert.deepEqual(await send({ type: 'gasoline:pair', fingerprint: 'ab:cd' }), answer);
  assert.equal(woken.length, 1);
  // Only the extension's own pages may pair: a content script's message is ignored.
  assert.equal(await send({ type: 'gasoline:pair', fingerprint: 'ab:cd' },
    { url: 'https://evil.example/', tab: { id: 1 } }), undefined);
  assert.equal(woken.length, 1);
});
