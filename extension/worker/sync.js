// Gasoline — the /sync loop (extension-protocol.md §3): heartbeat, long poll and command channel in
// one request. Each poll carries the settings, the worker's own log, the commands in progress and
// the results not yet delivered; its answer (sealed by the paired daemon, or not read at all)
// brings new commands (worker/commands.js). Chrome may stop the worker at any time: an alarm
// restarts the loop (background.js), and the command bookkeeping lives in chrome.storage.session
// (worker/syncstate.js). After each poll the loop publishes the popup's status (`gasolineStatus`).
//
// Commands at interactive speed (the push path): the daemon holds a poll until a command is
// queued and asks for the next poll at once (`next_poll_ms` 0), so one poll is always waiting and
// a queued command reaches the worker the moment it is queued. A result, or a settings change
// (the tracked tab or its page, the pilot), does not wait for that held poll: it goes out at once
// on a sync of its own (a *push*: `hold: false`, the settings, the results, no worker log),
// answered at once, which also brings any command queued meanwhile. Every sync says
// `command_push: true`, so the daemon holds the next poll at once after handing out commands.

import { DEFAULT_SERVER_URL, isTrackedTab } from '../lib/settings.js';
import { NotPaired } from '../lib/pairing.js';
import { redactUrl } from '../lib/redact.js';
import { pageLoadsSettled } from '../lib/loads.js';
import { loadedBeforeTracking } from '../lib/tracking.js';
import { loadSettings, currentSettings, tracksAnything } from './config.js';
import { daemonFetch, pairing, VERSION, EXT_SESSION_ID, HEALTH_TIMEOUT_MS } from './daemon.js';
import { extLog, pendingLogs, logsDelivered } from './log.js';
import { connection, wasDown, syncSucceeded, syncFailed, noteHealth, updateBadge } from './status.js';
import { queues, captureStatus } from './capture.js';
import { commands } from './commands.js';
import { applyDomWatches } from './domwatch.js';
import { loadSyncState, saveSyncState, addResult, resultsDelivered, acceptCommands } from './syncstate.js';

const SYNC_TIMEOUT_MS = 8000;
// While a tab loads a page the poll waits (lib/loads.js) at most this long, unless results wait.
const SYNC_LOAD_HOLD_MS = 1000;
// The daemon counts the extension gone after 10 s without a sync and holds a poll up to 5 s.
export const IDLE_POLL_MS = 3000;
const HEALTH_EVERY_MS = 10000;

// `running`: a loop is under way; `wake`: cuts its sleep short; `lastHealthAt`: when /health was
// last read; `lastStatusText`: the status last published; `woken`: a wake came mid-poll (the next
// sleep is skipped); `pushing`: a push is in flight,
// `pushAgain`: something came while it was (one more push follows); `sending`: the ids of the
// results some sync in flight carries (no sync sends a result another one carries); `pushed`:
// results delivered by pushes.
const loop = { running: false, wake: null, woken: false, lastHealthAt: 0, lastStatusText: '', pushing: false, pushAgain: false, sending: new Set(), pushed: 0 };

/**
 * Tell the daemon now (a result is ready, the settings changed): the loop's next poll when it
 * sleeps, else a push (its poll may be held by the daemon for 5 s). Before the loop ever ran
 * there is nothing to push to.
 */
export function wakeSync() {
  if (loop.wake) loop.wake();
  else {
    loop.woken = true; // mid-poll: the next sleep is skipped, so nothing waits a full delay
    if (loop.running) pushNow();
  }
}

export function sleepOrWake(ms) {
  if (loop.woken) { loop.woken = false; return Promise.resolve(); }
  return new Promise((resolve) => {
    const timer = setTimeout(() => { loop.wake = null; resolve(); }, ms);
    loop.wake = () => { clearTimeout(timer); loop.wake = null; resolve(); };
  });
}

/** The wait before the next poll the daemon asked for (`next_poll_ms`, at most 30 s), else 1 s. */
export function nextPollMs(data) {
  const next = Number(data.next_poll_ms);
  return Number.isFinite(next) && next >= 0 ? Math.min(next, 30000) : 1000;
}

/**
 * The wait after the `failures`-th failed poll in a row: 1, 2, 4, then 5 s; at most 2 s while the
 * user has not paired yet (`notPairedState` 'unpaired': the popup's "Pair" should take effect soon).
 */
export function failureDelayMs(failures, notPairedState = '') {
  const delay = Math.min(1000 * 2 ** Math.min(failures - 1, 3), 5000);
  return notPairedState === 'unpaired' ? Math.min(delay, 2000) : delay;
}

/**
 * The wait before the next poll: an idle worker (nothing tracked, pilot off, nothing running or
 * waiting) polls at most every IDLE_POLL_MS; results waiting go out within 50 ms.
 */
export function pollDelayMs(delay, { idle, connected, resultsWaiting }) {
  if (idle && connected) delay = Math.max(delay, IDLE_POLL_MS);
  if (resultsWaiting && connected) delay = Math.min(delay, 50);
  return delay;
}

/**
 * A command's result: kept until a sync delivers it. It starts one at once: the loop's next poll
 * when the loop sleeps, else a push (the loop's poll may be held by the daemon for 5 s).
 */
async function deliverResult(result) {
  if (result) await addResult(result);
  wakeSync();
}

/**
 * Sends pushes until nothing new is left to push (one push at a time): a push is a sync the
 * daemon answers at once (`hold: false`) with the settings, the results no other sync in flight
 * carries, the commands in progress and the ack; never the worker's log (the loop's polls carry
 * that, once).
 */
export async function pushNow() {
  if (loop.pushing) { loop.pushAgain = true; return; }
  loop.pushing = true;
  try {
    do {
      loop.pushAgain = false;
      await syncOnce({ push: true });
    } while (loop.pushAgain);
  } catch (_) {
    // Not delivered: results stay kept, and the loop's next poll carries them and the settings.
  } finally {
    loop.pushing = false;
  }
}

/** The `settings` of a SyncRequest. */
async function syncSettings(s, dropped) {
  const tab = s.trackedTabId ? await chrome.tabs.get(s.trackedTabId).catch(() => null) : null;
  return {
    pilot_enabled: s.pilotEnabled,
    tracking_enabled: tracksAnything(s),
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
    // How this browser was started, so the daemon's hints fit it (`--pilot`, not the popup).
    launched: s.launchedBy,
  };
}

async function syncOnce({ push = false } = {}) {
  const s = await loadSettings();
  const st = await loadSyncState();
  // The results this sync carries are reserved at once, before anything is awaited, and stay so
  // until its answer is opened and they are forgotten (or it failed): a sync started meanwhile (a
  // push during the loop's poll) must not carry them too.
  const results = st.results.filter((r) => !loop.sending.has(r.id));
  for (const r of results) loop.sending.add(r.id);
  try {
    return await syncWith(s, st, results, push);
  } finally {
    for (const r of results) loop.sending.delete(r.id);
  }
}

async function syncWith(s, st, results, push) {
  const body = { ext_session_id: EXT_SESSION_ID, extension_version: VERSION, command_push: true };
  if (push) {
    body.hold = false;
    body.settings = await syncSettings(s, queues.dropReport().dropped);
    body.in_progress = commands.inProgress();
    await exchange(st, body, results);
    loop.pushed += results.length;
    return null;
  }
  const logs = pendingLogs();
  const ownLogs = logs.length;
  const drops = queues.dropReport();
  if (drops.warning) {
    logs.push({ timestamp: new Date().toISOString(), level: 'warn', source: 'background', category: 'capture', message: drops.warning.message, data: drops.warning.data });
  }
  body.settings = await syncSettings(s, drops.dropped);
  body.extension_logs = logs;
  body.in_progress = commands.inProgress();
  const data = await exchange(st, body, results);
  // Delivered: forget what we sent.
  logsDelivered(ownLogs);
  queues.dropsReported(drops.dropped);
  syncSucceeded(data);
  return nextPollMs(data);
}

/**
 * One /sync carrying `body` and `results`: its sealed answer opened, the results delivered, its
 * new commands queued. Returns the answer.
 */
async function exchange(st, body, results) {
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
  resultsDelivered(st, results);
  applyDomWatches(data.dom_watches).catch(() => {});
  for (const cmd of acceptCommands(st, data)) commands.enqueue(cmd, deliverResult);
  await saveSyncState();
  return data;
}

/** Reads the daemon's /health (the popup shows it; failures are reported through the polls). */
export async function refreshHealth() {
  try {
    const resp = await daemonFetch('/health', { method: 'GET', timeout: HEALTH_TIMEOUT_MS });
    if (resp.ok) noteHealth(await resp.json());
  } catch (_) { /* reported through sync failures */ }
}

/** Runs the loop, unless it runs already (an alarm, a start-up event). */
export async function syncLoop() {
  if (loop.running) return;
  loop.running = true;
  try {
    for (;;) {
      let delay;
      try {
        const down = wasDown();
        if (!(await loadSyncState()).results.length) await pageLoadsSettled(SYNC_LOAD_HOLD_MS);
        delay = await syncOnce();
        if (Date.now() - loop.lastHealthAt > HEALTH_EVERY_MS) { loop.lastHealthAt = Date.now(); refreshHealth(); }
        // The daemon is (back) there: no queue waits out a back-off earned while it was not.
        if (down) queues.retryNow();
      } catch (e) {
        const notPaired = e instanceof NotPaired;
        syncFailed(e, notPaired);
        if (notPaired && (e.state === 'mismatch' || e.state === 'refused')) extLog('error', connection().lastError, 'pairing');
        delay = failureDelayMs(connection().consecutiveFailures, notPaired ? e.state : '');
      }
      updateBadge();
      const st = await loadSyncState();
      // Idle (nothing tracked, pilot off, nothing running or waiting): no commands can run, so the
      // worker polls less often and writes the popup's status only when it changed; with no API
      // calls between polls Chrome may stop the worker, and the alarm or a tracking change wakes it.
      const s = await loadSettings();
      const idle = !tracksAnything(s) && !s.pilotEnabled && !st.results.length && !commands.busy();
      const snapshot = statusSnapshot();
      const text = JSON.stringify(snapshot);
      if (!idle || text !== loop.lastStatusText) {
        loop.lastStatusText = text;
        // Any extension API call keeps the worker alive between polls.
        await chrome.storage.session.set({ gasolineStatus: snapshot }).catch(() => {});
      }
      await sleepOrWake(pollDelayMs(delay, { idle, connected: connection().connected, resultsWaiting: st.results.length > 0 }));
    }
  } finally {
    loop.running = false;
  }
}

/** What the popup shows (and `gasolineStatus` in chrome.storage.session holds). */
export function statusSnapshot() {
  const status = connection();
  const settings = currentSettings();
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
    ext_session_id: EXT_SESSION_ID,
    version: VERSION,
    // Command results delivered by a push (not waiting for the loop's next poll).
    results_pushed: loop.pushed,
    // queues, capturing_tabs, capture_starts, pulled, dropped
    ...captureStatus(),
  };
}

/** Tells the daemon the tracked tabs changed (not waiting for the next poll). */
export async function sendExtensionStatus() {
  const s = await loadSettings();
  daemonFetch('/api/extension-status', {
    body: {
      type: 'status', tracking_enabled: tracksAnything(s),
      tracked_tab_id: s.trackedTabId || 0, tracked_tab_url: redactUrl(s.trackedTabUrl || ''), message: 'tracking changed',
      extension_connected: true, timestamp: new Date().toISOString(),
    },
    timeout: HEALTH_TIMEOUT_MS,
  }).catch(() => {});
}
