// The service worker's entry module (extension/background.js) under a recording chrome.* whose
// calls never answer (node:test; run by tests/test_extension_units.py). An MV3 worker Chrome
// starts for an event must have registered its listener while its script ran, before any answer
// from the browser: every listener of every worker module is registered that way, and the hook
// `gasoline browser` reads the extension's key through exists.
import { test } from 'node:test';
import assert from 'node:assert/strict';

const registered = [];
const never = () => new Promise(() => {});
const event = (name) => ({ addListener: () => registered.push(name), removeListener: () => {}, hasListener: () => false });
const area = (name) => new Proxy({}, { get: (_, prop) => (prop.startsWith('on') ? event(`${name}.${prop}`) : never) });
globalThis.chrome = new Proxy({}, {
  get: (_, api) => {
    if (api === 'runtime') return Object.assign(area('runtime'), { getManifest: () => ({ version: '0.0.1-test' }), getURL: (p) => `chrome-extension://test/${p}` });
    if (api === 'storage') return { onChanged: event('storage.onChanged'), local: area('storage.local'), session: area('storage.session') };
    return area(api);
  },
});
globalThis.fetch = never;
globalThis.WebSocket = class { constructor() { throw new Error('no sockets in unit tests'); } };

await import('../../extension/background.js');

test('every listener is registered while the worker script runs, before any browser answer', () => {
  const expected = [
    'runtime.onMessage', 'runtime.onStartup', 'runtime.onInstalled', 'storage.onChanged', 'alarms.onAlarm',
    'tabs.onRemoved', 'tabs.onUpdated', 'tabs.onCreated',
    'webNavigation.onBeforeNavigate', 'webNavigation.onCommitted', 'webNavigation.onCreatedNavigationTarget', 'webNavigation.onCompleted', 'webNavigation.onErrorOccurred',
    'webRequest.onResponseStarted', 'webRequest.onCompleted', 'webRequest.onErrorOccurred', 'debugger.onEvent', 'debugger.onDetach',
  ];
  for (const name of expected) assert.ok(registered.includes(name), `${name} is not registered: ${registered.join(', ')}`);
  // The worker, lib/pages.js, lib/cdp.js and worker/devtools.js each follow the settings; one keep-alive alarm.
  assert.equal(registered.filter((n) => n === 'storage.onChanged').length, 4);
  assert.equal(registered.filter((n) => n === 'alarms.onAlarm').length, 1);
});

test("the worker exposes its public key's reader to `gasoline browser` (over the DevTools pipe)", () => {
  assert.equal(typeof globalThis.gasolineExtensionPublicKey, 'function');
});
