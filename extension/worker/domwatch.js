// Gasoline — dom_change: the agents' DOM watches (every /sync answer carries the list) installed in
// the tracked tabs (content/domwatch.js, one MutationObserver per tab), installed again when such a
// tab loads a new document, and their reports sent to the daemon's /dom-changes.

import { isTrackedTab } from '../lib/settings.js';
import { loadSettings } from './config.js';
import { daemonFetch } from './daemon.js';

const MAX_WATCHES = 50;
let current = [];
let currentKey = '[]';
// tab id -> the list (as JSON) installed there
const installed = new Map();

async function trackedTabs() {
  const s = await loadSettings();
  const tabs = await chrome.tabs.query({});
  return tabs.filter((t) => isTrackedTab(s, t.id)).map((t) => t.id);
}

async function installIn(tabId) {
  const key = currentKey;
  if (installed.get(tabId) === key) return;
  if (!current.length && !installed.has(tabId)) return; // nothing to watch, nothing to clear
  try {
    const [{ result: ready }] = await chrome.scripting.executeScript({ target: { tabId }, func: () => !!globalThis.__gasolineDomWatch });
    if (!ready) {
      const [{ result: hasResolver }] = await chrome.scripting.executeScript({ target: { tabId }, func: () => !!globalThis.__gasolineCommands });
      const files = hasResolver ? ['content/domwatch.js'] : ['content/selectors.js', 'content/commands.js', 'content/domwatch.js'];
      await chrome.scripting.executeScript({ target: { tabId }, files });
    }
    await chrome.scripting.executeScript({ target: { tabId }, func: (w) => globalThis.__gasolineDomWatch.set(w), args: [current] });
    if (current.length) installed.set(tabId, key);
    else installed.delete(tabId);
  } catch (_) {
    installed.delete(tabId); // a page no script may run in (chrome://, the web store): nothing to watch
  }
}

/** The list a /sync answer carries (absent: none). */
export async function applyDomWatches(spec) {
  const watches = spec && Array.isArray(spec.watches) ? spec.watches.slice(0, MAX_WATCHES) : [];
  const key = JSON.stringify(watches);
  if (key === currentKey && (!watches.length || (await trackedTabs()).every((id) => installed.get(id) === key))) return;
  current = watches;
  currentKey = key;
  const tabs = new Set([...(await trackedTabs()), ...installed.keys()]);
  await Promise.all([...tabs].map((id) => installIn(id)));
}

/** Registers the listeners (at the worker's top level): a tracked tab's new document gets the watches again; reports go out. */
export function installDomWatch() {
  chrome.tabs.onUpdated.addListener((tabId, info) => {
    if (info.status !== 'complete') return;
    installed.delete(tabId);
    if (!current.length) return;
    loadSettings().then((s) => { if (isTrackedTab(s, tabId)) installIn(tabId); });
  });
  chrome.tabs.onRemoved.addListener((tabId) => installed.delete(tabId));
}

/** A content script's report (content/domwatch.js): sent at once, for a tracked tab only. */
export async function reportDomChanges(msg, tab) {
  const s = await loadSettings();
  if (!tab || !isTrackedTab(s, tab.id) || !Array.isArray(msg.changes)) return;
  const body = { tab_id: tab.id, url: tab.url, changes: msg.changes.slice(0, 100) };
  if (Number.isInteger(msg.dropped)) body.dropped = msg.dropped;
  try {
    await daemonFetch('/dom-changes', { body });
  } catch (_) { /* the daemon is down: a DOM change is news only now */ }
}
