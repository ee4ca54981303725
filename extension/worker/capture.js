// Gasoline — capture, from the tracked pages to the queues: what lib/pages.js pulls from them and
// what lib/failures.js sees of failed loads, filtered by the capture switches, tagged with its tab,
// redacted (lib/redact.js, before anything leaves the browser) and queued (worker/queues.js).

import { isTrackedTab } from '../lib/settings.js';
import { installPageCapture } from '../lib/pages.js';
import { installLoadFailures } from '../lib/failures.js';
import { pageLoadsSettled } from '../lib/loads.js';
import { redactItem } from '../lib/redact.js';
import { loadSettings } from './config.js';
import { daemonFetch } from './daemon.js';
import { extLog } from './log.js';
import { noteEntries } from './status.js';
import { QUEUE_SPECS, createCaptureQueues } from './queues.js';
import { createSourceMapper } from '../lib/sourcemaps.js';

export const queues = createCaptureQueues({
  send: (spec, batch) => daemonFetch(spec.path, { body: { [spec.key]: batch } }),
  settled: pageLoadsSettled,
  onEntries: noteEntries,
  log: extLog,
});

/**
 * The item a page's capture of `kind` becomes under settings `s`, tagged with tab `tabId` (the
 * payload itself, changed), or null when its capture switch is off or no queue takes `kind`.
 */
export function tagItem(s, kind, payload, tabId) {
  if (kind === 'log') {
    if (!s.captureLogs && payload.type === 'console') return null;
    payload.tabId = tabId;
  } else {
    payload.tab_id = tabId;
  }
  if (kind === 'network_body' && !s.captureNetwork) return null;
  if (kind === 'ws' && !s.captureWebSocket) return null;
  if (kind === 'action' && !s.captureActions) return null;
  if (!QUEUE_SPECS[kind]) return null;
  return payload;
}

/** The text at `url` (no credentials, 5 s, at most `maxBytes`), or null. */
async function fetchText(url, maxBytes) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), 5000);
  try {
    const resp = await fetch(url, { credentials: 'omit', redirect: 'error', signal: ctrl.signal });
    if (!resp.ok) return null;
    const length = Number(resp.headers.get('content-length') || 0);
    if (length > maxBytes) return null;
    const text = await resp.text();
    return text.length > maxBytes ? null : text;
  } catch (_) {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

const sourceMaps = createSourceMapper({ fetchText });
// How long an exception waits for its source maps before it is sent without them.
const SOURCE_MAP_WAIT_MS = 3000;

function captureItem(s, kind, payload, tabId) {
  const item = tagItem(s, kind, payload, tabId);
  if (!item) return;
  if (kind === 'log' && item.type === 'exception' && typeof item.stack === 'string' && item.stack) {
    // Where the page ships source maps, the frames mapped back to the sources (lib/sourcemaps.js).
    const bound = new Promise((resolve) => setTimeout(() => resolve(null), SOURCE_MAP_WAIT_MS));
    Promise.race([sourceMaps.mapStack(item.stack, item.url), bound]).catch(() => null).then((frames) => {
      if (frames) item.source_stack = frames;
      queues.enqueue(kind, redactItem(kind, item));
    });
    return;
  }
  queues.enqueue(kind, redactItem(kind, item)); // the one redactor, before anything leaves the browser
}

// `pages`: lib/pages.js, once installed. `byKind`: what the pages handed over, by kind, and
// `untracked`: how much of it came from a tab no longer tracked by the time it arrived (status
// snapshot: where capture stopped, when a page's data does not arrive).
const pulled = { pages: null, byKind: {}, untracked: 0 };
// `counts`: how the failed-load listener's requests ended (lib/failures.js); `untracked`: how many
// failures came from a tab not tracked when they were reported.
const failedLoads = { counts: null, untracked: 0 };

/** Registers the capture listeners (once, at the worker's top level). */
export function installCapture() {
  // Verdicts for every page, and pulls from tracked ones (lib/pages.js).
  pulled.pages = installPageCapture({
    loadSettings,
    onWarning: (tabId, message) => extLog('warn', `tab ${tabId}: ${message}`, 'capture'),
    onItems: (tabId, items, dropped) => {
      for (const item of items) pulled.byKind[item && item.kind] = (pulled.byKind[item && item.kind] || 0) + 1;
      loadSettings().then((s) => {
        if (!isTrackedTab(s, tabId)) { pulled.untracked += items.length; return; }
        if (dropped) extLog('warn', `tab ${tabId} produced more than its buffer holds between two pulls: dropped ${dropped} oldest item(s)`, 'capture');
        for (const item of items) {
          if (item && item.payload && typeof item.payload === 'object') captureItem(s, item.kind, item.payload, tabId);
        }
      });
    },
  });
}

/** Registers the failed-load listener (lib/failures.js): what the page's hooks cannot see (an <img> or script 404, a blocked stylesheet). */
export function installFailedLoads() {
  failedLoads.counts = installLoadFailures((tabId, entry) => {
    loadSettings().then((s) => {
      if (!isTrackedTab(s, tabId)) { failedLoads.untracked += 1; return; }
      if (!s.captureNetwork) return;
      captureItem(s, 'log', entry, tabId);
      captureItem(s, 'network_body', { ts: entry.ts, url: entry.url, method: entry.method, status: entry.status,
        content_type: '', duration: 0, initiator: entry.resource_type, error: entry.error }, tabId);
    });
  });
}

/** The capture part of the status snapshot. */
export function captureStatus() {
  return {
    queues: queues.snapshot(),
    capturing_tabs: pulled.pages ? pulled.pages.capturingTabs() : [],
    capture_starts: pulled.pages ? pulled.pages.starts() : {},
    pulled: Object.assign({ untracked: pulled.untracked }, pulled.byKind),
    dropped: queues.totalDropped(),
    failed_loads: Object.assign({ untracked: failedLoads.untracked }, failedLoads.counts ? failedLoads.counts() : {}),
  };
}
