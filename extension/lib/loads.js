// Gasoline — which tabs are loading a page right now, so the worker's own traffic can wait.
//
// Everything the worker sends (capture batches to the daemon, the /sync poll) costs the browser
// process, the network service and the daemon some CPU. On a small machine, work like that during a
// page load pushes the load out (bench/extension_overhead.py: a batch POST that lands in the middle of
// a ~35 ms load costs it several ms). So while any tab's top frame is loading, the worker holds what
// it would send, and sends it the moment the last load completes; never longer than the caller's
// limit, so a page whose load hangs on an image, or a browser that is always loading something,
// delays delivery by at most that much.
//
// A load begins at webNavigation.onBeforeNavigate and ends at onCompleted or onErrorOccurred of the
// top frame (or when the tab closes). A load that never reports its end stops counting after
// STALE_MS. A worker that (re)starts mid-load simply does not know of it.

const STALE_MS = 10000;

const loading = new Map(); // tabId -> ms the load began
let waiters = [];

function release() {
  if (busy()) return;
  const ready = waiters;
  waiters = [];
  for (const w of ready) w();
}

function busy() {
  const now = Date.now();
  for (const [tabId, since] of loading) {
    if (now - since > STALE_MS) loading.delete(tabId);
  }
  return loading.size > 0;
}

/** Resolves when no top frame is loading, or after `maxWaitMs` at the latest. */
export function pageLoadsSettled(maxWaitMs) {
  if (!busy()) return Promise.resolve();
  return new Promise((resolve) => {
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      waiters = waiters.filter((w) => w !== finish);
      resolve();
    };
    const timer = setTimeout(finish, maxWaitMs);
    waiters.push(finish);
  });
}

export function installLoadTracking() {
  chrome.webNavigation.onBeforeNavigate.addListener((d) => {
    if (d.frameId === 0) loading.set(d.tabId, Date.now());
  });
  const ended = (d) => {
    if (d.frameId !== 0 || !loading.has(d.tabId)) return;
    loading.delete(d.tabId);
    release();
  };
  chrome.webNavigation.onCompleted.addListener(ended);
  chrome.webNavigation.onErrorOccurred.addListener(ended);
  chrome.tabs.onRemoved.addListener((tabId) => {
    if (loading.delete(tabId)) release();
  });
}
