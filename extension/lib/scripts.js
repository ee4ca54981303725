// Gasoline — the `execute` command: an agent's script in the tracked tab's page world, or in a
// user-script world of its own ("isolated"). worker/commands.js runs it.

import { targetTab } from './policy.js';
import { redactUrl } from './redact.js';

// Runs in the page (MAIN) or in the extension's isolated world; must be self-contained.
async function runUserScript(code, timeoutMs) {
  const serialize = (value, depth, seen) => {
    const t = typeof value;
    if (value === null || t === 'boolean' || t === 'number' || t === 'string') return value;
    if (t === 'undefined') return null;
    if (t === 'bigint' || t === 'symbol') return value.toString();
    if (t === 'function') return '[Function ' + (value.name || 'anonymous') + ']';
    if (value instanceof Error) return { name: value.name, message: value.message, stack: String(value.stack || '') };
    if (typeof Node !== 'undefined' && value instanceof Node) return value.nodeType === 1 ? value.outerHTML.slice(0, 2000) : String(value.textContent).slice(0, 2000);
    if (seen.has(value)) return '[Circular]';
    seen.add(value);
    if (depth > 5) return '[Object]';
    if (Array.isArray(value)) return value.slice(0, 1000).map((v) => serialize(v, depth + 1, seen));
    const out = {};
    for (const k of Object.keys(value).slice(0, 500)) {
      try { out[k] = serialize(value[k], depth + 1, seen); } catch (_) { out[k] = '[Getter threw]'; }
    }
    return out;
  };
  let fn;
  try {
    try {
      fn = new Function('return (async () => (\n' + code + '\n))()');
    } catch (syntax) {
      fn = new Function('return (async () => {\n' + code + '\n})()');
    }
  } catch (e) {
    const blocked = e instanceof EvalError || /Content Security Policy|unsafe-eval/i.test(String(e && e.message));
    return { error: blocked ? 'csp_blocked' : 'syntax_error', message: String((e && e.message) || e) };
  }
  try {
    const value = await Promise.race([
      fn(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('script did not settle within ' + timeoutMs + ' ms')), timeoutMs)),
    ]);
    return { success: true, type: value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value, result: serialize(value, 0, new WeakSet()) };
  } catch (e) {
    return { error: 'execution_error', message: String((e && e.message) || e), stack: String((e && e.stack) || '') };
  }
}

export async function execute(cmd) {
  const params = cmd.params || {};
  const code = params.script || params.code || params.expression;
  if (typeof code !== 'string' || !code.trim()) return { error: 'missing_param', message: 'script is required' };
  const world = String(params.world || 'main').toLowerCase() === 'isolated' ? 'ISOLATED' : 'MAIN';
  const tab = await targetTab(cmd);
  const timeoutMs = Math.min(Math.max(Number(params.timeout_ms) || 5000, 100), 25000);
  if (world === 'ISOLATED') return Object.assign({ world: 'isolated', url: redactUrl(tab.url) }, await executeIsolated(tab.id, code, timeoutMs));
  const [{ result }] = await chrome.scripting.executeScript({ target: { tabId: tab.id }, world, func: runUserScript, args: [code, timeoutMs] });
  return Object.assign({ world: 'main', url: redactUrl(tab.url) }, result);
}

// MV3 forbids evaluating strings in the extension's own isolated world, so "isolated" code runs in
// a user-script world of its own (separate from the page's JavaScript, full DOM access). Chrome
// only allows that once the user turns on "Allow User Scripts" for Gasoline.
let userScriptWorldReady = false;
async function executeIsolated(tabId, code, timeoutMs) {
  let api;
  try { api = chrome.userScripts; } catch (_) { api = undefined; }
  if (!api || typeof api.execute !== 'function') {
    return {
      error: 'isolated_world_unavailable',
      message: 'running code in an isolated world needs "Allow User Scripts" turned on for Gasoline (chrome://extensions → Gasoline → Details); world "main" works without it',
    };
  }
  if (!userScriptWorldReady) {
    await api.configureWorld({ worldId: 'gasoline', csp: "script-src 'self' 'unsafe-eval'; object-src 'none'", messaging: false });
    userScriptWorldReady = true;
  }
  const source = `(${runUserScript.toString()})(${JSON.stringify(code)}, ${Number(timeoutMs)})`;
  const [res] = await api.execute({ target: { tabId }, world: 'USER_SCRIPT', worldId: 'gasoline', js: [{ code: source }] });
  if (res && res.error) return { error: 'execution_error', message: String(res.error) };
  return res ? res.result : { error: 'execution_error', message: 'no result' };
}

