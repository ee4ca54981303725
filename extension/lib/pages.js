// Gasoline — the worker's side of page capture: which tabs capture, and collecting what they kept.
//
// The page hooks (content/hooks.js, MAIN world, document_start) are the only static content script:
// they must wrap console, fetch and WebSocket before the page's own scripts run, and they only keep
// raw records. This module reaches them with chrome.scripting.executeScript in the page's world
// (window.__gasolineHooks.track / take):
//
// * once a page has loaded (webNavigation.onCompleted, or 3 s after DOMContentLoaded when the load
//   drags on), its tab gets a verdict. A tracked tab gets the capture module (content/selectors.js
//   + content/capture.js), which turns the hooks' records into items from then on; an untracked
//   tab's hooks drop what they kept and give the page its own console, fetch, XHR, WebSocket and
//   history back. Nothing of ours runs in a page while it loads beyond the small hooks file;
// * a tracked page is then pulled from: every 250 ms while it produces items, backing off to once a
//   second when it is quiet, and never while some tab is loading a page (lib/loads.js, at most 1 s);
// * when a tracked tab starts its next navigation, one last pull takes what the old page still
//   held (its performance snapshot included), while that document still exists;
// * a tab that becomes tracked (popup, options, an agent, a test harness writing chrome.storage)
//   is captured at once, without a reload (a page loaded before the extension was gets the hooks
//   injected then); one that stops being tracked is told at once.
//
// Why pulls in the page's world and not an isolated-world content script that pushes: creating an
// isolated world in a page and tearing it down at the next navigation cost every navigation of a
// tracked tab a few milliseconds (bench/extension_overhead.py; about 10 % of a 35 ms page), and the
// window.postMessage relay it needed reached the page's own message listeners. Why two files: every
// page parses the document_start script on its load path (about 1.3 ms for the 45 kB the single
// file had, 0.15 ms for hooks.js); the capture module is parsed after the load, in tracked pages
// only. The price of pulling: what a page captured in the last moments before its tab closes (not
// navigates) is lost, at most one pull interval's worth.

import { STORAGE_KEYS, isTrackedTab, settingsFromStorage } from './settings.js';
import { pageLoadsSettled } from './loads.js';

const HOOK_FILES = ['content/hooks.js'];
const CAPTURE_FILES = ['content/selectors.js', 'content/capture.js'];
const TRACKING_KEYS = [STORAGE_KEYS.trackedTabId, STORAGE_KEYS.extraTabs, STORAGE_KEYS.trackAllTabs,
  STORAGE_KEYS.captureLogs, STORAGE_KEYS.captureNetwork, STORAGE_KEYS.captureWebSocket, STORAGE_KEYS.captureActions];
const PAGE_URL = /^(?:https?|file):/;
const LATE_LOAD_MS = 3000;
const PULL_BUSY_MS = 250;        // after a pull that brought items
const PULL_QUIET_MS = 1000;      // the longest wait between two pulls of a tracked page
const PULL_LOAD_HOLD_MS = 1000;  // how long a pull waits for other tabs' page loads, at most
const PULL_ITEMS_LIMIT = 1000;   // items taken per pull (capture.js TAKE_LIMIT)
const PULL_BYTES_LIMIT = 4 * 1024 * 1024; // and at most this much JSON per pull (the rest is counted as dropped)
const BOUND_KEY = 'gasolineBoundDocuments'; // documents our capture module attached to (session storage)
const ATTACHED = 'gasoline-capture: attached';

// Run in the page's world by executeScript: self-contained, no closures.
function pageTrack(on, flags) {
  const hooks = window.__gasolineHooks;
  return hooks && typeof hooks.track === 'function' ? hooks.track(on, flags) : null;
}
function pageTake(final) {
  const hooks = window.__gasolineHooks;
  return hooks && typeof hooks.take === 'function' ? hooks.take(final) : null;
}

// A target: the tab's top frame, or exactly one document of it (a navigation event's documentId),
// so a call meant for one page never lands in the next one the tab has moved on to.
const targetOf = (tabId, documentId) => (documentId ? { tabId, documentIds: [documentId] } : { tabId });

/** `func(...args)` in the page's world; its result, or undefined when the page cannot be scripted. */
function inPage(tabId, documentId, func, args) {
  return inPageOf(tabId, documentId, func, args).then((r) => r.result);
}

/** Like L{inPage}, with the document it ran in: {result, documentId}. */
function inPageOf(tabId, documentId, func, args) {
  return chrome.scripting.executeScript({ target: targetOf(tabId, documentId), world: 'MAIN', injectImmediately: true, func, args })
    .then((r) => ({
      result: r && r[0] && r[0].result !== undefined ? r[0].result : null,
      documentId: (r && r[0] && r[0].documentId) || documentId,
    }), () => ({ result: undefined, documentId }));
}

async function pageTabs() {
  const tabs = await chrome.tabs.query({});
  return tabs.filter((t) => Number.isInteger(t.id) && PAGE_URL.test(t.url || ''));
}

async function topDocument(tabId) {
  const frame = await chrome.webNavigation.getFrame({ tabId, frameId: 0 }).catch(() => null);
  return (frame && frame.documentId) || undefined;
}

const captureFlags = (s) => ({ logs: s.captureLogs, network: s.captureNetwork, websocket: s.captureWebSocket, actions: s.captureActions });

/**
 * Wire page capture to the browser's events.
 *
 * `loadSettings()` resolves to the current settings (lib/settings.js settingsFromStorage shape);
 * `onItems(tabId, items, dropped)` receives what a tracked page captured ([{kind, payload}]) and how
 * many items its hooks had to drop since the last pull.
 */
export function installPageCapture({ loadSettings, onItems, onWarning = () => {} }) {
  const capturing = new Map(); // tabId -> {documentId, timer, wait}
  // How capture starts ended, by outcome (the status snapshot's diagnostics).
  const starts = { started: 0, switches: 0, not_captured: 0, injected: 0, refused: 0 };

  // The capture module is bound to its page: the hooks accept the first module that attaches, and
  // the worker learns from the injection's own result (which the page cannot touch) whether that
  // was ours. A document whose module the worker did not see attach is not captured.
  let bound = null; // Set of document keys, mirrored in chrome.storage.session (survives worker restarts)
  const boundDocs = async () => {
    if (!bound) {
      const raw = (await chrome.storage.session.get(BOUND_KEY).catch(() => ({})))[BOUND_KEY];
      bound = new Set(Array.isArray(raw) ? raw : []);
    }
    return bound;
  };
  const docKey = (tabId, documentId) => documentId || `tab:${tabId}`;
  const injections = new Map(); // document key -> the injection of the capture module under way
  const injecting = new Map(); // tabId -> the injections under way in that tab (any document)
  const bind = async (key) => {
    const set = await boundDocs();
    set.add(key);
    while (set.size > 500) set.delete(set.values().next().value);
    chrome.storage.session.set({ [BOUND_KEY]: Array.from(set) }).catch(() => {});
  };

  // What comes back from a page's world is the page's to shape (it could patch the built-ins the
  // hooks use): take at most what the hooks ever hand over; the worker checks each item's kind and
  // the daemon each field.
  const deliver = (tabId, out) => {
    if (!out || !Array.isArray(out.items)) return 0;
    const items = [];
    let bytes = 0;
    for (const item of out.items.slice(0, PULL_ITEMS_LIMIT)) {
      let size;
      try { size = JSON.stringify(item).length; } catch (_) { continue; }
      if (bytes + size > PULL_BYTES_LIMIT) break;
      bytes += size;
      items.push(item);
    }
    const cut = Math.min(out.items.length, PULL_ITEMS_LIMIT) - items.length;
    const dropped = (Number(out.dropped) || 0) + cut;
    if (items.length || dropped) onItems(tabId, items, dropped);
    return items.length + (Number(out.more) || 0);
  };

  const forget = (tabId) => {
    const page = capturing.get(tabId);
    if (page) clearTimeout(page.timer);
    capturing.delete(tabId);
    return page;
  };

  const schedule = (tabId, page, wait) => {
    clearTimeout(page.timer);
    page.timer = setTimeout(() => pull(tabId, page), wait);
  };

  const pull = async (tabId, page) => {
    await pageLoadsSettled(PULL_LOAD_HOLD_MS);
    if (capturing.get(tabId) !== page) return;
    const out = await inPage(tabId, page.documentId, pageTake, [false]);
    if (capturing.get(tabId) !== page) { deliver(tabId, out); return; }
    if (out === undefined) { forget(tabId); return; } // the document is gone
    page.wait = deliver(tabId, out) ? PULL_BUSY_MS : Math.min(PULL_QUIET_MS, page.wait * 2);
    schedule(tabId, page, page.wait);
  };

  // Whether an injection under way in the tab, aimed at whichever document, turns out to have
  // attached our module to the document of `key` (the worker learns where it ran only when it
  // returns, and the page's verdict can come in between).
  const injectedHere = async (tabId, key) => {
    await Promise.all(Array.from(injecting.get(tabId) || []));
    return bound.has(key);
  };

  const startCapture = async (tabId, documentId, settings) => {
    documentId = documentId || await topDocument(tabId);
    const flags = captureFlags(settings);
    // The module is bound to the document it runs in, by that document's id: a start that could
    // not name the tab's document (between two documents) takes the id of the one its call
    // reached, so it and that page's own verdict agree on the key (otherwise the second takes the
    // module the first injected for the page's own, and the load's items are lost).
    const first = await inPageOf(tabId, documentId, pageTrack, [true, flags]);
    documentId = first.documentId;
    let out = first.result;
    // No hooks in this page (it loaded before the extension did): put them in now, capture starts
    // from here. Hooks without the capture module (the page's first verdict): add it.
    const missing = out === null ? HOOK_FILES.concat(CAPTURE_FILES) : (out && out.attach ? CAPTURE_FILES : null);
    const key = docKey(tabId, documentId);
    await boundDocs();
    if (missing) {
      // Two verdicts for one document can overlap (its load and a tracking change): one injects,
      // the other waits for that injection's result instead of seeing an unknown module.
      let injection = injections.get(key);
      if (!injection) {
        // The module is bound to the document the injection ran in, as its result names it: when
        // the tab is crossing to its next document, a script aimed at the one that is leaving can
        // run in the one that arrives (seen in Chromium, not rare in the tests), and binding the
        // aimed-at key would leave our own module in the new page looking like the page's.
        injection = chrome.scripting.executeScript({ target: targetOf(tabId, documentId), world: 'MAIN', injectImmediately: true, files: missing })
          .then((r) => (r && r[0] ? { result: r[0].result, documentId: r[0].documentId || documentId } : null), () => null)
          .then(async (ran) => { if (ran && ran.result === ATTACHED) await bind(docKey(tabId, ran.documentId)); return ran; });
        injections.set(key, injection);
        const underway = injecting.get(tabId) || new Set();
        injecting.set(tabId, underway.add(injection));
        injection.finally(() => {
          if (injections.get(key) === injection) injections.delete(key);
          underway.delete(injection);
          if (!underway.size && injecting.get(tabId) === underway) injecting.delete(tabId);
        });
      }
      const ran = await injection;
      const result = ran && ran.result;
      // It ran in the tab's next document: capture that one (its own verdict will find it bound).
      if (ran && ran.documentId) documentId = ran.documentId;
      if (result === ATTACHED) {
        starts.injected += 1;
        out = await inPage(tabId, documentId, pageTrack, [true, flags]);
      } else if (result) {
        starts.refused += 1;
        onWarning(tabId, `the page replaced Gasoline's capture module (${result}); nothing is captured from this page until it reloads`);
        out = null;
      }
    } else if (out && injections.has(key) && !(await injections.get(key).then(() => bound.has(key)))) {
      out = null;
    } else if (out && !bound.has(key) && !(await injectedHere(tabId, key))) {
      // A module is attached that the worker never saw attach: the page's own.
      onWarning(tabId, 'a capture module the extension did not inject is attached to this page; nothing is captured from it until it reloads');
      out = null;
    }
    if (!out || out.attach) {
      starts.not_captured += 1;
      return false;
    }
    const previous = capturing.get(tabId);
    if (previous && previous.documentId === documentId) {
      starts.switches += 1;
      deliver(tabId, out); // already pulled from: the call only passed new capture switches
      return true;
    }
    forget(tabId);
    const page = { documentId, timer: null, wait: PULL_BUSY_MS };
    capturing.set(tabId, page);
    deliver(tabId, out);
    schedule(tabId, page, PULL_BUSY_MS);
    starts.started += 1;
    return true;
  };

  const stopCapture = (tabId, documentId) => {
    forget(tabId);
    return inPage(tabId, documentId, pageTrack, [false, null]);
  };

  // Each document gets its verdict once: by its load, or by the fallback if the load never came.
  const answered = new Set();
  const answer = (details) => {
    const key = details.documentId || `${details.tabId} ${details.url}`;
    if (answered.has(key)) return;
    answered.add(key);
    if (answered.size > 500) answered.delete(answered.values().next().value);
    const { tabId, documentId } = details;
    loadSettings().then((s) => (isTrackedTab(s, tabId) ? startCapture(tabId, documentId, s) : stopCapture(tabId, documentId)));
  };
  const topPage = (details) => details.frameId === 0 && PAGE_URL.test(details.url || '');
  chrome.webNavigation.onCompleted.addListener((details) => {
    if (topPage(details)) answer(details);
  });
  chrome.webNavigation.onDOMContentLoaded.addListener((details) => {
    if (topPage(details)) setTimeout(() => answer(details), LATE_LOAD_MS);
  });
  // The tab is leaving the page: take the rest while the document still exists.
  chrome.webNavigation.onBeforeNavigate.addListener((details) => {
    if (details.frameId !== 0) return;
    const page = forget(details.tabId);
    if (page) inPage(details.tabId, page.documentId, pageTake, [true]).then((out) => deliver(details.tabId, out));
  });
  chrome.tabs.onRemoved.addListener((tabId) => { forget(tabId); });

  const reconcile = (s) => pageTabs().then((tabs) => {
    for (const tab of tabs) {
      if (isTrackedTab(s, tab.id)) startCapture(tab.id, undefined, s);
      else if (capturing.has(tab.id)) stopCapture(tab.id, capturing.get(tab.id).documentId);
    }
  });

  chrome.storage.onChanged.addListener((changes, area) => {
    if (area !== 'local' || !TRACKING_KEYS.some((k) => k in changes)) return;
    // The worker's own listener resets its settings cache on the same change: read storage afresh.
    chrome.storage.local.get(null).then((raw) => reconcile(settingsFromStorage(raw)));
  });

  // A worker (re)start: tabs that are tracked now and loaded before this worker ran.
  loadSettings().then(reconcile);

  // For the status snapshot (popup, diagnostics): the tabs pulled from now, how starts ended.
  return { capturingTabs: () => Array.from(capturing.keys()), starts: () => Object.assign({}, starts) };
}
