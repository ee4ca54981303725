// Gasoline — MV3 service worker.
//
// * Collects what the page hooks of tracked tabs captured (lib/pages.js), tags it with its tab and
//   sends them to the daemon in protocol-sized batches (retry with backoff; while the daemon is down
//   a bounded buffer per route drops the oldest items and counts them).
// * Runs the /sync loop (heartbeat + long poll + command channel; extension-protocol.md §3). The
//   worker can be stopped by Chrome at any time: an alarm wakes it every 30 s, the loop restarts at
//   top level, and the command bookkeeping (acks, seen ids, unsent results) lives in
//   chrome.storage.session so a restart neither loses results nor runs a command twice.
// * Carries out commands (commands.js holds the content-side handlers).

import { DEFAULT_SERVER_URL, STORAGE_KEYS, isTrackedTab, settingsFromStorage } from './lib/settings.js';
import { visualDiff, previewOf } from './lib/visual.js';
import { installPageCapture } from './lib/pages.js';
import { installLoadTracking, pageLoadsSettled } from './lib/loads.js';
import { installLoadFailures } from './lib/failures.js';
import {
  initPolicy, targetTab, requirePilot, checkUrl, checkParams, boundResult, isPrivateHost, agentsMayTrack,
  Refused, PILOT_OFF_MESSAGE, LIMITS,
} from './lib/policy.js';
import { createPairing, NotPaired, extensionKey, b64u } from './lib/pairing.js';
import { redactItem, redactValue, redactUrl } from './lib/redact.js';
import { execute } from './lib/scripts.js';
import { initAnnotations, storeAnnotation, drawMode, listAnnotations, annotationDetail } from './lib/annotations.js';
import { installTracking, setPrimaryTab, addTrackedTab, untrackTab, loadedBeforeTracking } from './lib/tracking.js';
import { initCdpLink } from './lib/cdp.js';

const VERSION = chrome.runtime.getManifest().version;
const HEADERS = {
  'Content-Type': 'application/json',
  'X-Gasoline-Client': `gasoline-extension/${VERSION}`,
  'X-Gasoline-Extension-Version': VERSION,
};
const SYNC_TIMEOUT_MS = 8000;
const POST_TIMEOUT_MS = 8000;
const HEALTH_TIMEOUT_MS = 3000;
const COMMAND_TIMEOUT_MS = 30000;
// While a tab loads a page the worker's own traffic waits (lib/loads.js), at most this long:
const CAPTURE_LOAD_HOLD_MS = 3000; // capture batches (only delivery waits, nothing is dropped)
const SYNC_LOAD_HOLD_MS = 1000;    // the /sync poll (not when command results are waiting)
const KEEPALIVE_ALARM = 'gasoline-keepalive';
const ext_session_id = `ext_${Date.now()}_${Math.random().toString(36).slice(2, 10)}`;

// ------------------------------------------------------------------ settings
let settings = null;
let settingsPromise = null;

function loadSettings() {
  if (!settingsPromise) {
    settingsPromise = chrome.storage.local.get(null).then((raw) => {
      settings = settingsFromStorage(raw);
      return settings;
    });
  }
  return settingsPromise;
}

initPolicy(loadSettings);
installTracking(loadSettings);

chrome.storage.onChanged.addListener((changes, area) => {
  if (area !== 'local') return;
  const before = settings;
  settingsPromise = null;
  loadSettings().then((now) => {
    const pinned = (x) => (x && x.daemonIdentity ? x.daemonIdentity.key : '');
    if (!before || before.serverUrl !== now.serverUrl || pinned(before) !== pinned(now)) {
      pairing.reset();
      status.connected = false;
      retryQueuesNow();
      wakeSync();
    }
    if (!before || before.trackedTabId !== now.trackedTabId || before.trackAllTabs !== now.trackAllTabs
        || String(before.extraTabs) !== String(now.extraTabs)) {
      sendExtensionStatus();
      wakeSync();
    }
  });
});

// ------------------------------------------------------------------ status (popup)
const status = {
  connected: false,
  consecutiveFailures: 0,
  lastSyncAt: null,
  lastError: '',
  entries: null,
  health: null,
  captureOverrides: {},
  serverVersion: '',
};

function updateBadge() {
  let text = '';
  let color = '#888888';
  if (!status.connected) { text = status.consecutiveFailures >= 2 ? '!' : ''; color = '#c0392b'; }
  else if (typeof status.entries === 'number') {
    text = status.entries >= 1000 ? Math.floor(status.entries / 1000) + 'k' : String(status.entries);
    color = '#f28c28';
  }
  chrome.action.setBadgeText({ text }).catch(() => {});
  chrome.action.setBadgeBackgroundColor({ color }).catch(() => {});
}

// ------------------------------------------------------------------ extension logs (sent with /sync)
const extensionLogs = [];
function extLog(level, message, category = 'general', data = undefined) {
  extensionLogs.push({ timestamp: new Date().toISOString(), level, message, source: 'background', category, data });
  if (extensionLogs.length > 100) extensionLogs.shift();
}

// ------------------------------------------------------------------ HTTP
async function rawFetch(path, { method = 'POST', body, headers = {}, timeout = POST_TIMEOUT_MS } = {}) {
  const s = await loadSettings();
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeout);
  try {
    return await fetch(s.serverUrl + path, {
      method,
      headers: Object.assign({}, HEADERS, headers),
      body,
      signal: ctrl.signal,
      cache: 'no-store',
    });
  } catch (e) {
    // Nothing answered (the daemon is down, or was): whoever answers next proves itself again.
    pairing.reset();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// `gasoline browser` reads this extension's PUBLIC key over its private DevTools pipe (only the
// process that started the browser holds that pipe) and grants it to the daemon for the launch
// (docs/browser.md, "The launched extension's key"). The private key never leaves the CryptoKey.
globalThis.gasolineExtensionPublicKey = () => extensionKey().then((k) => ({ key: b64u(k.raw), fingerprint: k.fingerprint }));

// The daemon proves its identity before anything but /health and /pairing is sent (lib/pairing.js).
const pairing = createPairing({
  fetchDaemon: (path, init) => rawFetch(path, Object.assign({ timeout: HEALTH_TIMEOUT_MS }, init)),
  getPinned: () => loadSettings().then((s) => s.daemonIdentity),
});

/**
 * A JSON request to the daemon: only once the daemon proved it is the paired one (except /health),
 * and sealed under the session key (lib/pairing.js). The answer carries `sealIv` and `session`
 * (to open a sealed answer). A daemon that no longer knows the session (it restarted) is
 * challenged again and the request sent once more.
 */
async function daemonFetch(path, { method = 'POST', body, timeout = POST_TIMEOUT_MS, headers } = {}) {
  const json = body === undefined ? undefined : JSON.stringify(body);
  if (path === '/health') return rawFetch(path, { method, headers, timeout, body: json });
  for (let attempt = 0; ; attempt += 1) {
    const session = await pairing.ensureSession();
    const sealed = await pairing.seal(session, method, path, new TextEncoder().encode(json === undefined ? '' : json));
    const resp = await rawFetch(path, { method, timeout, body: sealed.body, headers: Object.assign({}, headers, sealed.headers) });
    if (resp.headers.get('X-Gasoline-Session-Status') === 'unknown') {
      pairing.reset(); // the daemon restarted: challenge it again (an impostor fails there)
      if (attempt === 0) continue;
      throw new Error(`${path}: the daemon no longer knows this session (it restarted): pairing again`);
    }
    resp.sealIv = sealed.iv;
    resp.session = session;
    return resp;
  }
}

// ------------------------------------------------------------------ batching queues
const QUEUE_SPECS = {
  log: { path: '/logs', key: 'entries', batch: 50, cap: 5000 },
  network_body: { path: '/network-bodies', key: 'bodies', batch: 50, cap: 1000 },
  ws: { path: '/websocket-events', key: 'events', batch: 100, cap: 5000 },
  action: { path: '/enhanced-actions', key: 'actions', batch: 50, cap: 2000 },
  perf: { path: '/performance-snapshots', key: 'snapshots', batch: 10, cap: 100 },
};
const queues = {};
for (const name of Object.keys(QUEUE_SPECS)) {
  queues[name] = { items: [], dropped: 0, sent: 0, rejected: 0, sending: false, backoffMs: 0, timer: null };
}
let reportedDrops = 0;

function enqueue(name, item) {
  const q = queues[name];
  const spec = QUEUE_SPECS[name];
  q.items.push(item);
  if (q.items.length > spec.cap) {
    const over = q.items.length - spec.cap;
    q.items.splice(0, over);
    q.dropped += over;
  }
  scheduleFlush(name, q.backoffMs ? null : 250);
}

function scheduleFlush(name, delay) {
  const q = queues[name];
  if (q.timer || q.sending) return;
  const wait = delay === null ? q.backoffMs : delay;
  q.timer = setTimeout(() => { q.timer = null; flushQueue(name); }, wait);
}

/** Another daemon, or the same one back: drop every queue's back-off and send what waits now. */
function retryQueuesNow() {
  for (const name of Object.keys(queues)) {
    const q = queues[name];
    q.backoffMs = 0;
    if (q.timer) { clearTimeout(q.timer); q.timer = null; }
    if (q.items.length) scheduleFlush(name, 0);
  }
}

function backoff(q, retryAfterSeconds) {
  q.backoffMs = Math.min(q.backoffMs ? q.backoffMs * 2 : 1000, 30000);
  if (retryAfterSeconds > 0) q.backoffMs = Math.max(q.backoffMs, Math.min(retryAfterSeconds * 1000, 60000));
}

async function flushQueue(name) {
  const q = queues[name];
  const spec = QUEUE_SPECS[name];
  if (q.sending || !q.items.length) return;
  q.sending = true;
  await pageLoadsSettled(CAPTURE_LOAD_HOLD_MS);
  const batch = q.items.slice(0, spec.batch);
  try {
    const resp = await daemonFetch(spec.path, { body: { [spec.key]: batch } });
    const permanent = resp.status >= 400 && resp.status < 500 && resp.status !== 408 && resp.status !== 429;
    if (resp.ok || permanent) {
      const sent = new Set(batch);
      q.items = q.items.filter((x) => !sent.has(x));
      q.backoffMs = 0;
      if (resp.ok) {
        q.sent += batch.length;
        if (name === 'log') {
          const data = await resp.json().catch(() => null);
          if (data && typeof data.entries === 'number') { status.entries = data.entries; updateBadge(); }
          if (data && data.rejected) q.rejected += data.rejected;
        }
      } else {
        q.rejected += batch.length;
        extLog('warn', `${spec.path} refused a batch of ${batch.length}: HTTP ${resp.status}`, 'capture');
      }
    } else {
      backoff(q, Number(resp.headers.get('Retry-After')) || 0);
    }
  } catch (e) {
    backoff(q, 0);
  } finally {
    q.sending = false;
  }
  if (q.items.length) scheduleFlush(name, q.backoffMs ? null : 0);
}

function totalDropped() {
  return Object.values(queues).reduce((n, q) => n + q.dropped, 0);
}

function captureItem(kind, payload, tab) {
  const s = settings;
  if (kind === 'log') {
    if (!s.captureLogs && payload.type === 'console') return;
    payload.tabId = tab.id;
  } else {
    payload.tab_id = tab.id;
  }
  if (kind === 'network_body' && !s.captureNetwork) return;
  if (kind === 'ws' && !s.captureWebSocket) return;
  if (kind === 'action' && !s.captureActions) return;
  if (!QUEUE_SPECS[kind]) return;
  enqueue(kind, redactItem(kind, payload)); // the one redactor, before anything leaves the browser
}

// ------------------------------------------------------------------ persisted sync state
const SYNC_STATE_KEY = 'gasolineSyncState';
const SYNC_RESULTS_KEY = 'gasolineSyncResults';
let syncState = null; // {lastAck, seen: [ids], results: [command results not yet delivered]}

async function loadSyncState() {
  if (!syncState) {
    const got = await chrome.storage.session.get([SYNC_STATE_KEY, SYNC_RESULTS_KEY]);
    syncState = Object.assign({ lastAck: null, seen: [], results: [] }, got[SYNC_STATE_KEY] || {});
    if (Array.isArray(got[SYNC_RESULTS_KEY])) syncState.results = got[SYNC_RESULTS_KEY];
  }
  return syncState;
}

// The de-duplication state (acked and seen ids) is written on its own, first, so a results write
// that fails (chrome.storage.session holds 10 MB) can never lose it: a restarted worker then
// reports the failure instead of running a command twice.
async function saveSyncState() {
  const { lastAck, seen, results, daemonInstance } = syncState;
  await chrome.storage.session.set({ [SYNC_STATE_KEY]: { lastAck, seen, results: [], daemonInstance } }).catch(() => {});
  try {
    await chrome.storage.session.set({ [SYNC_RESULTS_KEY]: results });
  } catch (e) {
    syncState.results = results.map((r) => ({
      id: r.id, correlation_id: r.correlation_id, status: 'error', error: 'result_too_large',
      result: { error: 'result_too_large', message: `the result could not be kept for delivery: ${String((e && e.message) || e)}` },
    }));
    await chrome.storage.session.set({ [SYNC_RESULTS_KEY]: syncState.results }).catch(() => {});
  }
}

// ------------------------------------------------------------------ /sync loop
const inProgress = new Map();
let loopRunning = false;
let wake = null;
let lastHealthAt = 0;
let lastStatusText = '';
// The daemon counts the extension gone after 10 s without a sync and holds a poll up to 5 s.
const IDLE_POLL_MS = 3000;

function wakeSync() {
  if (wake) wake();
}

function sleepOrWake(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { wake = null; resolve(); }, ms);
    wake = () => { clearTimeout(timer); wake = null; resolve(); };
  });
}

async function syncOnce() {
  const s = await loadSettings();
  const st = await loadSyncState();
  const results = st.results.slice();
  const logs = extensionLogs.slice();
  const ownLogs = logs.length;
  const dropped = totalDropped();
  if (dropped > reportedDrops) {
    logs.push({
      timestamp: new Date().toISOString(), level: 'warn', source: 'background', category: 'capture',
      message: `buffer full while the daemon was unreachable: dropped ${dropped - reportedDrops} oldest item(s)`,
      data: Object.fromEntries(Object.entries(queues).map(([k, q]) => [k, q.dropped])),
    });
  }
  const tab = s.trackedTabId ? await chrome.tabs.get(s.trackedTabId).catch(() => null) : null;
  const body = {
    ext_session_id,
    extension_version: VERSION,
    settings: {
      pilot_enabled: s.pilotEnabled,
      tracking_enabled: !!(s.trackedTabId || s.trackAllTabs || s.extraTabs.length),
      tracked_tab_id: s.trackedTabId || 0,
      tracked_tab_url: redactUrl(s.trackedTabUrl || (tab && tab.url) || ''),
      tracked_tab_title: s.trackedTabTitle || (tab && tab.title) || '',
      tracked_tab_ids: [s.trackedTabId, ...s.extraTabs].filter(Boolean),
      track_all_tabs: s.trackAllTabs,
      capture_logs: s.captureLogs,
      capture_network: s.captureNetwork,
      capture_websocket: s.captureWebSocket,
      capture_actions: s.captureActions,
      dropped_items: dropped,
      loaded_before_tracking: (await loadedBeforeTracking()).filter((id) => isTrackedTab(s, id)),
    },
    extension_logs: logs,
    in_progress: Array.from(inProgress.values()),
  };
  if (st.lastAck) body.last_command_ack = st.lastAck;
  if (results.length) body.command_results = results;

  const resp = await daemonFetch('/sync', { body, timeout: SYNC_TIMEOUT_MS });
  const raw = await resp.arrayBuffer();
  if (!resp.ok) throw new Error(`/sync answered HTTP ${resp.status}`);
  // The command channel: an answer not sealed under this session's key, for this very request, is
  // not the paired daemon's: it is not parsed and its commands are not run.
  const plain = resp.headers.get('X-Gasoline-Sealed') === '1' ? await pairing.openAnswer(resp.session, resp.sealIv, raw) : null;
  if (!plain) {
    pairing.reset();
    throw new NotPaired('mismatch', 'an answer to /sync was not sealed by the paired Gasoline daemon: its commands were not run');
  }
  const data = JSON.parse(new TextDecoder().decode(plain));

  // Delivered: forget what we sent.
  extensionLogs.splice(0, Math.min(extensionLogs.length, ownLogs));
  reportedDrops = dropped;
  if (results.length) {
    const sentIds = new Set(results.map((r) => r.id));
    st.results = st.results.filter((r) => !sentIds.has(r.id));
  }
  if (!status.connected) retryQueuesNow(); // the daemon is (back) there: no queue waits out a back-off
  status.connected = true;
  status.consecutiveFailures = 0;
  status.lastSyncAt = Date.now();
  status.lastError = '';
  status.serverVersion = data.server_version || '';
  status.captureOverrides = (data.capture_overrides && typeof data.capture_overrides === 'object') ? data.capture_overrides : {};

  // Command ids restart at q-1 with every daemon process: another process (a restart) must not
  // have its first commands taken for ones this worker already ran.
  if (typeof data.daemon_instance === 'string' && data.daemon_instance !== st.daemonInstance) {
    if (st.daemonInstance) { st.seen = []; st.lastAck = null; }
    st.daemonInstance = data.daemon_instance;
  }
  const commands = Array.isArray(data.commands) ? data.commands : [];
  for (const cmd of commands) {
    if (!cmd || typeof cmd.id !== 'string') continue;
    st.lastAck = cmd.id;
    if (st.seen.includes(cmd.id)) continue;
    st.seen.push(cmd.id);
    if (st.seen.length > 500) st.seen.splice(0, st.seen.length - 500);
    enqueueCommand(cmd);
  }
  await saveSyncState();
  const next = Number(data.next_poll_ms);
  return Number.isFinite(next) && next >= 0 ? Math.min(next, 30000) : 1000;
}

async function refreshHealth() {
  try {
    const resp = await daemonFetch('/health', { method: 'GET', timeout: HEALTH_TIMEOUT_MS });
    if (resp.ok) {
      status.health = await resp.json();
      if (status.health && status.health.logs && typeof status.health.logs.entries === 'number') {
        status.entries = status.health.logs.entries;
      }
    }
  } catch (_) { /* reported through sync failures */ }
}

async function syncLoop() {
  if (loopRunning) return;
  loopRunning = true;
  try {
    for (;;) {
      let delay;
      try {
        const wasDown = status.consecutiveFailures > 0 || !status.lastSyncAt;
        if (!(await loadSyncState()).results.length) await pageLoadsSettled(SYNC_LOAD_HOLD_MS);
        delay = await syncOnce();
        if (Date.now() - lastHealthAt > 10000) { lastHealthAt = Date.now(); refreshHealth(); }
        // A daemon that came back: push whatever waited in the buffers now instead of after the backoff.
        if (wasDown) {
          for (const name of Object.keys(queues)) {
            const q = queues[name];
            if (q.items.length && q.backoffMs) { q.backoffMs = 0; clearTimeout(q.timer); q.timer = null; scheduleFlush(name, 0); }
          }
        }
      } catch (e) {
        status.consecutiveFailures += 1;
        status.lastError = String((e && e.message) || e);
        if (status.consecutiveFailures >= 2 || e instanceof NotPaired) status.connected = false;
        if (e instanceof NotPaired && (e.state === 'mismatch' || e.state === 'refused')) extLog('error', status.lastError, 'pairing');
        delay = Math.min(1000 * 2 ** Math.min(status.consecutiveFailures - 1, 3), 5000);
        if (e instanceof NotPaired && e.state === 'unpaired') delay = Math.min(delay, 2000);
      }
      updateBadge();
      const st = await loadSyncState();
      // Idle (nothing tracked, pilot off, nothing running or waiting): no commands can run, so the
      // worker polls less often and writes the popup's status only when it changed; with no API
      // calls between polls Chrome may stop the worker, and the alarm or a tracking change wakes it.
      const s = await loadSettings();
      const idle = !s.trackedTabId && !s.extraTabs.length && !s.trackAllTabs && !s.pilotEnabled
        && !st.results.length && !inProgress.size;
      const snapshot = statusSnapshot();
      const text = JSON.stringify(snapshot);
      if (!idle || text !== lastStatusText) {
        lastStatusText = text;
        // Any extension API call keeps the worker alive between polls.
        await chrome.storage.session.set({ gasolineStatus: snapshot }).catch(() => {});
      }
      if (idle && status.connected) delay = Math.max(delay, IDLE_POLL_MS);
      if (st.results.length && status.connected) delay = Math.min(delay, 50);
      await sleepOrWake(delay);
    }
  } finally {
    loopRunning = false;
  }
}

function statusSnapshot() {
  return {
    connected: status.connected,
    last_sync_at: status.lastSyncAt,
    last_error: status.lastError,
    entries: status.entries,
    server_url: settings ? settings.serverUrl : DEFAULT_SERVER_URL,
    server_version: status.serverVersion,
    ai_controlled: Object.keys(status.captureOverrides || {}).length > 0,
    pairing: {
      state: pairing.info.state,
      message: pairing.info.message,
      fingerprint: settings && settings.daemonIdentity ? settings.daemonIdentity.fingerprint : '',
      offered_fingerprint: pairing.info.offered ? pairing.info.offered.fingerprint : '',
      // This extension's own key, which the daemon pins (`gasoline status` shows the same).
      extension_fingerprint: pairing.info.extensionFingerprint || '',
    },
    ext_session_id,
    version: VERSION,
    queues: Object.fromEntries(Object.entries(queues).map(([k, q]) => [k, { buffered: q.items.length, sent: q.sent, dropped: q.dropped, rejected: q.rejected, backoff_ms: q.backoffMs }])),
    capturing_tabs: pageCapture.capturingTabs(),
    capture_starts: pageCapture.starts(),
    pulled: Object.assign({ untracked: pulledUntracked }, pulled),
    dropped: totalDropped(),
  };
}

async function sendExtensionStatus() {
  const s = await loadSettings();
  daemonFetch('/api/extension-status', {
    body: {
      type: 'status', tracking_enabled: !!(s.trackedTabId || s.trackAllTabs || s.extraTabs.length),
      tracked_tab_id: s.trackedTabId || 0, tracked_tab_url: redactUrl(s.trackedTabUrl || ''), message: 'tracking changed',
      extension_connected: true, timestamp: new Date().toISOString(),
    },
    timeout: HEALTH_TIMEOUT_MS,
  }).catch(() => {});
}

// ------------------------------------------------------------------ commands
// Acting, and reads that expose more than the capture stream does (every tab's URL and title,
// storage, cookie names and form values, fetching with the extension's privileges).
const PILOT_COMMANDS = new Set(['execute', 'browser_action', 'dom_action', 'draw_mode', 'tabs', 'state_capture', 'link_health']);
const READ_ONLY_DOM_ACTIONS = new Set(['get_text', 'get_value', 'get_attribute', 'list_interactive', 'wait_for']);

// Commands for one tab run one after another, in the order the daemon queued them (a navigation
// must not pull the page away from a DOM read that was queued before it); tabs run independently.
const tabChains = new Map();

function enqueueCommand(cmd) {
  const queued = new Date().toISOString();
  inProgress.set(cmd.id, { id: cmd.id, correlation_id: cmd.correlation_id, type: cmd.type, status: 'pending', started_at: queued, updated_at: queued });
  const params = cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  const key = String(cmd.tab_id || params.tab_id || 'tracked');
  const chain = (tabChains.get(key) || Promise.resolve()).then(() => runCommand(cmd));
  tabChains.set(key, chain);
  chain.then(() => { if (tabChains.get(key) === chain) tabChains.delete(key); });
}

// Results that are the agent's own (its script's value) or images: everything else passes the redactor.
const RAW_RESULTS = new Set(['execute', 'visual_diff', 'screenshot']);

async function runCommand(cmd) {
  const started = new Date().toISOString();
  inProgress.set(cmd.id, { id: cmd.id, correlation_id: cmd.correlation_id, type: cmd.type, status: 'running', started_at: started, updated_at: started });
  let entry;
  try {
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve({ __timeout: true }), COMMAND_TIMEOUT_MS); });
    checkParams(cmd);
    const running = dispatch(cmd);
    const result = boundResult(await Promise.race([running, timeout]));
    clearTimeout(timer);
    if (result && result.__timeout) {
      entry = { status: 'timeout', error: `command ${cmd.type} did not finish within ${COMMAND_TIMEOUT_MS / 1000} s` };
      // The next command for this tab starts only once this one has stopped (or after a grace
      // period): it must not overlap a navigation or a script that is still running.
      leftovers.set(cmd.id, running.catch(() => {}));
    } else if (result && result.__answered) {
      entry = null; // answered through another route (screenshot → POST /screenshots)
    } else if (result && typeof result === 'object' && typeof result.error === 'string') {
      entry = { status: 'error', error: result.error, result: redactValue(result) };
    } else {
      entry = { status: 'complete', result: RAW_RESULTS.has(cmd.type) ? result : redactValue(result) };
    }
  } catch (e) {
    entry = e instanceof Refused
      ? { status: 'error', error: e.code, result: { error: e.code, message: e.message } }
      : { status: 'error', error: String((e && e.message) || e) };
  }
  inProgress.delete(cmd.id);
  if (entry) {
    const st = await loadSyncState();
    st.results.push(Object.assign({ id: cmd.id }, cmd.correlation_id ? { correlation_id: cmd.correlation_id } : {}, entry));
    await saveSyncState();
  }
  wakeSync();
  const leftover = leftovers.get(cmd.id);
  if (leftover) {
    await Promise.race([leftover, new Promise((resolve) => setTimeout(resolve, TIMED_OUT_GRACE_MS))]);
    leftovers.delete(cmd.id);
  }
}
const leftovers = new Map(); // command id -> its dispatch, still running after its timeout
const TIMED_OUT_GRACE_MS = 15000;

async function inTab(tabId, type, params) {
  const [{ result: ready }] = await chrome.scripting.executeScript({ target: { tabId }, func: () => !!globalThis.__gasolineCommands });
  if (!ready) await chrome.scripting.executeScript({ target: { tabId }, files: ['content/selectors.js', 'content/commands.js'] });
  if (type === 'a11y') {
    const [{ result: hasAxe }] = await chrome.scripting.executeScript({ target: { tabId }, func: () => !!globalThis.axe });
    if (!hasAxe) await chrome.scripting.executeScript({ target: { tabId }, files: ['vendor/axe.min.js'] });
  }
  const [{ result }] = await chrome.scripting.executeScript({
    target: { tabId },
    func: (t, p) => globalThis.__gasolineCommands.run(t, p),
    args: [type, params],
  });
  return result;
}

function waitForTabComplete(tabId, timeoutMs = 15000) {
  return new Promise((resolve) => {
    let done = false;
    const finish = (tab) => {
      if (done) return;
      done = true;
      chrome.tabs.onUpdated.removeListener(listener);
      clearTimeout(timer);
      resolve(tab);
    };
    const listener = (id, info, tab) => { if (id === tabId && info.status === 'complete') finish(tab); };
    const timer = setTimeout(() => chrome.tabs.get(tabId).then(finish, () => finish(null)), timeoutMs);
    chrome.tabs.onUpdated.addListener(listener);
    // It may already be complete (e.g. a same-document navigation).
    setTimeout(() => chrome.tabs.get(tabId).then((t) => { if (t && t.status === 'complete') finish(t); }, () => {}), 300);
  });
}

async function browserAction(cmd) {
  const params = cmd.params || {};
  const action = params.action;
  const tabInfo = (tab) => (tab ? { tab_id: tab.id, url: tab.url, title: tab.title } : {});
  switch (action) {
    case 'navigate': {
      await checkUrl(params.url, 'navigate');
      const tab = await targetTab(cmd);
      await chrome.tabs.update(tab.id, { url: params.url });
      const done = await waitForTabComplete(tab.id);
      return Object.assign({ success: true, action }, tabInfo(done));
    }
    case 'refresh': {
      const tab = await targetTab(cmd);
      await chrome.tabs.reload(tab.id, { bypassCache: !!params.bypass_cache });
      return Object.assign({ success: true, action }, tabInfo(await waitForTabComplete(tab.id)));
    }
    case 'back':
    case 'forward': {
      const tab = await targetTab(cmd);
      const failed = await historyStep(tab.id, action === 'back' ? -1 : 1);
      if (failed) return failed;
      return Object.assign({ success: true, action }, tabInfo(await waitForTabComplete(tab.id)));
    }
    case 'new_tab': {
      const url = await checkUrl(params.url || 'about:blank', 'new_tab');
      // Agents do not widen capture: the new tab is tracked only when the user allowed it.
      const track = params.track !== false && await agentsMayTrack();
      const tab = await chrome.tabs.create({ url, active: params.active !== false });
      if (track) await addTrackedTab(tab.id);
      return Object.assign({ success: true, action, tracked: track }, tabInfo(await waitForTabComplete(tab.id)),
        track ? {} : { note: 'the new tab is not tracked (the user has not let agents track tabs in the Gasoline popup): agents cannot read or act on it' });
    }
    case 'switch_tab': {
      const id = Number(params.tab_id || cmd.tab_id);
      if (!id) return { error: 'missing_param', message: 'switch_tab needs tab_id' };
      // Only to a tracked tab, unless the user let agents track tabs (then it becomes the primary).
      const mayTrack = await agentsMayTrack();
      const target = mayTrack ? await chrome.tabs.get(id).catch(() => null) : await targetTab({ params: { tab_id: id } });
      if (!target) return { error: 'no_tab', message: `tab ${id} does not exist` };
      if (mayTrack) await checkUrl(target.url, 'switch_tab');
      const tab = await chrome.tabs.update(id, { active: true });
      await chrome.windows.update(tab.windowId, { focused: true }).catch(() => {});
      if (mayTrack && params.track !== false) await setPrimaryTab(tab);
      return Object.assign({ success: true, action }, tabInfo(tab));
    }
    case 'close_tab': {
      const tab = await targetTab(cmd);
      await chrome.tabs.remove(tab.id);
      return { success: true, action, tab_id: tab.id };
    }
    default:
      return { error: 'invalid_param', message: `unknown browser_action ${action}` };
  }
}

// Back/forward as the page's own history.back()/forward() do. chrome.tabs.goBack/goForward apply
// Chromium's history-manipulation intervention: they skip entries created without a user gesture,
// which every agent navigation is, so after agent navigations they fail ("Cannot find a next page
// in history") or jump over the page the agent came from. The page's history steps one entry; the
// step is done when the tab's top frame moves (a new document, or a same-document entry). Where no
// script can run (an error page), the browser's own step is the fallback.
const HISTORY_STEP_WAIT_MS = 5000;

async function historyStep(tabId, delta) {
  let stop = () => {};
  const moved = new Promise((resolve) => {
    const hit = (d) => { if (d.tabId === tabId && d.frameId === 0) resolve(true); };
    const timer = setTimeout(() => resolve(false), HISTORY_STEP_WAIT_MS);
    const events = [chrome.webNavigation.onCommitted, chrome.webNavigation.onHistoryStateUpdated, chrome.webNavigation.onReferenceFragmentUpdated];
    for (const e of events) e.addListener(hit);
    stop = () => { clearTimeout(timer); for (const e of events) e.removeListener(hit); };
  });
  try {
    try {
      await chrome.scripting.executeScript({ target: { tabId }, func: (n) => history.go(n), args: [delta] });
    } catch (_) {
      await (delta < 0 ? chrome.tabs.goBack(tabId) : chrome.tabs.goForward(tabId));
      return null;
    }
    if (await moved) return null;
  } catch (refused) {
    return { error: 'no_history', message: `no ${delta < 0 ? 'previous' : 'next'} page in this tab's history (${String((refused && refused.message) || refused)})` };
  } finally {
    stop();
  }
  return { error: 'no_history', message: `no ${delta < 0 ? 'previous' : 'next'} page in this tab's history: the page did not move within ${HISTORY_STEP_WAIT_MS / 1000} s` };
}

// Chrome allows two captureVisibleTab calls per second (MAX_CAPTURE_VISIBLE_TAB_CALLS_PER_SECOND):
// captures are spaced 550 ms apart, one after another, so agents asking at once (or a screen
// recording beside a visual diff) wait their turn instead of failing on the quota.
const CAPTURE_SPACING_MS = 550;
let captureChain = Promise.resolve();
let lastCaptureAt = 0;

function captureVisible(windowId, options) {
  const run = async () => {
    const wait = lastCaptureAt + CAPTURE_SPACING_MS - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    try {
      return await chrome.tabs.captureVisibleTab(windowId, options);
    } finally {
      lastCaptureAt = Date.now();
    }
  };
  const result = captureChain.then(run, run);
  captureChain = result.catch(() => {});
  return result;
}

async function screenshot(cmd) {
  const params = cmd.params || {};
  const tab = await targetTab(cmd);
  if (!tab.active) {
    // A frame of a screen recording never pulls the tab to the front: the frame is skipped.
    if (params.if_active) return { error: 'tab_not_visible', message: `tab ${tab.id} is not the visible tab of its window` };
    // Bringing a background tab to the front shows the agent what the user does not: pilot only.
    await requirePilot(`a screenshot of tab ${tab.id}, which is not the visible tab of its window,`);
    await chrome.tabs.update(tab.id, { active: true });
  }
  const format = params.format === 'png' ? 'png' : 'jpeg';
  const dataUrl = await captureVisible(tab.windowId, { format, quality: Math.min(Math.max(Number(params.quality) || 80, 10), 100) });
  // What the agent sees inline (MCP image content) when the screenshot itself is too large.
  const preview = await previewOf(dataUrl).catch(() => null);
  const resp = await daemonFetch('/screenshots', {
    body: Object.assign({ data_url: dataUrl, url: redactUrl(tab.url), query_id: cmd.id, correlation_id: cmd.correlation_id || '' },
      preview && dataUrl.length + preview.length < 4.5 * 1024 * 1024 ? { preview_data_url: preview } : {}),
    timeout: 15000,
  });
  if (!resp.ok) return { error: 'upload_failed', message: `POST /screenshots answered HTTP ${resp.status}` };
  return { __answered: true };
}

async function linkHealth(cmd) {
  const params = cmd.params || {};
  const tab = await targetTab(cmd);
  const limit = Math.max(1, Math.min(Number(params.limit) || 50, LIMITS.links));
  const [{ result: found }] = await chrome.scripting.executeScript({
    target: { tabId: tab.id },
    func: (max) => Array.from(new Set(Array.from(document.links).map((a) => a.href.split('#')[0])))
      .filter((u) => /^https?:/.test(u)).slice(0, max),
    args: [limit * 4],
  });
  // The extension fetches with its own privileges (no CORS, every host): never into the private
  // network or this machine, unless the tracked page itself is served from there.
  const pagePrivate = isPrivateHost(tab.url);
  const all = Array.isArray(found) ? found.filter((u) => typeof u === 'string' && u.length <= 8192) : [];
  const refused = pagePrivate ? [] : all.filter((u) => isPrivateHost(u));
  const urls = all.filter((u) => pagePrivate || !isPrivateHost(u)).slice(0, limit);
  const check = async (url) => {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), 5000);
    const started = Date.now();
    try {
      let resp = await fetch(url, { method: 'HEAD', redirect: pagePrivate ? 'follow' : 'manual', signal: ctrl.signal, credentials: 'omit', cache: 'no-store' });
      if (resp.status === 405 || resp.status === 501) resp = await fetch(url, { method: 'GET', redirect: pagePrivate ? 'follow' : 'manual', signal: ctrl.signal, credentials: 'omit', cache: 'no-store' });
      return { url, status: resp.status, ok: resp.ok, redirected: resp.redirected, duration: Date.now() - started };
    } catch (e) {
      return { url, status: 0, ok: false, error: ctrl.signal.aborted ? 'timeout' : String((e && e.message) || e), duration: Date.now() - started };
    } finally {
      clearTimeout(timer);
    }
  };
  const links = [];
  for (let i = 0; i < urls.length; i += 6) links.push(...await Promise.all(urls.slice(i, i + 6).map(check)));
  return {
    page_url: tab.url, checked: links.length, broken: links.filter((l) => !l.ok).length, links,
    ...(refused.length ? { skipped_private: refused.slice(0, 20), skipped_private_count: refused.length } : {}),
  };
}

async function tabsList() {
  const s = await loadSettings();
  const tabs = await chrome.tabs.query({});
  return {
    tracked_tab_id: s.trackedTabId || 0,
    tabs: tabs.map((t) => ({ id: t.id, window_id: t.windowId, url: t.url, title: t.title, active: t.active, status: t.status, tracked: isTrackedTab(s, t.id) })),
  };
}

async function dispatch(cmd) {
  const s = await loadSettings();
  const params = cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  const type = cmd.type;
  const needsPilot = PILOT_COMMANDS.has(type) && !(type === 'dom_action' && READ_ONLY_DOM_ACTIONS.has(params.action));
  if (needsPilot && !s.pilotEnabled) {
    return { error: 'pilot_disabled', message: PILOT_OFF_MESSAGE };
  }
  switch (type) {
    case 'tabs': return tabsList();
    case 'browser_action': return browserAction(cmd);
    case 'execute': return execute(cmd);
    case 'screenshot': return screenshot(cmd);
    case 'link_health': return linkHealth(cmd);
    case 'visual_diff': return visualDiff(params);
    case 'draw_mode': return drawMode(cmd);
    case 'annotations': return listAnnotations(params);
    case 'annotation_detail': return annotationDetail(params);
    case 'page_info': {
      const tab = await targetTab(cmd);
      const info = await inTab(tab.id, 'page_info', params);
      return Object.assign({ tab_id: tab.id, tracked: true }, info);
    }
    case 'dom': case 'a11y': case 'dom_action': case 'highlight': case 'subtitle': case 'waterfall':
    case 'state_capture': case 'computed_styles': case 'form_discovery': {
      const tab = await targetTab(cmd);
      // AI-driven actions are recorded by the daemon (source:"ai", with the client that asked),
      // which knows who asked; recording them here too would list each one twice.
      return inTab(tab.id, type, params);
    }
    default:
      return { error: 'unknown_query_type', message: `unknown command type ${type}` };
  }
}

initAnnotations({ loadSettings, inTab, extLog: (...args) => extLog(...args) });

// ------------------------------------------------------------------ messages from content scripts and the popup
chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  if (!msg || typeof msg.type !== 'string') return false;
  if (msg.type === 'gasoline:annotation') {
    if (!sender.tab || !msg.annotation || typeof msg.annotation !== 'object') return false;
    if (JSON.stringify(msg.annotation).length > 64 * 1024) return false;
    storeAnnotation(msg.annotation, sender.tab);
    return false;
  }
  // Everything below is for the extension's own pages (popup, options), never for content scripts.
  if (!sender.url || !sender.url.startsWith(chrome.runtime.getURL(''))) return false;
  if (msg.type === 'gasoline:status') {
    loadSettings().then(() => sendResponse(statusSnapshot()));
    return true;
  }
  if (msg.type === 'gasoline:track') {
    (msg.tracked ? addTrackedTab(msg.tabId) : untrackTab(msg.tabId)).then(() => sendResponse({ ok: true }), (e) => sendResponse({ ok: false, error: String(e) }));
    return true;
  }
  if (msg.type === 'gasoline:pair') {
    pairWith(msg.fingerprint).then(sendResponse, (e) => sendResponse({ ok: false, error: String((e && e.message) || e) }));
    return true;
  }
  if (msg.type === 'gasoline:unpair') {
    chrome.storage.local.remove(STORAGE_KEYS.daemonIdentity).then(() => sendResponse({ ok: true }));
    return true;
  }
  if (msg.type === 'gasoline:health') {
    refreshHealth().then(() => sendResponse({ health: status.health, status: statusSnapshot() }));
    return true;
  }
  return false;
});

// The user confirmed the fingerprint the popup showed: pin the key the daemon offers now, if it is
// still the one with that fingerprint.
async function pairWith(fingerprint) {
  const offer = await pairing.offered();
  if (!offer) return { ok: false, error: 'the server at this port does not offer Gasoline pairing' };
  if (offer.fingerprint !== fingerprint) return { ok: false, error: `the daemon now offers ${offer.fingerprint}, not ${fingerprint}: compare again` };
  const s = await loadSettings();
  await chrome.storage.local.set({
    [STORAGE_KEYS.daemonIdentity]: { key: offer.key, fingerprint: offer.fingerprint, paired_at: new Date().toISOString(), server_url: s.serverUrl },
  });
  return { ok: true, fingerprint: offer.fingerprint };
}

// ------------------------------------------------------------------ lifecycle
function ensureAlive() {
  chrome.alarms.get(KEEPALIVE_ALARM).then((a) => {
    if (!a) chrome.alarms.create(KEEPALIVE_ALARM, { periodInMinutes: 0.5 });
  });
  syncLoop();
}

// Verdicts for every page, and pulls from tracked ones (lib/pages.js).
// What the pages handed over, by kind, and how much of it came from a tab no longer tracked by the
// time it arrived (status snapshot: where capture stopped, when a page's data does not arrive).
const pulled = {};
let pulledUntracked = 0;
const pageCapture = installPageCapture({
  loadSettings,
  onWarning: (tabId, message) => extLog('warn', `tab ${tabId}: ${message}`, 'capture'),
  onItems: (tabId, items, dropped) => {
    for (const item of items) pulled[item && item.kind] = (pulled[item && item.kind] || 0) + 1;
    loadSettings().then((s) => {
      if (!isTrackedTab(s, tabId)) { pulledUntracked += items.length; return; }
      if (dropped) extLog('warn', `tab ${tabId} produced more than its buffer holds between two pulls: dropped ${dropped} oldest item(s)`, 'capture');
      for (const item of items) {
        if (item && item.payload && typeof item.payload === 'object') captureItem(item.kind, item.payload, { id: tabId });
      }
    });
  },
});
installLoadTracking();
// Failed loads the page's hooks cannot see (an <img> or script 404, a blocked stylesheet): lib/failures.js.
installLoadFailures((tabId, entry) => {
  loadSettings().then((s) => {
    if (!isTrackedTab(s, tabId) || !s.captureNetwork) return;
    captureItem('log', entry, { id: tabId });
    captureItem('network_body', { ts: entry.ts, url: entry.url, method: entry.method, status: entry.status,
      content_type: '', duration: 0, initiator: entry.resource_type, error: entry.error }, { id: tabId });
  });
});
// The CDP hub relay's link to the daemon (lib/cdp.js, docs/relay.md).
initCdpLink({ loadSettings, pairing, log: (level, message, category = 'cdp') => extLog(level, message, category) });

chrome.alarms.onAlarm.addListener((alarm) => { if (alarm.name === KEEPALIVE_ALARM) ensureAlive(); });
chrome.runtime.onStartup.addListener(ensureAlive);
chrome.runtime.onInstalled.addListener(ensureAlive);
ensureAlive();
