// A stand-in for setTimeout/clearTimeout that runs nothing until told to (tests/js/*.test.mjs).
export function fakeTimers() {
  let now = 0;
  let nextId = 1;
  const pending = new Map(); // id -> {at, fn}
  const timers = {
    setTimeout: (fn, ms = 0) => { const id = nextId++; pending.set(id, { at: now + Math.max(0, ms), fn }); return id; },
    clearTimeout: (id) => { pending.delete(id); },
    /** The delays of the timers pending, from now. */
    delays: () => Array.from(pending.values()).map((t) => t.at - now).sort((a, b) => a - b),
    now: () => now,
    /** Moves the clock by `ms`, running each timer that falls due (and what it awaits) in order. */
    async advance(ms) {
      const until = now + ms;
      for (;;) {
        await settle();
        const due = Array.from(pending.entries()).filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
        if (!due) break;
        pending.delete(due[0]);
        now = due[1].at;
        due[1].fn();
      }
      now = until;
      await settle();
    },
  };
  return timers;
}

/** Lets every promise callback that is ready run. */
export async function settle() {
  for (let i = 0; i < 20; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

/** A promise with its resolve and reject. */
export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
  return { promise, resolve, reject };
}
