// Gasoline — the connection status the popup shows and the action badge. The /sync loop
// (worker/sync.js) reports each poll's outcome here, the capture queues the daemon's entry count.

const status = {
  connected: false,
  consecutiveFailures: 0,
  lastSyncAt: null,
  lastError: '',
  entries: null,        // the daemon's log entry count (capture answers, /health)
  health: null,         // the last /health answer
  captureOverrides: {}, // capture settings an agent set (/sync answer)
  serverVersion: '',
};

/** The status (read-only for other modules: they change it through the functions below). */
export function connection() {
  return status;
}

/** Whether the last poll failed or none has succeeded yet. */
export function wasDown() {
  return !status.connected || status.consecutiveFailures > 0 || !status.lastSyncAt;
}

/** A /sync answered (`data`: its parsed body). */
export function syncSucceeded(data, now = Date.now()) {
  status.connected = true;
  status.consecutiveFailures = 0;
  status.lastSyncAt = now;
  status.lastError = '';
  status.serverVersion = data.server_version || '';
  status.captureOverrides = (data.capture_overrides && typeof data.capture_overrides === 'object') ? data.capture_overrides : {};
}

/**
 * A /sync failed with `error`: disconnected after two failures in a row, or at once when the daemon
 * is not the paired one (`notPaired`: the error is a lib/pairing.js NotPaired).
 */
export function syncFailed(error, notPaired = false) {
  status.consecutiveFailures += 1;
  status.lastError = String((error && error.message) || error);
  if (status.consecutiveFailures >= 2 || notPaired) status.connected = false;
}

/** Another daemon (the server URL or the pinned identity changed): not connected until it answers. */
export function disconnected() {
  status.connected = false;
}

/** The daemon's log entry count, from a capture answer. */
export function noteEntries(count) {
  status.entries = count;
  updateBadge();
}

/** The daemon's /health answer. */
export function noteHealth(health) {
  status.health = health;
  if (health && health.logs && typeof health.logs.entries === 'number') status.entries = health.logs.entries;
}

/** The badge for a status: '!' in red after two failed polls, else the entry count (1k, 2k, ...). */
export function badgeOf(st) {
  if (!st.connected) return { text: st.consecutiveFailures >= 2 ? '!' : '', color: '#c0392b' };
  if (typeof st.entries === 'number') {
    return { text: st.entries >= 1000 ? Math.floor(st.entries / 1000) + 'k' : String(st.entries), color: '#f28c28' };
  }
  return { text: '', color: '#888888' };
}

export function updateBadge() {
  const { text, color } = badgeOf(status);
  chrome.action.setBadgeText({ text }).catch(() => {});
  chrome.action.setBadgeBackgroundColor({ color }).catch(() => {});
}
