// Gasoline — commands that work on tabs: the in-page command runner (content/commands.js, injected
// on demand), the list of tabs, and browser_action (navigate, refresh, back/forward, new, switch
// and close tabs).

import { isTrackedTab } from '../lib/settings.js';
import { targetTab, checkUrl, agentsMayTrack, isTracked } from '../lib/policy.js';
import { setPrimaryTab, addTrackedTab } from '../lib/tracking.js';
import { loadSettings } from './config.js';

/** Runs command `type` in tab `tabId`'s isolated world (content/commands.js, axe-core for a11y). */
export async function inTab(tabId, type, params) {
  const [{ result: ready }] = await chrome.scripting.executeScript({ target: { tabId }, func: () => !!globalThis.__gasolineCommands });
  if (!ready) await chrome.scripting.executeScript({ target: { tabId }, files: ['content/selectors.js', 'content/snapshot.js', 'content/commands.js'] });
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

export async function browserAction(cmd) {
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
      // A tracked tab (e.g. one a tracked tab opened: worker/devtools.js) may become the primary
      // one without the opt-in: that does not widen what is tracked.
      if ((mayTrack || await isTracked(id)) && params.track !== false) await setPrimaryTab(tab);
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

export async function tabsList() {
  const s = await loadSettings();
  const tabs = await chrome.tabs.query({});
  return {
    tracked_tab_id: s.trackedTabId || 0,
    tabs: tabs.map((t) => ({ id: t.id, window_id: t.windowId, url: t.url, title: t.title, active: t.active, status: t.status, tracked: isTrackedTab(s, t.id), opener_tab_id: t.openerTabId || undefined })),
  };
}
