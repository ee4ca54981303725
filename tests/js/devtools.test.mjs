// Unit tests of the agent's debugger session (extension/worker/devtools.js): key specs parse into
// the presses dispatched (modifiers, chords), bad ones are refused; key presses and drags send
// the CDP input events in order (a fake chrome.debugger records them). Run by
// tests/test_extension_units.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';

const sent = [];
globalThis.chrome = {
  runtime: { getManifest: () => ({ version: '0.0.1-test' }) },
  storage: { local: { get: async () => ({}) } },
  debugger: {
    attach: async () => {},
    detach: async () => {},
    sendCommand: async (target, method, params) => { sent.push([method, params]); return {}; },
  },
};

const devtools = await import('../../extension/worker/devtools.js');

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
