// Gasoline — the command bookkeeping of the /sync loop, kept in chrome.storage.session so that a
// worker Chrome stopped and started again neither loses a result nor runs a command twice:
// the last command id acknowledged, the ids already run, the daemon process they came from, and
// the results not yet delivered.

export const SYNC_STATE_KEY = 'gasolineSyncState';
export const SYNC_RESULTS_KEY = 'gasolineSyncResults';
// How many command ids are remembered as run.
export const SEEN_LIMIT = 500;

// `state`: {lastAck, seen: [ids], results: [command results not yet delivered], daemonInstance},
// read from storage on first use.
const held = { state: null };

export async function loadSyncState() {
  if (!held.state) {
    const got = await chrome.storage.session.get([SYNC_STATE_KEY, SYNC_RESULTS_KEY]);
    held.state = Object.assign({ lastAck: null, seen: [], results: [] }, got[SYNC_STATE_KEY] || {});
    if (Array.isArray(got[SYNC_RESULTS_KEY])) held.state.results = got[SYNC_RESULTS_KEY];
  }
  return held.state;
}

/** What stands in for results that could not be kept (the session storage holds 10 MB). */
export function tooLargeResults(results, error) {
  return results.map((r) => ({
    id: r.id, correlation_id: r.correlation_id, status: 'error', error: 'result_too_large',
    result: { error: 'result_too_large', message: `the result could not be kept for delivery: ${String((error && error.message) || error)}` },
  }));
}

// The de-duplication state (acked and seen ids) is written on its own, first, so a results write
// that fails (chrome.storage.session holds 10 MB) can never lose it: a restarted worker then
// reports the failure instead of running a command twice.
export async function saveSyncState() {
  const st = held.state;
  const { lastAck, seen, results, daemonInstance } = st;
  await chrome.storage.session.set({ [SYNC_STATE_KEY]: { lastAck, seen, results: [], daemonInstance } }).catch(() => {});
  try {
    await chrome.storage.session.set({ [SYNC_RESULTS_KEY]: results });
  } catch (e) {
    st.results = tooLargeResults(results, e);
    await chrome.storage.session.set({ [SYNC_RESULTS_KEY]: st.results }).catch(() => {});
  }
}

/** Keeps a command's result until a /sync delivers it. */
export async function addResult(result) {
  const st = await loadSyncState();
  st.results.push(result);
  await saveSyncState();
}

/** The /sync that carried `sent` (results) was answered: they are delivered. */
export function resultsDelivered(st, sent) {
  if (!sent.length) return;
  const ids = new Set(sent.map((r) => r.id));
  st.results = st.results.filter((r) => !ids.has(r.id));
}

/**
 * The commands of a /sync answer `data` that are new: each one acknowledged, those already run
 * skipped. Command ids restart at q-1 with every daemon process: another process (a restart, told
 * by `data.daemon_instance`) must not have its first commands taken for ones this worker already ran.
 */
export function acceptCommands(st, data) {
  if (typeof data.daemon_instance === 'string' && data.daemon_instance !== st.daemonInstance) {
    if (st.daemonInstance) { st.seen = []; st.lastAck = null; }
    st.daemonInstance = data.daemon_instance;
  }
  const fresh = [];
  const commands = Array.isArray(data.commands) ? data.commands : [];
  for (const cmd of commands) {
    if (!cmd || typeof cmd.id !== 'string') continue;
    st.lastAck = cmd.id;
    if (st.seen.includes(cmd.id)) continue;
    st.seen.push(cmd.id);
    if (st.seen.length > SEEN_LIMIT) st.seen.splice(0, st.seen.length - SEEN_LIMIT);
    fresh.push(cmd);
  }
  return fresh;
}
