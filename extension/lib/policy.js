// Gasoline — what agents' commands may reach. The ONE place that decides which tabs a command may
// target and what needs the AI Web Pilot; every command path (worker/commands.js, runner.js,
// tabs.js, links.js, screenshot.js, and lib/scripts.js, lib/annotations.js) asks here instead of
// deciding on its own.
//
// * A command targets a tab the user tracks (popup: "Track this tab", or "Track every tab"); a
//   command without a tab id targets the primary tracked tab. There is no fallback to "the active
//   tab": an untracked or missing target is refused with an error that says so.
// * Reads that expose more than the capture stream (storage, cookie names, form values, the list
//   of every tab, a screenshot of a tab that is not in front, fetching links with the extension's
//   privileges) need the pilot, as acting does.
// * Agents do not widen capture: opening or switching to a tab tracks it only when the user allowed
//   that (popup: "Let agents track tabs they open or switch to"); file: URLs are refused unless the
//   user allowed them (options page).

import { isTrackedTab } from './settings.js';

let loadSettings = null;

/** Wire the policy to the worker's settings cache (`loadSettings()` resolves to the settings). */
export function initPolicy(settingsLoader) {
  loadSettings = settingsLoader;
}

async function settingsNow() {
  if (!loadSettings) throw new Error('policy used before initPolicy()');
  return loadSettings();
}

/** A command refused by policy: `code` is the error code an agent sees, `message` says why. */
export class Refused extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export const PILOT_OFF_MESSAGE = 'AI Web Pilot is off: turn it on in the Gasoline popup to let agents act in the browser or read beyond the capture stream';

/** Whether the user tracks `tabId` (includes "Track every tab"). */
export async function isTracked(tabId) {
  return isTrackedTab(await settingsNow(), Number(tabId));
}

/** Whether the user turned the AI Web Pilot on. */
export async function pilotEnabled() {
  return (await settingsNow()).pilotEnabled;
}

/** Throws L{Refused} unless the pilot is on; `what` names what needed it. */
export async function requirePilot(what) {
  if (!(await pilotEnabled())) throw new Refused('pilot_disabled', `${what} needs the AI Web Pilot. ${PILOT_OFF_MESSAGE}`);
}

/** The tab id a command names (its `tab_id`, or `params.tab_id`), or 0. */
export function requestedTabId(cmd) {
  const params = cmd && cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  const id = Number((cmd && cmd.tab_id) || params.tab_id || 0);
  return Number.isInteger(id) && id > 0 ? id : 0;
}

/**
 * The tab a command may act on: the tab it names if the user tracks it, else the primary tracked
 * tab. Throws L{Refused} (`tab_not_tracked`, `no_tracked_tab`, `no_tab`) otherwise.
 */
export async function targetTab(cmd) {
  const s = await settingsNow();
  const id = requestedTabId(cmd) || s.trackedTabId;
  if (!id) {
    throw new Refused('no_tracked_tab', 'no tab is tracked: the user has not tracked a tab in the Gasoline popup ("Track this tab")');
  }
  if (!isTrackedTab(s, id)) {
    throw new Refused('tab_not_tracked', `tab ${id} is not tracked: the user has not tracked it in the Gasoline popup, so agents cannot read or act on it`);
  }
  const tab = await chrome.tabs.get(id).catch(() => null);
  if (!tab) throw new Refused('no_tab', `tab ${id} does not exist`);
  if (/^file:/i.test(tab.url || '') && !s.allowFileUrls) {
    throw new Refused('file_url_refused', `tab ${id} shows a file: URL; the user has not allowed agents on local files (Gasoline options)`);
  }
  return tab;
}

const WEB_URL = /^https?:\/\//i;

/** Throws L{Refused} unless agents may load `url` (http(s), about:blank, file: when allowed). */
export async function checkUrl(url, what) {
  const s = await settingsNow();
  const text = String(url || '');
  if (text === 'about:blank' || WEB_URL.test(text)) return text;
  if (/^file:\/\//i.test(text)) {
    if (s.allowFileUrls) return text;
    throw new Refused('file_url_refused', `${what}: file: URLs are refused; the user has not allowed agents on local files (Gasoline options)`);
  }
  throw new Refused('invalid_param', `${what} needs an http(s) or about:blank url`);
}

/** Whether agents may add tabs to what is tracked (popup opt-in). */
export async function agentsMayTrack() {
  return (await settingsNow()).agentsMayTrack;
}

// ------------------------------------------------------------------ private-network targets

/** Whether a URL's host is loopback, link-local, private (RFC 1918 / ULA) or a .local/.internal name. */
export function isPrivateHost(url) {
  let host;
  try { host = new URL(url).hostname.toLowerCase(); } catch (_) { return true; }
  host = host.replace(/^\[|\]$/g, '');
  if (host === 'localhost' || host.endsWith('.localhost') || host.endsWith('.local') || host.endsWith('.internal')
      || host.endsWith('.home.arpa') || !host.includes('.') && !host.includes(':')) return true;
  const v4 = host.match(/^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    return a === 0 || a === 10 || a === 127 || (a === 169 && b === 254) || (a === 172 && b >= 16 && b <= 31)
      || (a === 192 && b === 168) || (a === 100 && b >= 64 && b <= 127) || a >= 224;
  }
  if (host.includes(':')) {
    return host === '::1' || host === '::' || /^f[cd]/.test(host) || /^fe[89ab]/.test(host) || host.startsWith('::ffff:');
  }
  return false;
}

// ------------------------------------------------------------------ parameter and result bounds

export const LIMITS = Object.freeze({
  params: 12 * 1024 * 1024,   // a whole command's params, JSON (uploads are the large ones)
  script: 256 * 1024,         // execute: script source
  selector: 4096,             // any selector
  text: 256 * 1024,           // typed / pasted text, subtitle text
  upload: 10 * 1024 * 1024,   // dom_action upload: base64 data of all files
  uploadFiles: 20,
  result: 4 * 1024 * 1024,    // a command result, JSON (chrome.storage.session holds 10 MB)
  links: 100,                 // link_health: links checked per command
});

/** Throws L{Refused} (`invalid_param`) when a command's parameters exceed L{LIMITS}. */
export function checkParams(cmd) {
  const params = cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  let size;
  try { size = JSON.stringify(params).length; } catch (_) { throw new Refused('invalid_param', 'params are not JSON'); }
  if (size > LIMITS.params) throw new Refused('invalid_param', `params are ${size} characters; at most ${LIMITS.params}`);
  const tooLong = (name, value, max) => {
    if (typeof value === 'string' && value.length > max) throw new Refused('invalid_param', `${name} is ${value.length} characters; at most ${max}`);
  };
  for (const key of ['script', 'code', 'expression']) tooLong(key, params[key], LIMITS.script);
  for (const key of ['selector', 'target', 'element']) tooLong(key, params[key], LIMITS.selector);
  for (const key of ['text', 'value', 'note']) tooLong(key, params[key], LIMITS.text);
  tooLong('url', params.url, 8192);
  if (Array.isArray(params.files)) {
    if (params.files.length > LIMITS.uploadFiles) throw new Refused('invalid_param', `at most ${LIMITS.uploadFiles} files per upload`);
    const total = params.files.reduce((n, f) => n + (f && typeof f.data === 'string' ? f.data.length : 0), 0);
    if (total > LIMITS.upload) throw new Refused('invalid_param', `upload data is ${total} characters of base64; at most ${LIMITS.upload}`);
  }
}

/** A result that fits L{LIMITS}.result, or an error result saying how large it was. */
export function boundResult(result) {
  let size = 0;
  try { size = JSON.stringify(result === undefined ? null : result).length; } catch (_) {
    return { error: 'result_not_json', message: 'the command produced a result that is not JSON' };
  }
  if (size <= LIMITS.result) return result;
  return { error: 'result_too_large', message: `the result is ${size} characters of JSON; at most ${LIMITS.result} are sent (narrow the selector or the limit)` };
}
