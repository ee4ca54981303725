// Gasoline — the worker's own log: warnings and errors the daemon shows as extension logs. Each
// /sync carries what waits here; what the daemon received is dropped (worker/sync.js).

const MAX_ENTRIES = 100;

// The entries not yet delivered, oldest first (at most MAX_ENTRIES: the oldest go first).
const log = { entries: [] };

export function extLog(level, message, category = 'general', data = undefined) {
  log.entries.push({ timestamp: new Date().toISOString(), level, message, source: 'background', category, data });
  if (log.entries.length > MAX_ENTRIES) log.entries.shift();
}

/** A copy of the entries waiting for delivery. */
export function pendingLogs() {
  return log.entries.slice();
}

/** The first `count` entries (what a /sync carried) were delivered. */
export function logsDelivered(count) {
  log.entries.splice(0, Math.min(log.entries.length, count));
}
