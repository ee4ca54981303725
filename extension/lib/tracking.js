// Gasoline — which tabs are tracked: the user's choices (popup), kept in chrome.storage.local, and
// their upkeep when tabs close or load. `installTracking` registers the tab listeners once, at the
// service worker's top level (background.js).

import { STORAGE_KEYS, isTrackedTab } from './settings.js';

let loadSettings = null;

// Tabs that had finished loading when they became tracked: their load-time errors were never
// captured. Kept (chrome.storage.session) until the tab's top frame navigates again; the popup
// offers the reload and /sync tells the daemon (`loaded_before_tracking`), which tells agents.
const LOADED_BEFORE_KEY = 'gasolineLoadedBeforeTracking';

export async function loadedBeforeTracking() {
  const got = await chrome.storage.session.get(LOADED_BEFORE_KEY).catch(() => ({}));
  return Array.isArray(got[LOADED_BEFORE_KEY]) ? got[LOADED_BEFORE_KEY] : [];
}

async function noteLoadedBefore(tab) {
  if (!tab || tab.status !== 'complete' || !/^(https?|file):/i.test(tab.url || '')) return;
  const ids = await loadedBeforeTracking();
  if (!ids.includes(tab.id)) await chrome.storage.session.set({ [LOADED_BEFORE_KEY]: [...ids, tab.id].slice(-50) });
}

async function forgetLoadedBefore(tabId) {
  const ids = await loadedBeforeTracking();
  if (ids.includes(tabId)) await chrome.storage.session.set({ [LOADED_BEFORE_KEY]: ids.filter((id) => id !== tabId) });
}

export async function setPrimaryTab(tab) {
  await chrome.storage.local.set({ [STORAGE_KEYS.trackedTabId]: tab.id, [STORAGE_KEYS.trackedTabUrl]: tab.url || '', [STORAGE_KEYS.trackedTabTitle]: tab.title || '' });
}

export async function addTrackedTab(tabId) {
  const s = await loadSettings();
  if (s.trackedTabId === tabId || s.extraTabs.includes(tabId)) return undefined;
  const tab = await chrome.tabs.get(tabId);
  await noteLoadedBefore(tab);
  if (!s.trackedTabId) return setPrimaryTab(tab);
  return chrome.storage.local.set({ [STORAGE_KEYS.extraTabs]: [...s.extraTabs, tabId] });
}

export async function untrackTab(tabId) {
  const s = await loadSettings();
  if (s.trackedTabId === tabId) {
    const [next, ...rest] = s.extraTabs;
    const nextTab = next ? await chrome.tabs.get(next).catch(() => null) : null;
    await chrome.storage.local.set({
      [STORAGE_KEYS.trackedTabId]: nextTab ? nextTab.id : 0,
      [STORAGE_KEYS.trackedTabUrl]: nextTab ? nextTab.url : '',
      [STORAGE_KEYS.trackedTabTitle]: nextTab ? nextTab.title : '',
      [STORAGE_KEYS.extraTabs]: rest,
    });
  } else if (s.extraTabs.includes(tabId)) {
    await chrome.storage.local.set({ [STORAGE_KEYS.extraTabs]: s.extraTabs.filter((id) => id !== tabId) });
  }
}

export function installTracking(settingsLoader) {
  loadSettings = settingsLoader;
  chrome.tabs.onRemoved.addListener((tabId) => { forgetLoadedBefore(tabId); loadSettings().then((s) => { if (isTrackedTab(s, tabId, false)) untrackTab(tabId); }); });
  // A new load of the top frame is captured from its start: nothing is missing any more.
  chrome.webNavigation.onCommitted.addListener((d) => { if (d.frameId === 0) forgetLoadedBefore(d.tabId); });

  // trackedTabUrl / trackedTabTitle follow the tracked tab once its page has loaded (and on later
  // title or same-document URL changes), not while it loads: a storage write then costs the load
  // time, and reaches every extension context as a change event.
  chrome.tabs.onUpdated.addListener((tabId, info, tab) => {
    if (tab.status !== 'complete' || !(info.status === 'complete' || info.url || info.title)) return;
    loadSettings().then((s) => {
      if (s.trackedTabId !== tabId) return;
      const patch = {};
      if (tab.url && tab.url !== s.trackedTabUrl) patch[STORAGE_KEYS.trackedTabUrl] = tab.url;
      if (tab.title && tab.title !== s.trackedTabTitle) patch[STORAGE_KEYS.trackedTabTitle] = tab.title;
      if (Object.keys(patch).length) chrome.storage.local.set(patch);
    });
  });
}
