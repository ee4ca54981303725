// Gasoline — how the daemon's commands run: commands for one tab one after another, in the order
// the daemon queued them (a navigation must not pull the page away from a DOM read that was queued
// before it); tabs independently. Each command has COMMAND_TIMEOUT_MS; the next one for its tab
// starts only once a timed-out command has stopped, or after a grace period (it must not overlap a
// navigation or a script that is still running). Every result passes the size bound and, unless it
// is the agent's own or an image, the redactor.
//
// Nothing here touches chrome.*: `createCommandRunner` is given the function that carries a command
// out (worker/commands.js) and the timers (tests/js/runner.test.mjs fakes both).

import { Refused, boundResult } from '../lib/policy.js';
import { redactValue } from '../lib/redact.js';

export const COMMAND_TIMEOUT_MS = 30000;
export const TIMED_OUT_GRACE_MS = 15000;

// Results that are the agent's own (its script's value) or images: everything else passes the redactor.
const RAW_RESULTS = new Set(['execute', 'visual_diff', 'screenshot']);

/** Which chain a command waits in: its tab, or the primary tracked tab's. */
export function chainKey(cmd) {
  const params = cmd.params && typeof cmd.params === 'object' ? cmd.params : {};
  return String(cmd.tab_id || params.tab_id || 'tracked');
}

/**
 * The result entry {status, error?, result?} for what a command produced (after the size bound),
 * or null when it was answered by another route (a screenshot: POST /screenshots).
 */
export function resultEntry(cmd, result) {
  if (result && result.__answered) return null;
  if (result && typeof result === 'object' && typeof result.error === 'string') {
    return { status: 'error', error: result.error, result: redactValue(result) };
  }
  return { status: 'complete', result: RAW_RESULTS.has(cmd.type) ? result : redactValue(result) };
}

/** The result entry for a command that threw `e` (a policy refusal keeps its code). */
export function failureEntry(e) {
  return e instanceof Refused
    ? { status: 'error', error: e.code, result: { error: e.code, message: e.message } }
    : { status: 'error', error: String((e && e.message) || e) };
}

/**
 * `execute(cmd)` carries a command out (returns its result, or a promise of it; may throw).
 * `enqueue(cmd, onResult)` queues a command; `onResult(result)` receives
 * {id, correlation_id?, status, error?, result?} (or null when the command answered by another
 * route) once it ended. `inProgress()` lists the queued and running commands (/sync in_progress).
 */
export function createCommandRunner({
  execute, timeoutMs = COMMAND_TIMEOUT_MS, graceMs = TIMED_OUT_GRACE_MS, timers = globalThis,
  now = () => new Date().toISOString(),
}) {
  const running = {
    inProgress: new Map(), // command id -> {id, correlation_id, type, status, started_at, updated_at}
    chains: new Map(),     // chain key -> the last command queued on it
    leftovers: new Map(),  // command id -> its execution, still going after its timeout
  };

  const note = (cmd, state) => {
    const at = now();
    running.inProgress.set(cmd.id, { id: cmd.id, correlation_id: cmd.correlation_id, type: cmd.type, status: state, started_at: at, updated_at: at });
  };

  async function run(cmd, onResult) {
    note(cmd, 'running');
    let entry;
    let timer = null;
    try {
      const timeout = new Promise((resolve) => { timer = timers.setTimeout(() => resolve({ __timeout: true }), timeoutMs); });
      const execution = execute(cmd);
      const result = boundResult(await Promise.race([execution, timeout]));
      if (result && result.__timeout) {
        entry = { status: 'timeout', error: `command ${cmd.type} did not finish within ${timeoutMs / 1000} s` };
        running.leftovers.set(cmd.id, Promise.resolve(execution).catch(() => {}));
      } else {
        entry = resultEntry(cmd, result);
      }
    } catch (e) {
      entry = failureEntry(e);
    } finally {
      timers.clearTimeout(timer);
    }
    running.inProgress.delete(cmd.id);
    await onResult(entry && Object.assign({ id: cmd.id }, cmd.correlation_id ? { correlation_id: cmd.correlation_id } : {}, entry));
    const leftover = running.leftovers.get(cmd.id);
    if (leftover) {
      let grace = null;
      await Promise.race([leftover, new Promise((resolve) => { grace = timers.setTimeout(resolve, graceMs); })]);
      timers.clearTimeout(grace);
      running.leftovers.delete(cmd.id);
    }
  }

  /** Queues `cmd` behind the commands of its tab; resolves once it ran and `onResult` returned. */
  function enqueue(cmd, onResult) {
    note(cmd, 'pending');
    const key = chainKey(cmd);
    const chain = (running.chains.get(key) || Promise.resolve()).then(() => run(cmd, onResult));
    running.chains.set(key, chain);
    chain.then(() => { if (running.chains.get(key) === chain) running.chains.delete(key); });
    return chain;
  }

  return {
    enqueue,
    inProgress: () => Array.from(running.inProgress.values()),
    busy: () => running.inProgress.size > 0,
  };
}
