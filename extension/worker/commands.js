// Gasoline — the daemon's commands: which need the AI Web Pilot, what carries each type out, and
// the runner they queue in (worker/runner.js). worker/sync.js hands over the commands of each
// /sync answer and delivers their results.

import { visualDiff } from '../lib/visual.js';
import { targetTab, checkParams, PILOT_OFF_MESSAGE } from '../lib/policy.js';
import { execute } from '../lib/scripts.js';
import { drawMode, listAnnotations, annotationDetail } from '../lib/annotations.js';
import { loadSettings } from './config.js';
import { createCommandRunner } from './runner.js';
import { inTab, browserAction, tabsList } from './tabs.js';
import { screenshot } from './screenshot.js';
import { linkHealth } from './links.js';
import * as devtools from './devtools.js';

// Acting, and reads that expose more than the capture stream does (every tab's URL and title,
// storage, cookie names and form values, fetching with the extension's privileges).
const PILOT_COMMANDS = new Set(['execute', 'browser_action', 'dom_action', 'draw_mode', 'tabs', 'state_capture', 'link_health', 'dialog', 'emulate', 'trace']);
const READ_ONLY_DOM_ACTIONS = new Set(['get_text', 'get_value', 'get_attribute', 'list_interactive', 'wait_for']);

/** Whether a command of `type` with `params` needs the AI Web Pilot (DOM reads do not). */
export function needsPilot(type, params) {
  return PILOT_COMMANDS.has(type) && !(type === 'dom_action' && READ_ONLY_DOM_ACTIONS.has(params && params.action));
}

// dom_actions carried out with real input through the agent's debugger session (worker/devtools.js).
const INPUT_ACTIONS = new Set(['hover', 'drag', 'key_press']);
// Commands that run script in the page: a JavaScript dialog blocks them, so they are guarded.
const IN_PAGE = new Set(['snapshot', 'dom', 'a11y', 'dom_action', 'highlight', 'subtitle', 'page_info', 'state_capture', 'computed_styles', 'form_discovery', 'waterfall', 'execute']);
// Browser actions that leave the page: a dialog in their way is passed (dismissed; beforeunload accepted).
const LEAVING = new Set(['navigate', 'refresh', 'back', 'forward', 'close_tab']);

const DIALOG_NOTE = `a JavaScript dialog opened and waits for an answer: interact {what:"dialog", accept:true|false, prompt_text?}; until then other commands for this tab answer dialog_pending (navigate passes it); unanswered, it is dismissed after ${devtools.DIALOG_DEFAULT_MS / 1000} s`;

/** The answer of a command a dialog interrupted (the page's script waits for the dialog). */
function interrupted(type, params, dialog) {
  const what = type === 'dom_action' ? { action: params.action, selector: params.selector }
    : type === 'browser_action' ? { action: params.action, url: params.url } : { command: type };
  return Object.assign({ success: true, dialog, note: DIALOG_NOTE }, what);
}

/** The answer for a command that a dialog already open keeps from running. */
function blocked(dialog) {
  return { error: 'dialog_pending', message: `a ${dialog.type} dialog is open in this tab ("${dialog.message.slice(0, 200)}"): answer it first with interact {what:"dialog", accept:true|false}`, dialog };
}

/** Runs `work()` on `tab` with dialogs watched (pilot on: the agent's debugger session). */
// A session is opened by a command that needs the pilot (an action); a read (get_text, dom, ...)
// uses the tab's session when one is open but does not open one (no debugging infobar for reads).
async function watched(s, tab, type, params, work) {
  if (!s.pilotEnabled) return work();
  if (!needsPilot(type, params) && !devtools.hasSession(tab.id)) return work();
  try { await devtools.open(tab.id); } catch (_) { return work(); }  // no session (e.g. not attachable): as before
  const pending = devtools.pendingDialog(tab.id);
  if (pending) return blocked(pending);
  const result = await devtools.guard(tab.id, work);
  return result && result.__dialog ? interrupted(type, params, result.__dialog) : result;
}

const pointOf = (tabId, params) => inTab(tabId, 'point', params);

/** hover, drag and key_press with real input (CDP); targets resolved in the page (content/commands.js). */
async function inputAction(tabId, params) {
  const action = params.action;
  // (`p`, the target's point, is set below before any call.)
  const done = (extra) => Object.assign({ success: true, action, selector: params.selector }, extra,
    action !== 'key_press' && p && p.obscured_by ? { obscured_by: p.obscured_by } : {});
  if (action === 'key_press') {
    try { devtools.parseKeys(params.key || 'Enter'); } catch (e) { return { error: 'invalid_param', message: e.message }; }
  }
  const p = params.selector || action !== 'key_press' ? await pointOf(tabId, Object.assign({}, params, { acting: true, focus: action === 'key_press' })) : await inTab(tabId, 'agent_acting', { on: true });
  if (p && p.error) return p;
  try {
    if (action === 'hover') {
      await devtools.hoverAt(tabId, p.x, p.y);
      return done({ element: p.element, x: p.x, y: p.y });
    }
    if (action === 'drag') {
      const how = await devtools.dragBetween(tabId, { x: p.x, y: p.y }, p.to);
      return done({ target: params.target, element: p.element, target_element: p.to.element, html5_drag: how.html5 });
    }
    const keys = await devtools.pressKeys(tabId, params.key || 'Enter');
    return done(Object.assign({ key: keys }, p && p.element ? { element: p.element } : {}));
  } finally {
    inTab(tabId, 'agent_acting', { on: false }).catch(() => {});  // not awaited: a dialog may hold the page
  }
}

async function dispatch(cmd) {
  const s = await loadSettings();
  const params = cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  const type = cmd.type;
  if (needsPilot(type, params) && !s.pilotEnabled) {
    return { error: 'pilot_disabled', message: PILOT_OFF_MESSAGE };
  }
  if (type === 'dialog' || type === 'emulate') {
    const tab = await targetTab(cmd);
    return type === 'dialog' ? devtools.dialogCommand(tab.id, params) : devtools.emulate(tab.id, params);
  }
  if (type === 'trace') {
    // It reloads the page: a dialog in the way is passed, as for a navigation.
    const tab = await targetTab(cmd);
    return watched(s, tab, type, params, () => devtools.navigating(tab.id, () => devtools.trace(tab.id, params)));
  }
  if (type === 'browser_action' && LEAVING.has(params.action) && s.pilotEnabled) {
    const tab = await targetTab(cmd).catch(() => null);
    if (tab) {
      try { await devtools.open(tab.id); } catch (_) { return browserAction(cmd); }
      // A dialog already open is passed first; one the next page opens answers the navigation.
      const result = await devtools.navigating(tab.id, () => devtools.guard(tab.id, () => browserAction(cmd)));
      return result && result.__dialog ? interrupted(type, params, result.__dialog) : result;
    }
  }
  if (type === 'dom_action' && INPUT_ACTIONS.has(params.action)) {
    const tab = await targetTab(cmd);
    return watched(s, tab, type, params, () => inputAction(tab.id, params));
  }
  if (IN_PAGE.has(type)) {
    const tab = await targetTab(cmd);
    return watched(s, tab, type, params, () => run(cmd, type, params, tab));
  }
  return run(cmd, type, params, null);
}

async function run(cmd, type, params, tab) {
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
      const info = await inTab(tab.id, 'page_info', params);
      return Object.assign({ tab_id: tab.id, tracked: true }, info);
    }
    case 'dom': case 'a11y': case 'dom_action': case 'highlight': case 'subtitle': case 'waterfall':
    case 'state_capture': case 'computed_styles': case 'form_discovery': {
      // AI-driven actions are recorded by the daemon (source:"ai", with the client that asked),
      // which knows who asked; recording them here too would list each one twice.
      return inTab(tab.id, type, params);
    }
    case 'snapshot': {
      // The agents' page snapshot (content/snapshot.js); the daemon keeps diff bases per tab.
      const snapTab = await targetTab(cmd);
      return Object.assign({ tab_id: snapTab.id }, await inTab(snapTab.id, 'snapshot', params));
    }
    default:
      return { error: 'unknown_query_type', message: `unknown command type ${type}` };
  }
}

// The commands queued and running (one chain per tab).
export const commands = createCommandRunner({
  execute: (cmd) => {
    checkParams(cmd);
    return dispatch(cmd);
  },
});
