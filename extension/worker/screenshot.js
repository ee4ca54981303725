// Gasoline — the `screenshot` command: the tab's visible area, uploaded to the daemon
// (POST /screenshots) with a scaled preview agents see inline when the image itself is too large.

import { targetTab, requirePilot } from '../lib/policy.js';
import { previewOf } from '../lib/visual.js';
import { redactUrl } from '../lib/redact.js';
import { daemonFetch } from './daemon.js';

// Chrome allows two captureVisibleTab calls per second (MAX_CAPTURE_VISIBLE_TAB_CALLS_PER_SECOND):
// captures are spaced 550 ms apart, one after another, so agents asking at once (or a screen
// recording beside a visual diff) wait their turn instead of failing on the quota.
const CAPTURE_SPACING_MS = 550;
// The captures in turn: the last one queued, and when the last one ended.
const captures = { chain: Promise.resolve(), lastAt: 0 };

/** `chrome.tabs.captureVisibleTab`, spaced CAPTURE_SPACING_MS after the previous capture. */
export function captureVisible(windowId, options) {
  const run = async () => {
    const wait = captures.lastAt + CAPTURE_SPACING_MS - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    try {
      return await chrome.tabs.captureVisibleTab(windowId, options);
    } finally {
      captures.lastAt = Date.now();
    }
  };
  const result = captures.chain.then(run, run);
  captures.chain = result.catch(() => {});
  return result;
}

export async function screenshot(cmd) {
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
