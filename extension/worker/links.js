// Gasoline — the `link_health` command: the tracked page's links, checked with the extension's own
// privileges (HEAD, GET where HEAD is refused), six at a time.

import { targetTab, isPrivateHost, LIMITS } from '../lib/policy.js';

export async function linkHealth(cmd) {
  const params = cmd.params || {};
  const tab = await targetTab(cmd);
  const limit = Math.max(1, Math.min(Number(params.limit) || 50, LIMITS.links));
  const [{ result: found }] = await chrome.scripting.executeScript({
    target: { tabId: tab.id },
    func: (max) => Array.from(new Set(Array.from(document.links).map((a) => a.href.split('#')[0])))
      .filter((u) => /^https?:/.test(u)).slice(0, max),
    args: [limit * 4],
  });
  // The extension fetches with its own privileges (no CORS, every host): never into the private
  // network or this machine, unless the tracked page itself is served from there.
  const pagePrivate = isPrivateHost(tab.url);
  const all = Array.isArray(found) ? found.filter((u) => typeof u === 'string' && u.length <= 8192) : [];
  const refused = pagePrivate ? [] : all.filter((u) => isPrivateHost(u));
  const urls = all.filter((u) => pagePrivate || !isPrivateHost(u)).slice(0, limit);
  const check = async (url) => {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), 5000);
    const started = Date.now();
    try {
      let resp = await fetch(url, { method: 'HEAD', redirect: pagePrivate ? 'follow' : 'manual', signal: ctrl.signal, credentials: 'omit', cache: 'no-store' });
      if (resp.status === 405 || resp.status === 501) resp = await fetch(url, { method: 'GET', redirect: pagePrivate ? 'follow' : 'manual', signal: ctrl.signal, credentials: 'omit', cache: 'no-store' });
      return { url, status: resp.status, ok: resp.ok, redirected: resp.redirected, duration: Date.now() - started };
    } catch (e) {
      return { url, status: 0, ok: false, error: ctrl.signal.aborted ? 'timeout' : String((e && e.message) || e), duration: Date.now() - started };
    } finally {
      clearTimeout(timer);
    }
  };
  const links = [];
  for (let i = 0; i < urls.length; i += 6) links.push(...await Promise.all(urls.slice(i, i + 6).map(check)));
  return {
    page_url: tab.url, checked: links.length, broken: links.filter((l) => !l.ok).length, links,
    ...(refused.length ? { skipped_private: refused.slice(0, 20), skipped_private_count: refused.length } : {}),
  };
}
