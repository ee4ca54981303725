// Unit tests of the agent's debugger session (extension/worker/devtools.js): key specs parse into
// the presses dispatched (modifiers, chords), bad ones are refused; key presses and drags send
// the CDP input events in order (a fake chrome.debugger records them). Run by
// tests/test_extension_units.py.
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';

const sent = [];
const listeners = {};
const event = (name) => ({ addListener: (fn) => { (listeners[name] = listeners[name] || []).push(fn); } });
globalThis.chrome = {
  runtime: { getManifest: () => ({ version: '0.0.1-test' }) },
  storage: { local: { get: async () => ({}) }, onChanged: event('storage.onChanged') },
  tabs: { onRemoved: event('tabs.onRemoved') },
  webNavigation: { onCreatedNavigationTarget: event('webNavigation.onCreatedNavigationTarget') },
  debugger: {
    attach: async () => {},
    detach: async () => {},
    sendCommand: async (target, method, params) => { sent.push([method, params]); return {}; },
    onEvent: event('debugger.onEvent'),
    onDetach: event('debugger.onDetach'),
  },
};
const fire = (name, ...args) => { for (const fn of listeners[name] || []) fn(...args); };

const devtools = await import('../../extension/worker/devtools.js');
devtools.installDevtools();

test('key specs: single keys, modifier combinations with aliases, chord sequences', () => {
  assert.deepEqual(devtools.parseKeys('Enter'), [{ mods: [], key: 'Enter' }]);
  assert.deepEqual(devtools.parseKeys('Control+K'), [{ mods: ['Control'], key: 'K' }]);
  assert.deepEqual(devtools.parseKeys('ctrl+shift+p'), [{ mods: ['Control', 'Shift'], key: 'p' }]);
  assert.deepEqual(devtools.parseKeys('Cmd+A'), [{ mods: ['Meta'], key: 'A' }]);
  assert.deepEqual(devtools.parseKeys('Shift+Tab'), [{ mods: ['Shift'], key: 'Tab' }]);
  assert.deepEqual(devtools.parseKeys('Control+K Control+S'), [{ mods: ['Control'], key: 'K' }, { mods: ['Control'], key: 'S' }]);
  assert.deepEqual(devtools.parseKeys('Control++'), [{ mods: ['Control'], key: '+' }]);
  assert.deepEqual(devtools.parseKeys('f5'), [{ mods: [], key: 'F5' }]);
  assert.throws(() => devtools.parseKeys('Control+Nope'), /unknown key "Nope"/);
  assert.throws(() => devtools.parseKeys('K+Control'), /not a modifier/);
  assert.throws(() => devtools.parseKeys('  '), /empty/);
});

test('Control+K: modifier down, the key without text, key up, modifier up; ctrl bit set', async () => {
  sent.length = 0;
  const pressed = await devtools.pressKeys(7, 'Control+K');
  assert.equal(pressed, 'Control+K');
  const events = sent.filter(([m]) => m === 'Input.dispatchKeyEvent').map(([, p]) => [p.type, p.key, p.modifiers, p.text]);
  assert.deepEqual(events, [
    ['rawKeyDown', 'Control', 2, undefined],
    ['rawKeyDown', 'k', 2, undefined],
    ['keyUp', 'k', 2, undefined],
    ['keyUp', 'Control', 0, undefined],
  ]);
  sent.length = 0;
  await devtools.pressKeys(7, 'Shift+a');
  const typed = sent.map(([, p]) => [p.type, p.key, p.modifiers, p.text]);
  assert.deepEqual(typed[1], ['keyDown', 'A', 8, 'A']);
});

test('a drag without an HTML5 drag: press at the source, moves, release at the target', async () => {
  await devtools.open(9);
  sent.length = 0;
  const how = await devtools.dragBetween(9, { x: 10, y: 10 }, { x: 110, y: 60 }, 4);
  assert.deepEqual(how, { html5: false });
  const mouse = sent.filter(([m]) => m === 'Input.dispatchMouseEvent').map(([, p]) => [p.type, Math.round(p.x), Math.round(p.y)]);
  assert.deepEqual(mouse[0], ['mouseMoved', 10, 10]);
  assert.deepEqual(mouse[1], ['mousePressed', 10, 10]);
  assert.deepEqual(mouse.at(-1), ['mouseReleased', 110, 60]);
  assert.deepEqual(mouse.at(-2), ['mouseMoved', 110, 60]);
  assert.deepEqual(sent.filter(([m]) => m === 'Input.setInterceptDrags').map(([, p]) => p.enabled), [true, false]);
  await devtools.close(9);
});

test('a dialog: the running command answers with it, it is pending, and unanswered it gets the default', async () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    await devtools.open(11);
    let release;
    const blocked = new Promise((resolve) => { release = resolve; });  // the page's click, waiting on confirm()
    const answer = devtools.guard(11, () => blocked);
    fire('debugger.onEvent', { tabId: 11 }, 'Page.javascriptDialogOpening', { type: 'confirm', message: 'Sure?', url: 'http://h.test/', defaultPrompt: '' });
    const got = await answer;
    assert.equal(got.__dialog.type, 'confirm');
    assert.equal(devtools.pendingDialog(11).message, 'Sure?');
    sent.length = 0;
    mock.timers.tick(devtools.DIALOG_DEFAULT_MS - 1);
    assert.deepEqual(sent, []);
    mock.timers.tick(1);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(sent, [['Page.handleJavaScriptDialog', { accept: false }]]);  // confirm: dismissed by default
    assert.equal(devtools.pendingDialog(11), null);
    const status = await devtools.dialogCommand(11, { action: 'status' });
    assert.equal(status.last_default.answered_by, 'default');
    assert.equal(status.last_default.accepted, false);
    release({ success: true });
    // A beforeunload nobody answers is accepted (the page may be left).
    sent.length = 0;
    fire('debugger.onEvent', { tabId: 11 }, 'Page.javascriptDialogOpening', { type: 'beforeunload', message: '' });
    mock.timers.tick(devtools.DIALOG_DEFAULT_MS);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(sent, [['Page.handleJavaScriptDialog', { accept: true }]]);
  } finally {
    mock.timers.reset();
    await devtools.close(11);
  }
});

test('the agent answers a prompt with its text; with nothing open the answer is no_dialog', async () => {
  await devtools.open(12);
  fire('debugger.onEvent', { tabId: 12 }, 'Page.javascriptDialogOpening', { type: 'prompt', message: 'Name?', defaultPrompt: 'old' });
  sent.length = 0;
  const answered = await devtools.dialogCommand(12, { action: 'accept', prompt_text: 'new' });
  assert.deepEqual(sent, [['Page.handleJavaScriptDialog', { accept: true, promptText: 'new' }]]);
  assert.deepEqual([answered.dialog.type, answered.dialog.accepted, answered.dialog.prompt_text], ['prompt', true, 'new']);
  assert.equal((await devtools.dialogCommand(12, { action: 'accept' })).error, 'no_dialog');
  assert.equal((await devtools.dialogCommand(12, { action: 'maybe' })).error, 'invalid_param');
  await devtools.close(12);
});

test('a tab opened by a tracked tab is tracked while the pilot is on, not otherwise', async () => {
  // settings come from chrome.storage.local (worker/config.js): the pilot off first.
  const stored = { trackedTabId: 1, aiWebPilotEnabled: false };
  chrome.storage.local.get = async () => stored;
  chrome.storage.local.set = async (patch) => { Object.assign(stored, patch); };
  chrome.tabs.get = async (id) => ({ id, url: 'http://h.test/child', status: 'loading' });
  chrome.storage.session = { get: async () => ({}), set: async () => {} };
  const { reloadSettings } = await import('../../extension/worker/config.js');
  const { installTracking } = await import('../../extension/lib/tracking.js');
  const { loadSettings } = await import('../../extension/worker/config.js');
  chrome.tabs.onUpdated = event('tabs.onUpdated');
  chrome.webNavigation.onCommitted = event('webNavigation.onCommitted');
  installTracking(loadSettings);
  await reloadSettings();
  fire('webNavigation.onCreatedNavigationTarget', { sourceTabId: 1, tabId: 2 });
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(stored.gasolineTrackedTabs, undefined);
  stored.aiWebPilotEnabled = true;
  await reloadSettings();
  fire('webNavigation.onCreatedNavigationTarget', { sourceTabId: 3, tabId: 4 });  // an untracked opener
  fire('webNavigation.onCreatedNavigationTarget', { sourceTabId: 1, tabId: 2 });
  await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(stored.gasolineTrackedTabs, [2]);
});
