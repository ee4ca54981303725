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

// Acting, and reads that expose more than the capture stream does (every tab's URL and title,
// storage, cookie names and form values, fetching with the extension's privileges).
const PILOT_COMMANDS = new Set(['execute', 'browser_action', 'dom_action', 'draw_mode', 'tabs', 'state_capture', 'link_health']);
const READ_ONLY_DOM_ACTIONS = new Set(['get_text', 'get_value', 'get_attribute', 'list_interactive', 'wait_for']);

/** Whether a command of `type` with `params` needs the AI Web Pilot (DOM reads do not). */
export function needsPilot(type, params) {
  return PILOT_COMMANDS.has(type) && !(type === 'dom_action' && READ_ONLY_DOM_ACTIONS.has(params && params.action));
}

async function dispatch(cmd) {
  const s = await loadSettings();
  const params = cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  const type = cmd.type;
  if (needsPilot(type, params) && !s.pilotEnabled) {
    return { error: 'pilot_disabled', message: PILOT_OFF_MESSAGE };
  }
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
      const tab = await targetTab(cmd);
      const info = await inTab(tab.id, 'page_info', params);
      return Object.assign({ tab_id: tab.id, tracked: true }, info);
    }
    case 'dom': case 'a11y': case 'dom_action': case 'highlight': case 'subtitle': case 'waterfall':
    case 'state_capture': case 'computed_styles': case 'form_discovery': {
      const tab = await targetTab(cmd);
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
