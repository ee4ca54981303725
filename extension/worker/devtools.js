// Gasoline — the agent's debugger session on a tracked tab: real input (hover, drag, key presses
// with modifiers), JavaScript dialogs, and emulation, through chrome.debugger (the Chrome DevTools
// Protocol). docs/extension.md, "The agent's debugger session".
//
// * Consent: a session exists only for a tab the user tracks while the AI Web Pilot is on (the
//   commands that open one are pilot commands, targeted through lib/policy.js targetTab; reads use
//   an open session but do not open one). It is opened by an agent's action and closed after
//   IDLE_MS without a command (not while an emulation or
//   a dialog is pending), when the pilot goes off, or when the tab stops being tracked.
// * Dialogs never wedge a tab: while a session is open, alert/confirm/prompt/beforeunload are seen
//   as they open (Page.javascriptDialogOpening). The command that opened one answers at once with
//   the dialog (`dialog`; a navigation, too, when the next page opens one while loading), later
//   commands for the tab answer `dialog_pending` (a navigation, reload, history step or tab close
//   first dismisses it; a beforeunload it raises is accepted), `interact dialog` answers it
//   (Page.handleJavaScriptDialog), and one nobody answered within DIALOG_DEFAULT_MS gets the
//   default: dismissed (alert: closed; confirm: false; prompt: null), beforeunload accepted.
// * Tabs a tracked tab opens (window.open, target=_blank) inherit its tracking while the pilot is
//   on (chrome.webNavigation.onCreatedNavigationTarget).
// * One attachment per tab, shared with the CDP relay (lib/debuggee.js).

import { isTrackedTab } from '../lib/settings.js';
import { attachTab, detachTab, forgetTab, heldByOthers } from '../lib/debuggee.js';
import { addTrackedTab } from '../lib/tracking.js';
import { loadSettings } from './config.js';

export const IDLE_MS = 120000;
export const DIALOG_DEFAULT_MS = 30000;
const OWNER = 'agent';

// tabId -> {dialog, dialogTimer, waiters:Set, idleTimer, emulation:{}|null, navigating, drag}
const sessions = new Map();

const send = (tabId, method, params) => chrome.debugger.sendCommand({ tabId }, method, params || {});

function dialogView(d) {
  return d && { type: d.type, message: String(d.message || '').slice(0, 2000), default_prompt: d.defaultPrompt || '', url: d.url || '', opened_at: d.opened_at };
}

function armIdle(tabId, s) {
  clearTimeout(s.idleTimer);
  s.idleTimer = setTimeout(() => {
    if (s.dialog || s.emulation) { armIdle(tabId, s); return; }
    close(tabId);
  }, IDLE_MS);
}

/** Opens (or keeps alive) the agent's session on `tabId`; resolves once dialogs are watched. */
export async function open(tabId) {
  let s = sessions.get(tabId);
  if (!s) {
    s = { dialog: null, dialogTimer: null, waiters: new Set(), events: new Set(), idleTimer: null, emulation: null, navigating: false, dragData: null, dragWaiter: null, ready: null };
    sessions.set(tabId, s);
    s.ready = (async () => {
      await attachTab(tabId, OWNER);
      // Page.enable reports a dialog that is already open, too.
      await send(tabId, 'Page.enable');
    })();
    s.ready.catch(() => { if (sessions.get(tabId) === s) sessions.delete(tabId); });
  }
  await s.ready;
  // A relay client that shares the attachment may have disabled the Page domain (lib/cdp.js counts
  // only its own clients): enable it again before relying on its dialog events.
  if (heldByOthers(tabId, OWNER)) await send(tabId, 'Page.enable').catch(() => {});
  armIdle(tabId, s);
  return s;
}

/** Ends the session on `tabId` (its emulation ends with it). */
export async function close(tabId) {
  const s = sessions.get(tabId);
  if (!s) return;
  sessions.delete(tabId);
  clearTimeout(s.idleTimer);
  clearTimeout(s.dialogTimer);
  await detachTab(tabId, OWNER);
}

/** Whether the agent's session on `tabId` is open. */
export function hasSession(tabId) {
  return sessions.has(tabId);
}

/** The dialog open in `tabId` (as agents see it), or null. */
export function pendingDialog(tabId) {
  const s = sessions.get(tabId);
  return s && s.dialog ? dialogView(s.dialog) : null;
}

/** Answers the dialog open in `tabId`; returns what was answered. */
export async function answerDialog(tabId, accept, promptText, how = 'agent') {
  const s = sessions.get(tabId);
  if (!s || !s.dialog) return null;
  const d = s.dialog;
  const params = { accept: !!accept };
  if (accept && d.type === 'prompt' && typeof promptText === 'string') params.promptText = promptText;
  await send(tabId, 'Page.handleJavaScriptDialog', params);
  if (s.dialog === d) { s.dialog = null; clearTimeout(s.dialogTimer); }
  return Object.assign(dialogView(d), { accepted: !!accept, answered_by: how }, params.promptText !== undefined ? { prompt_text: params.promptText } : {});
}

/** Gives the dialog open in `tabId` its default answer (no agent answered it in time). */
function defaultAnswer(tabId, s) {
  const d = s.dialog;
  if (!d) return;
  answerDialog(tabId, d.type === 'beforeunload', undefined, 'default').then((answered) => {
    if (answered) s.lastDefault = answered;
  }).catch(() => {});
}

/** Registers the session's listeners (background.js, at the worker's top level). */
export function installDevtools() {
  chrome.debugger.onEvent.addListener((source, method, params) => {
    const tabId = source.tabId;
    const s = Number.isInteger(tabId) && !source.sessionId ? sessions.get(tabId) : null;
    if (!s) return;
    if (method === 'Page.javascriptDialogOpening') {
      s.dialog = Object.assign({}, params, { opened_at: new Date().toISOString() });
      clearTimeout(s.dialogTimer);
      if (s.navigating && params.type === 'beforeunload') {
        // The agent asked to leave the page: the page's "leave this page?" is accepted. (A dialog
        // the next page opens is reported like any other.)
        answerDialog(tabId, true, undefined, 'navigation').catch(() => {});
        return;
      }
      s.dialogTimer = setTimeout(() => defaultAnswer(tabId, s), DIALOG_DEFAULT_MS);
      for (const w of s.waiters) w(dialogView(s.dialog));
    } else if (method === 'Page.javascriptDialogClosed') {
      s.dialog = null;
      clearTimeout(s.dialogTimer);
    }
    for (const e of [...s.events]) if (e.method === method) e.resolve(params || {});
    if (method === 'Input.dragIntercepted') {
      s.dragData = params.data;
      if (s.dragWaiter) s.dragWaiter(params.data);
    }
  });

  chrome.debugger.onDetach.addListener((source) => {
    if (Number.isInteger(source.tabId)) forgetTab(source.tabId);
    const s = sessions.get(source.tabId);
    if (!s) return;
    sessions.delete(source.tabId);
    clearTimeout(s.idleTimer);
    clearTimeout(s.dialogTimer);
  });

  chrome.tabs.onRemoved.addListener((tabId) => { if (sessions.has(tabId)) close(tabId); });

  // The pilot off, or the tab no longer tracked: the session ends.
  chrome.storage.onChanged.addListener((changes, area) => {
    if (area !== 'local' || !sessions.size) return;
    setTimeout(() => loadSettings().then((st) => {
      for (const tabId of [...sessions.keys()]) {
        if (!st.pilotEnabled || !isTrackedTab(st, tabId)) close(tabId);
      }
    }), 0);
  });

  // A tab opened by a tracked tab (window.open, a target=_blank link) is tracked too while the pilot
  // is on: the agent that acted in the opener can act in what it opened.
  chrome.webNavigation.onCreatedNavigationTarget.addListener((d) => {
    loadSettings().then((st) => {
      if (st.pilotEnabled && isTrackedTab(st, d.sourceTabId)) return addTrackedTab(d.tabId);
      return undefined;
    }).catch(() => {});
  });
}

/**
 * Runs `work()` for `tabId` while watching for a dialog: if one opens before the work ends (the
 * page's script is then blocked on it), resolves at once with {__dialog: <dialog>}.
 */
export function guard(tabId, work) {
  const s = sessions.get(tabId);
  const running = Promise.resolve().then(work);
  if (!s) return running;
  return new Promise((resolve, reject) => {
    const waiter = (dialog) => resolve({ __dialog: dialog });
    s.waiters.add(waiter);
    running.then(resolve, reject).finally(() => s.waiters.delete(waiter));
  });
}

/** Marks `tabId` as being navigated away by the agent for the duration of `work()`. */
export async function navigating(tabId, work) {
  const s = sessions.get(tabId);
  if (!s) return work();
  let passed = null;
  if (s.dialog) passed = await answerDialog(tabId, s.dialog.type === 'beforeunload', undefined, 'navigation').catch(() => null);
  s.navigating = true;
  try {
    const result = await work();
    return passed && result && typeof result === 'object' ? Object.assign({ dialog_dismissed: passed }, result) : result;
  } finally {
    s.navigating = false;
  }
}

// ------------------------------------------------------------------ dialogs

/** The `dialog` command: status (default), accept or dismiss, with prompt text. */
export async function dialogCommand(tabId, params) {
  await open(tabId);
  const s = sessions.get(tabId);
  const action = params.action || 'status';
  if (action === 'status') {
    return { pending: pendingDialog(tabId), last_default: (s && s.lastDefault) || null, default_after_ms: DIALOG_DEFAULT_MS };
  }
  if (action !== 'accept' && action !== 'dismiss') return { error: 'invalid_param', message: 'dialog action must be status, accept or dismiss' };
  if (!pendingDialog(tabId)) {
    return { error: 'no_dialog', message: 'no dialog is open in this tab', last_default: (s && s.lastDefault) || null };
  }
  const answered = await answerDialog(tabId, action === 'accept', typeof params.prompt_text === 'string' ? params.prompt_text : undefined);
  return { success: true, action, dialog: answered };
}

// ------------------------------------------------------------------ keys

const MODIFIERS = {
  Alt: { bit: 1, code: 'AltLeft', vk: 18 },
  Control: { bit: 2, code: 'ControlLeft', vk: 17 },
  Meta: { bit: 4, code: 'MetaLeft', vk: 91 },
  Shift: { bit: 8, code: 'ShiftLeft', vk: 16 },
};
const ALIASES = {
  ctrl: 'Control', control: 'Control', cmd: 'Meta', command: 'Meta', meta: 'Meta', super: 'Meta', win: 'Meta',
  alt: 'Alt', option: 'Alt', opt: 'Alt', shift: 'Shift', esc: 'Escape', escape: 'Escape', return: 'Enter', enter: 'Enter',
  space: ' ', spacebar: ' ', del: 'Delete', delete: 'Delete', backspace: 'Backspace', tab: 'Tab', up: 'ArrowUp', down: 'ArrowDown',
  left: 'ArrowLeft', right: 'ArrowRight', arrowup: 'ArrowUp', arrowdown: 'ArrowDown', arrowleft: 'ArrowLeft', arrowright: 'ArrowRight',
  home: 'Home', end: 'End', pageup: 'PageUp', pagedown: 'PageDown', insert: 'Insert', ins: 'Insert', plus: '+',
};
const NAMED = {
  Enter: { code: 'Enter', vk: 13, text: '\r' }, Tab: { code: 'Tab', vk: 9 }, Escape: { code: 'Escape', vk: 27 },
  Backspace: { code: 'Backspace', vk: 8 }, Delete: { code: 'Delete', vk: 46 }, Insert: { code: 'Insert', vk: 45 },
  ArrowUp: { code: 'ArrowUp', vk: 38 }, ArrowDown: { code: 'ArrowDown', vk: 40 }, ArrowLeft: { code: 'ArrowLeft', vk: 37 },
  ArrowRight: { code: 'ArrowRight', vk: 39 }, Home: { code: 'Home', vk: 36 }, End: { code: 'End', vk: 35 },
  PageUp: { code: 'PageUp', vk: 33 }, PageDown: { code: 'PageDown', vk: 34 }, ' ': { code: 'Space', vk: 32, text: ' ' },
};
for (let i = 1; i <= 12; i++) NAMED['F' + i] = { code: 'F' + i, vk: 111 + i };
const PUNCT = { '-': ['Minus', 189], '=': ['Equal', 187], '[': ['BracketLeft', 219], ']': ['BracketRight', 221], '\\': ['Backslash', 220],
  ';': ['Semicolon', 186], "'": ['Quote', 222], ',': ['Comma', 188], '.': ['Period', 190], '/': ['Slash', 191], '`': ['Backquote', 192] };

function canonical(name) {
  if (name.length === 1) return name;
  const alias = ALIASES[name.toLowerCase()];
  if (alias) return alias;
  const fkey = /^f(\d{1,2})$/i.exec(name);
  if (fkey && NAMED['F' + Number(fkey[1])]) return 'F' + Number(fkey[1]);
  return null;
}

/**
 * Parses "Control+K", "Shift+Tab", "Meta+A", "Control+Shift+P", "Enter", or a chord sequence
 * separated by spaces ("Control+K Control+S"). Returns [{mods:[names], key}] or throws.
 */
export function parseKeys(spec) {
  const text = String(spec || '');
  if (!text.trim()) throw new Error('key is empty');
  const presses = text === ' ' ? [' '] : text.trim().split(/\s+/);
  return presses.map((press) => {
    const parts = press.length > 1 ? press.split(/\+(?!$)/) : [press];
    const names = parts.map((p) => canonical(p));
    const bad = parts.find((p, i) => names[i] === null);
    if (bad !== undefined) throw new Error(`unknown key ${JSON.stringify(bad)} (use names like Control, Shift, Alt, Meta, Enter, Tab, Escape, ArrowDown, F5, or one character)`);
    const key = names[names.length - 1];
    const mods = names.slice(0, -1);
    for (const m of mods) if (!MODIFIERS[m]) throw new Error(`${JSON.stringify(m)} is not a modifier (Control, Shift, Alt, Meta)`);
    return { mods, key };
  });
}

function keyInfo(key, shift) {
  if (MODIFIERS[key]) return { key, code: MODIFIERS[key].code, vk: MODIFIERS[key].vk };
  if (NAMED[key]) return Object.assign({ key }, NAMED[key]);
  if (/^[a-z]$/i.test(key)) {
    const upper = key.toUpperCase();
    const k = shift ? upper : key.toLowerCase();
    return { key: k, code: 'Key' + upper, vk: upper.charCodeAt(0), text: k };
  }
  if (/^[0-9]$/.test(key)) return { key, code: 'Digit' + key, vk: key.charCodeAt(0), text: key };
  if (PUNCT[key]) return { key, code: PUNCT[key][0], vk: PUNCT[key][1], text: key };
  return { key, code: '', vk: 0, text: key };
}

/** Presses `spec` in `tabId` with real key events (page handlers see ctrlKey, shiftKey, ...). */
export async function pressKeys(tabId, spec) {
  const presses = parseKeys(spec);
  for (const { mods, key } of presses) {
    let bits = 0;
    for (const m of mods) {
      bits |= MODIFIERS[m].bit;
      await send(tabId, 'Input.dispatchKeyEvent', { type: 'rawKeyDown', modifiers: bits, key: m, code: MODIFIERS[m].code, windowsVirtualKeyCode: MODIFIERS[m].vk, location: 1 });
    }
    const info = keyInfo(key, (bits & 8) !== 0);
    // Text only without Control/Alt/Meta (a shortcut types nothing).
    const text = (bits & 7) === 0 ? info.text : undefined;
    const base = { modifiers: bits, key: info.key, code: info.code, windowsVirtualKeyCode: info.vk, nativeVirtualKeyCode: info.vk };
    await send(tabId, 'Input.dispatchKeyEvent', Object.assign({ type: text ? 'keyDown' : 'rawKeyDown' }, base, text ? { text, unmodifiedText: text } : {}));
    await send(tabId, 'Input.dispatchKeyEvent', Object.assign({ type: 'keyUp' }, base));
    for (const m of [...mods].reverse()) {
      bits &= ~MODIFIERS[m].bit;
      await send(tabId, 'Input.dispatchKeyEvent', { type: 'keyUp', modifiers: bits, key: m, code: MODIFIERS[m].code, windowsVirtualKeyCode: MODIFIERS[m].vk, location: 1 });
    }
  }
  return presses.map(({ mods, key }) => [...mods, key === ' ' ? 'Space' : key].join('+')).join(' ');
}

// ------------------------------------------------------------------ pointer

const mouse = (tabId, type, x, y, extra) => send(tabId, 'Input.dispatchMouseEvent', Object.assign({ type, x, y, button: 'none', pointerType: 'mouse' }, extra || {}));

/** Moves the pointer over (x, y): the page sees pointerover/mouseover/mousemove and CSS :hover. */
export async function hoverAt(tabId, x, y) {
  await mouse(tabId, 'mouseMoved', x, y);
}

/**
 * Drags from `from` to `to` with a real pointer: press, moves, release. An HTML5 drag the page
 * starts (a draggable source) is intercepted (Input.setInterceptDrags) and carried to the target
 * with real drag events (Input.dispatchDragEvent: dragenter, dragover, drop). Returns how it went:
 * {html5: true} when the browser started an HTML5 drag.
 */
export async function dragBetween(tabId, from, to, steps = 8) {
  const s = sessions.get(tabId);
  s.dragData = null;
  await send(tabId, 'Input.setInterceptDrags', { enabled: true });
  try {
    const intercepted = new Promise((resolve) => { s.dragWaiter = resolve; });
    await mouse(tabId, 'mouseMoved', from.x, from.y);
    await mouse(tabId, 'mousePressed', from.x, from.y, { button: 'left', buttons: 1, clickCount: 1 });
    for (let i = 1; i <= steps; i++) {
      const x = from.x + ((to.x - from.x) * i) / steps;
      const y = from.y + ((to.y - from.y) * i) / steps;
      await mouse(tabId, 'mouseMoved', x, y, { button: 'left', buttons: 1 });
      if (s.dragData) break;
    }
    if (!s.dragData) await Promise.race([intercepted, new Promise((r) => setTimeout(r, 100))]);
    const data = s.dragData;
    if (data) {
      for (const type of ['dragEnter', 'dragOver', 'drop']) {
        await send(tabId, 'Input.dispatchDragEvent', { type, x: to.x, y: to.y, data, modifiers: 0 });
      }
    }
    await mouse(tabId, 'mouseReleased', to.x, to.y, { button: 'left', buttons: 0, clickCount: 1 });
    return { html5: !!data };
  } finally {
    s.dragWaiter = null;
    s.dragData = null;
    await send(tabId, 'Input.setInterceptDrags', { enabled: false }).catch(() => {});
  }
}

// ------------------------------------------------------------------ emulation

/** Named devices for `emulate {device}`: viewport, scale, mobile, touch and user agent. */
export const DEVICES = {
  'iphone-13': { width: 390, height: 844, device_scale_factor: 3, mobile: true, user_agent: 'Mozilla/5.0 (iPhone; CPU iPhone OS 15_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/15.0 Mobile/15E148 Safari/604.1' },
  'pixel-7': { width: 412, height: 915, device_scale_factor: 2.625, mobile: true, user_agent: 'Mozilla/5.0 (Linux; Android 13; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36' },
  'ipad-air': { width: 820, height: 1180, device_scale_factor: 2, mobile: true, user_agent: 'Mozilla/5.0 (iPad; CPU OS 15_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/15.0 Mobile/15E148 Safari/604.1' },
  'laptop': { width: 1366, height: 768, device_scale_factor: 1, mobile: false },
  'desktop-1080p': { width: 1920, height: 1080, device_scale_factor: 1, mobile: false },
};

/** Network profiles for `emulate {network}` (latency ms, throughput kbit/s). */
export const NETWORKS = {
  offline: { offline: true, latency: 0, download_kbps: 0, upload_kbps: 0 },
  'slow-3g': { offline: false, latency: 400, download_kbps: 400, upload_kbps: 400 },
  'fast-3g': { offline: false, latency: 150, download_kbps: 1600, upload_kbps: 750 },
  '4g': { offline: false, latency: 60, download_kbps: 9000, upload_kbps: 9000 },
  none: null,
};

async function resetEmulation(tabId) {
  await send(tabId, 'Emulation.clearDeviceMetricsOverride');
  await send(tabId, 'Emulation.setTouchEmulationEnabled', { enabled: false });
  await send(tabId, 'Emulation.setUserAgentOverride', { userAgent: '' }).catch(() => {});
  await send(tabId, 'Emulation.setCPUThrottlingRate', { rate: 1 });
  await send(tabId, 'Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 }).catch(() => {});
  await send(tabId, 'Emulation.setEmulatedMedia', { features: [] });
  await send(tabId, 'Emulation.clearGeolocationOverride');
}

/** The `emulate` command: viewport/device, CPU, network, color scheme, geolocation, or reset. */
export async function emulate(tabId, params) {
  const s = await open(tabId);
  if (params.reset) {
    await resetEmulation(tabId);
    s.emulation = null;
    return { success: true, reset: true, emulation: {} };
  }
  const state = Object.assign({}, s.emulation || {});
  let viewport = params.viewport && typeof params.viewport === 'object' ? Object.assign({}, params.viewport) : null;
  if (params.device) {
    const device = DEVICES[String(params.device).toLowerCase()];
    if (!device) return { error: 'invalid_param', message: `unknown device ${params.device}; known: ${Object.keys(DEVICES).join(', ')}` };
    viewport = Object.assign({}, device, viewport || {});
    state.device = String(params.device).toLowerCase();
  }
  if (viewport) {
    const width = Math.round(Number(viewport.width));
    const height = Math.round(Number(viewport.height));
    if (!(width >= 100 && width <= 10000 && height >= 100 && height <= 10000)) return { error: 'invalid_param', message: 'viewport width and height must be between 100 and 10000' };
    const dsf = Number(viewport.device_scale_factor) || 0;
    const mobile = !!viewport.mobile;
    await send(tabId, 'Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: dsf, mobile });
    await send(tabId, 'Emulation.setTouchEmulationEnabled', { enabled: mobile, maxTouchPoints: mobile ? 5 : 1 });
    if (viewport.user_agent) await send(tabId, 'Emulation.setUserAgentOverride', { userAgent: String(viewport.user_agent) });
    state.viewport = { width, height, device_scale_factor: dsf || null, mobile };
  }
  if (params.cpu_throttling !== undefined) {
    const rate = Number(params.cpu_throttling);
    if (!(rate >= 1 && rate <= 20)) return { error: 'invalid_param', message: 'cpu_throttling is a slowdown factor from 1 (none) to 20' };
    await send(tabId, 'Emulation.setCPUThrottlingRate', { rate });
    state.cpu_throttling = rate;
  }
  let network = params.network;
  if (params.offline !== undefined) network = params.offline ? 'offline' : (network || 'none');
  if (network !== undefined) {
    let profile = typeof network === 'string' ? NETWORKS[network] : network;
    if (profile === undefined || (profile !== null && typeof profile !== 'object')) {
      return { error: 'invalid_param', message: `unknown network ${JSON.stringify(network)}; known: ${Object.keys(NETWORKS).join(', ')} or {latency_ms, download_kbps, upload_kbps}` };
    }
    if (profile && typeof network !== 'string') {
      profile = { offline: !!network.offline, latency: Number(network.latency_ms) || 0, download_kbps: Number(network.download_kbps) || 0, upload_kbps: Number(network.upload_kbps) || 0 };
    }
    const kbps = (v) => (v > 0 ? (v * 1000) / 8 : -1);  // bytes/s; -1: no limit
    await send(tabId, 'Network.enable');
    await send(tabId, 'Network.emulateNetworkConditions', profile
      ? { offline: profile.offline, latency: profile.latency, downloadThroughput: kbps(profile.download_kbps), uploadThroughput: kbps(profile.upload_kbps) }
      : { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
    state.network = profile ? (typeof network === 'string' ? network : profile) : null;
  }
  if (params.color_scheme !== undefined) {
    const scheme = String(params.color_scheme);
    if (!['dark', 'light', 'no-preference', ''].includes(scheme)) return { error: 'invalid_param', message: 'color_scheme must be dark, light or no-preference' };
    await send(tabId, 'Emulation.setEmulatedMedia', { features: scheme ? [{ name: 'prefers-color-scheme', value: scheme }] : [] });
    state.color_scheme = scheme || null;
  }
  if (params.geolocation !== undefined) {
    const g = params.geolocation;
    if (g === null) {
      await send(tabId, 'Emulation.clearGeolocationOverride');
      state.geolocation = null;
    } else {
      const latitude = Number(g && g.latitude);
      const longitude = Number(g && g.longitude);
      if (!(latitude >= -90 && latitude <= 90 && longitude >= -180 && longitude <= 180)) return { error: 'invalid_param', message: 'geolocation needs latitude (-90..90) and longitude (-180..180)' };
      const accuracy = Number(g.accuracy) > 0 ? Number(g.accuracy) : 10;
      await send(tabId, 'Emulation.setGeolocationOverride', { latitude, longitude, accuracy });
      state.geolocation = { latitude, longitude, accuracy };
    }
  }
  for (const k of Object.keys(state)) if (state[k] === null) delete state[k];
  s.emulation = Object.keys(state).length ? state : null;
  return { success: true, emulation: state };
}

// ------------------------------------------------------------------ performance trace

/** Resolves with the next `method` event of `tabId`'s session (null after `timeoutMs`). */
function nextEvent(tabId, method, timeoutMs) {
  const s = sessions.get(tabId);
  return new Promise((resolve) => {
    const timer = setTimeout(() => { s.events.delete(entry); resolve(null); }, timeoutMs);
    const entry = { method, resolve: (params) => { clearTimeout(timer); s.events.delete(entry); resolve(params); } };
    s.events.add(entry);
  });
}

// Installed in the page before its first script (Page.addScriptToEvaluateOnNewDocument): observers
// of LCP, layout shifts, long tasks and long animation frames, kept until the trace reads them.
const TRACE_KEY = '__gasolineTrace_v1';
const TRACE_OBSERVERS = `(() => {
  if (window.${TRACE_KEY}) return;
  const t = { lcp: [], shifts: [], long: [], frames: [] };
  Object.defineProperty(window, '${TRACE_KEY}', { value: t, enumerable: false });
  const sel = (n, depth = 0) => {
    if (!n || n.nodeType !== 1) return null;
    if (n.id) return '#' + CSS.escape(n.id);
    let s = n.tagName.toLowerCase();
    if (n.classList && n.classList.length) s += '.' + Array.from(n.classList).slice(0, 2).map((c) => CSS.escape(c)).join('.');
    const p = n.parentElement;
    return p && p !== document.documentElement && p !== document.body && depth < 3 ? sel(p, depth + 1) + ' > ' + s : s;
  };
  const watch = (type, fn) => { try { new PerformanceObserver((l) => l.getEntries().forEach(fn)).observe({ type, buffered: true }); } catch (_) { /* unsupported */ } };
  watch('largest-contentful-paint', (e) => t.lcp.push({ time: e.startTime, size: e.size, url: e.url || '', element: sel(e.element), tag: e.element ? e.element.tagName.toLowerCase() : null }));
  // Shifts within 500 ms of input (a reload counts) are left out of CLS, as Chrome does; counted.
  watch('layout-shift', (e) => { if (e.hadRecentInput) t.afterInput = (t.afterInput || 0) + 1; else t.shifts.push({ time: e.startTime, value: e.value, sources: (e.sources || []).map((s) => sel(s.node)).filter(Boolean) }); });
  watch('longtask', (e) => t.long.push({ start: e.startTime, duration: e.duration }));
  watch('long-animation-frame', (e) => t.frames.push({ start: e.startTime, duration: e.duration, blocking: e.blockingDuration || 0,
    scripts: (e.scripts || []).slice(0, 5).map((s) => ({ source: s.sourceURL || '', invoker: s.invoker || '', duration: s.duration })) }));
})();`;

// Read back in the page after the load: the raw entries turned into insights.
const TRACE_READ = `(() => {
  const t = window.${TRACE_KEY} || { lcp: [], shifts: [], long: [], frames: [] };
  const r1 = (v) => Math.round(v * 10) / 10;
  const nav = performance.getEntriesByType('navigation')[0];
  const ttfb = nav ? nav.responseStart : 0;
  const fcpEntry = performance.getEntriesByName('first-contentful-paint')[0];
  const resources = performance.getEntriesByType('resource');
  const lcp = t.lcp[t.lcp.length - 1] || null;
  let lcpOut = null;
  if (lcp) {
    const res = lcp.url ? resources.find((r) => r.name === lcp.url) : null;
    const phases = { ttfb: r1(ttfb), load_delay: 0, load_duration: 0, render_delay: r1(Math.max(0, lcp.time - ttfb)) };
    if (res) {
      const start = res.requestStart || res.startTime;
      phases.load_delay = r1(Math.max(0, start - ttfb));
      phases.load_duration = r1(Math.max(0, res.responseEnd - start));
      phases.render_delay = r1(Math.max(0, lcp.time - Math.max(ttfb, res.responseEnd)));
    }
    lcpOut = { time: r1(lcp.time), element: lcp.element, tag: lcp.tag, url: lcp.url || null, size: lcp.size, phases };
  }
  const blocking = resources.filter((r) => r.renderBlockingStatus === 'blocking')
    .map((r) => ({ url: r.name, type: r.initiatorType, start: r1(r.startTime), end: r1(r.responseEnd), duration: r1(r.duration), transfer_size: r.transferSize || 0 }))
    .sort((a, b) => b.end - a.end).slice(0, 20);
  let cls = 0, win = 0, winStart = -1, last = -1;
  const byElement = {};
  for (const s of t.shifts) {
    if (last < 0 || s.time - last > 1000 || s.time - winStart > 5000) { win = 0; winStart = s.time; }
    win += s.value; last = s.time; cls = Math.max(cls, win);
    for (const el of s.sources.length ? s.sources : ['(unknown)']) byElement[el] = (byElement[el] || 0) + s.value / Math.max(1, s.sources.length);
  }
  const long = t.long.slice().sort((a, b) => b.duration - a.duration);
  const fcp = fcpEntry ? fcpEntry.startTime : 0;
  const tbt = t.long.filter((l) => l.start >= fcp).reduce((n, l) => n + Math.max(0, l.duration - 50), 0);
  const frames = t.frames.slice().sort((a, b) => b.blocking - a.blocking).slice(0, 5).map((f) => ({ start: r1(f.start), duration: r1(f.duration), blocking: r1(f.blocking), scripts: f.scripts.map((s) => ({ source: s.source, invoker: s.invoker, duration: r1(s.duration) })) }));
  return {
    url: location.href,
    ttfb: r1(ttfb), fcp: fcpEntry ? r1(fcp) : null,
    dom_content_loaded: nav ? r1(nav.domContentLoadedEventEnd) : null, load: nav ? r1(nav.loadEventEnd) : null,
    lcp: lcpOut,
    render_blocking: blocking,
    long_tasks: { count: t.long.length, total_blocking_time: r1(tbt), longest: long.slice(0, 10).map((l) => ({ start: r1(l.start), duration: r1(l.duration) })), frames },
    layout_shifts: { cls: Math.round(cls * 10000) / 10000, count: t.shifts.length, after_input: t.afterInput || 0,
      by_element: Object.entries(byElement).sort((a, b) => b[1] - a[1]).slice(0, 10).map(([element, value]) => ({ element, value: Math.round(value * 10000) / 10000 })) },
    resources: resources.length,
  };
})()`;

export const TRACE_MAX_SETTLE_MS = 10000;

/**
 * A performance trace of `tabId`: observers installed before the page's first script, the page
 * reloaded (unless `reload: false`: then what the page buffered), its load and `settle_ms` after
 * it awaited, then the insights read back (LCP and its phases, render-blocking requests, long
 * tasks and long animation frames, layout shifts by element).
 */
export async function trace(tabId, params) {
  await open(tabId);
  const settle = Math.min(Math.max(Number(params.settle_ms) || 1500, 0), TRACE_MAX_SETTLE_MS);
  const reload = params.reload !== false;
  let scriptId = null;
  const started = Date.now();
  try {
    if (reload) {
      scriptId = (await send(tabId, 'Page.addScriptToEvaluateOnNewDocument', { source: TRACE_OBSERVERS })).identifier;
      const loaded = nextEvent(tabId, 'Page.loadEventFired', 15000);
      await send(tabId, 'Page.reload', { ignoreCache: !!params.ignore_cache });
      if (!(await loaded)) return { error: 'timeout', message: 'the page did not finish loading within 15 s' };
    } else {
      await send(tabId, 'Runtime.evaluate', { expression: TRACE_OBSERVERS });
    }
    await new Promise((r) => setTimeout(r, settle));
    const out = await send(tabId, 'Runtime.evaluate', { expression: TRACE_READ, returnByValue: true });
    if (!out || !out.result || out.exceptionDetails) return { error: 'command_failed', message: 'the trace could not be read back from the page' };
    return Object.assign({ success: true, reloaded: reload, settle_ms: settle, duration_ms: Date.now() - started }, out.result.value);
  } finally {
    if (scriptId) await send(tabId, 'Page.removeScriptToEvaluateOnNewDocument', { identifier: scriptId }).catch(() => {});
  }
}
