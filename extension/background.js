// Gasoline — MV3 service worker (an ES module): wires the worker's modules together and registers
// every listener at top level, as MV3 requires (docs/extension.md, "Layout").
//
// * worker/capture.js + worker/queues.js: what the page hooks of tracked tabs captured
//   (lib/pages.js), tagged with its tab, redacted and sent to the daemon in protocol-sized batches
//   (retry with back-off; while the daemon is down a bounded buffer per route drops the oldest
//   items and counts them).
// * worker/sync.js + worker/syncstate.js: the /sync loop (heartbeat + long poll + command channel;
//   extension-protocol.md §3). Chrome can stop the worker at any time: an alarm wakes it every
//   30 s, the loop restarts at top level, and the command bookkeeping (acks, seen ids, unsent
//   results) lives in chrome.storage.session so a restart neither loses results nor runs a command
//   twice.
// * worker/commands.js + worker/runner.js: carries out commands (content/commands.js holds the
//   content-side handlers; worker/tabs.js, screenshot.js, links.js the worker-side ones).
// * worker/daemon.js: HTTP to the daemon, only once it proved it is the paired one (lib/pairing.js).
// * worker/devtools.js: the agent's debugger session on a tracked tab (real input, dialogs,
//   emulation; tabs a tracked tab opens are tracked too).
// * worker/messages.js: the popup's, the options page's and the overlay's messages.
// * worker/domwatch.js: the agents' DOM watches (dom_change) in the tracked tabs.

import { extensionKey, b64u } from './lib/pairing.js';
import { initPolicy } from './lib/policy.js';
import { installTracking } from './lib/tracking.js';
import { initAnnotations } from './lib/annotations.js';
import { installLoadTracking } from './lib/loads.js';
import { initCdpLink } from './lib/cdp.js';
import { loadSettings, reloadSettings, daemonChanged, trackingChanged, reportedSettingsChanged } from './worker/config.js';
import { pairing } from './worker/daemon.js';
import { extLog } from './worker/log.js';
import { disconnected } from './worker/status.js';
import { queues, installCapture, installFailedLoads } from './worker/capture.js';
import { inTab } from './worker/tabs.js';
import { syncLoop, wakeSync, sendExtensionStatus } from './worker/sync.js';
import { installMessages } from './worker/messages.js';
import { installDevtools } from './worker/devtools.js';
import { installDomWatch } from './worker/domwatch.js';

const KEEPALIVE_ALARM = 'gasoline-keepalive';

initPolicy(loadSettings);
installTracking(loadSettings);

chrome.storage.onChanged.addListener((changes, area) => {
  if (area !== 'local') return;
  reloadSettings().then(({ before, now }) => {
    if (daemonChanged(before, now)) {
      pairing.reset();
      disconnected();
      queues.retryNow();
      wakeSync();
    }
    if (trackingChanged(before, now)) {
      sendExtensionStatus();
      wakeSync();
    } else if (reportedSettingsChanged(before, now)) {
      wakeSync();
    }
  });
});

// `gasoline browser` reads this extension's PUBLIC key over its private DevTools pipe (only the
// process that started the browser holds that pipe) and grants it to the daemon for the launch
// (docs/browser.md, "The launched extension's key"). The private key never leaves the CryptoKey.
globalThis.gasolineExtensionPublicKey = () => extensionKey().then((k) => ({ key: b64u(k.raw), fingerprint: k.fingerprint }));

initAnnotations({ loadSettings, inTab, extLog: (...args) => extLog(...args) });
installMessages();

// ------------------------------------------------------------------ lifecycle
function ensureAlive() {
  chrome.alarms.get(KEEPALIVE_ALARM).then((a) => {
    if (!a) chrome.alarms.create(KEEPALIVE_ALARM, { periodInMinutes: 0.5 });
  });
  syncLoop();
}

installCapture();
// The agent's debugger session: dialogs, real input, emulation, tabs a tracked tab opens.
installDevtools();
installDomWatch();
installLoadTracking();
installFailedLoads();
// The CDP hub relay's link to the daemon (lib/cdp.js, docs/relay.md).
initCdpLink({ loadSettings, pairing, log: (level, message, category = 'cdp') => extLog(level, message, category) });

chrome.alarms.onAlarm.addListener((alarm) => { if (alarm.name === KEEPALIVE_ALARM) ensureAlive(); });
chrome.runtime.onStartup.addListener(ensureAlive);
chrome.runtime.onInstalled.addListener(ensureAlive);
ensureAlive();
