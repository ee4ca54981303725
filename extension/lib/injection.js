// Gasoline — which tabs get the isolated-world content scripts, and when.
//
// The page hooks (content/inject.js, MAIN world) are a static content script: they must wrap
// console, fetch and WebSocket before the page's own scripts run. The isolated-world scripts
// (content/commands.js + content/content.js: the tracking verdict, the relay to this worker, user
// actions) are not: creating an isolated world and running them at document_start cost every page
// load a few milliseconds, and most tabs are never tracked. So:
//
// * a tracked tab gets them on every navigation once the page has loaded (webNavigation
//   onCompleted, or 3 s after DOMContentLoaded when the load drags on); the hooks keep what the
//   page did until then in a bounded buffer and hand it over as soon as content.js says the tab is
//   tracked, so the page's load event never waits for them;
// * an untracked tab gets only a one-line verdict in the page's world, at the same moment, after
//   which the hooks drop what they kept and give the page its own console, fetch, XHR and
//   WebSocket back;
// * a tab that becomes tracked (popup, options, an agent, a test harness writing chrome.storage)
//   gets them at once, so capture starts without a reload; a tab that stops being tracked is told
//   by its content.js, which watches the same storage keys.
//
// A page the worker cannot reach (chrome://, the web store, a PDF viewer) simply gets nothing; the
// hooks there, if any, stop buffering on their own a few seconds after load.

import { STORAGE_KEYS, isTrackedTab, settingsFromStorage } from './settings.js';

const CONTENT_FILES = ['content/commands.js', 'content/content.js'];
const TRACKING_KEYS = [STORAGE_KEYS.trackedTabId, STORAGE_KEYS.extraTabs, STORAGE_KEYS.trackAllTabs];
const PAGE_URL = /^(?:https?|file):/;
const LATE_LOAD_MS = 3000;

function untrackedVerdict() {
  // Runs in the page's world (see tellUntracked); content.js posts the same message shape.
  window.postMessage({ __gasoline_ext__: true, kind: 'tracking', tracked: false }, '*');
}

// A target: the tab's top frame, or exactly one document of it (a navigation event's documentId),
// so an answer meant for one page never lands in the next one the tab has moved on to.
const targetOf = (tabId, documentId) => (documentId ? { tabId, documentIds: [documentId] } : { tabId });

/** Inject the isolated-world scripts into a tab's top frame (document_idle unless `now`). */
export function injectContent(tabId, now = false, documentId = undefined) {
  return chrome.scripting.executeScript({ target: targetOf(tabId, documentId), files: CONTENT_FILES, injectImmediately: now })
    .then(() => true, () => false); // a page we may not script (or a document that went away)
}

function tellUntracked(tabId, documentId) {
  return chrome.scripting.executeScript({ target: targetOf(tabId, documentId), world: 'MAIN', injectImmediately: true, func: untrackedVerdict })
    .then(() => true, () => false);
}

async function pageTabs() {
  const tabs = await chrome.tabs.query({});
  return tabs.filter((t) => Number.isInteger(t.id) && PAGE_URL.test(t.url || ''));
}

/**
 * Wire the injection rules to the browser's events. `loadSettings()` resolves to the current
 * settings (lib/settings.js settingsFromStorage shape).
 */
export function installInjection(loadSettings) {
  const topPage = (details) => details.frameId === 0 && PAGE_URL.test(details.url || '');
  // Both the content scripts (tracked) and the verdict (untracked) wait until the page has loaded:
  // running anything in the page while it parses, even a one-line script, can delay its
  // DOMContentLoaded by a rendering frame. Until then the hooks keep what the page did in bounded
  // buffers. A load that drags on gets its answer 3 s after DOMContentLoaded instead (a hanging
  // image must not hold capture back).
  // Each document is answered once: by its load, or by the fallback if the load never came.
  const answered = new Set();
  const answer = (details) => {
    const key = details.documentId || `${details.tabId} ${details.url}`;
    if (answered.has(key)) return;
    answered.add(key);
    if (answered.size > 500) answered.delete(answered.values().next().value);
    const { tabId, documentId } = details;
    loadSettings().then((s) => (isTrackedTab(s, tabId) ? injectContent(tabId, true, documentId) : tellUntracked(tabId, documentId)));
  };
  chrome.webNavigation.onCompleted.addListener((details) => {
    if (topPage(details)) answer(details);
  });
  chrome.webNavigation.onDOMContentLoaded.addListener((details) => {
    if (topPage(details)) setTimeout(() => answer(details), LATE_LOAD_MS);
  });

  chrome.storage.onChanged.addListener((changes, area) => {
    if (area !== 'local' || !TRACKING_KEYS.some((k) => k in changes)) return;
    // The worker's own listener resets its settings cache on the same change: read storage afresh.
    chrome.storage.local.get(null).then(async (raw) => {
      const s = settingsFromStorage(raw);
      for (const tab of await pageTabs()) {
        if (isTrackedTab(s, tab.id)) injectContent(tab.id, true); // content.js ignores a second copy
      }
    });
  });

  // A worker (re)start: tabs that are tracked now and loaded before this worker ran.
  loadSettings().then(async (s) => {
    for (const tab of await pageTabs()) {
      if (isTrackedTab(s, tab.id)) injectContent(tab.id, true);
    }
  });
}
