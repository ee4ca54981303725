// Gasoline status page: reads /ui/stream (server-sent events over fetch, so the API key can go in
// a header) and draws the daemon's state. No framework, no build step; text only via textContent.
'use strict';

const KEY_ITEM = 'gasolineStatusKey';
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'width') node.style.width = v;  // CSSOM: allowed by the strict CSP, unlike style=""
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const yes = (flag, on = 'yes', off = 'no') => el('span', { class: flag ? 'ok' : 'bad' }, el('span', { class: flag ? 'dot on' : 'dot' }), flag ? on : off);
// Ages are counted here: the daemon sends times on its own clock and its `now`; `skew` maps them.
let last = null;
let skew = 0;
const since = (t) => (t === null || t === undefined ? null : Date.now() / 1000 + skew - t);
const ago = (s) => (s === null || s === undefined ? '—' : s < 1 ? 'just now' : s < 90 ? `${Math.round(s)} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`);
const num = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en'));
const empty = (text) => el('p', { class: 'empty' }, text);
const dl = (pairs) => el('dl', {}, pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));

function fill(id, content) {
  const body = document.querySelector(`#${id} .body`);
  body.replaceChildren(...[].concat(content));
}

function drawExtension(x) {
  fill('extension', dl([
    ['connected', yes(x.connected)],
    ['paired', yes(x.paired, x.paired_sessions > 1 ? `yes (${x.paired_sessions} sessions)` : 'yes', 'not proved yet')],
    ['daemon key', el('code', {}, x.daemon_fingerprint || '—')],
    ['pinned extension', x.extension_fingerprint ? el('code', {}, x.extension_fingerprint) : 'none yet'],
    ...((x.launched_extensions || []).length ? [['launched browsers', el('code', {}, x.launched_extensions.join(' '))]] : []),
    ...((x.refused_extensions || []).length ? [['refused extensions', el('code', {}, x.refused_extensions.join(' '))]] : []),
    ['last seen', ago(since(x.last_seen))],
    ['version', x.version || '—'],
    ['tracking', x.gone ? 'gone (the browser stopped syncing)' : x.tracking ? `tab ${x.tracked_tab ?? '—'}${x.tracked_origin ? ` · ${x.tracked_origin}` : ''}` : 'no tab'],
    ['pilot', x.gone ? 'gone' : yes(x.pilot, 'on', 'off')],
    ['pending commands', num(x.pending_commands)],
  ]));
}

function drawAgents(agents) {
  if (!agents.length) { fill('agents', empty('No agent has connected yet.')); return; }
  const rows = agents.map((a) => {
    const sub = a.subscription;
    const rl = a.rate_limit;
    return el('tr', { 'data-agent': a.id },
      el('td', {}, el('code', {}, a.id)),
      el('td', { class: 'mono' }, a.project || el('span', { class: 'muted' }, 'unknown')),
      el('td', {}, yes(a.connected, a.connections > 1 ? `${a.connections} connections` : 'connected', 'gone'), el('div', { class: 'muted' }, ago(since(a.last_seen)))),
      el('td', {}, sub ? [sub.types.join(', '), el('div', { class: 'muted' }, `${num(sub.unread)} unread · ${num(sub.pushed)} sent · ${num(sub.throttled)} throttled`)] : el('span', { class: 'muted' }, 'none')),
      el('td', {}, a.last_calls.length ? el('div', { class: 'calls' }, a.last_calls.map((c) => el('span', { class: `call ${c.outcome}`, title: `${c.ms} ms · ${ago(since(c.at))}${c.error ? ` · ${c.error}` : ''}` }, c.what ? `${c.tool} ${c.what}` : c.tool))) : el('span', { class: 'muted' }, 'no calls')),
      el('td', {}, rl ? (rl.limit > 0 ? `${rl.used}/${rl.limit} per ${rl.window_seconds} s` : 'off') : '—', rl && rl.refused ? el('div', { class: 'bad' }, `${rl.refused} refused`) : null),
    );
  });
  fill('agents', el('table', {},
    el('thead', {}, el('tr', {}, ['agent', 'project', 'connected', 'subscription', 'last calls', 'rate limit'].map((h) => el('th', {}, h)))),
    el('tbody', {}, rows)));
}

function drawBuffers(buffers) {
  const rows = Object.entries(buffers).map(([name, b]) => el('tr', {},
    el('td', {}, name),
    el('td', {}, el('div', { class: 'bar', title: `${(b.fill * 100).toFixed(1)} %` }, el('span', { width: `${Math.min(100, b.fill * 100).toFixed(1)}%` }))),
    el('td', { class: 'mono' }, `${num(b.used)} / ${num(b.capacity)}`),
    el('td', { class: 'mono' }, `${b.rate_per_s} /s`)));
  fill('buffers', el('table', {}, el('thead', {}, el('tr', {}, ['buffer', 'fill', 'entries', 'rate'].map((h) => el('th', {}, h)))), el('tbody', {}, rows)));
}

function drawErrors(errors) {
  const entries = Object.entries(errors);
  if (!entries.length) { fill('errors', empty('No failed tool call.')); return; }
  fill('errors', el('table', {}, el('tbody', {}, entries.map(([code, n]) => el('tr', {}, el('td', {}, el('code', {}, code)), el('td', { class: 'mono' }, num(n)))))));
}

function drawRelay(r) {
  if (!r) { fill('relay', empty('The relay is off.')); return; }
  const parts = [dl([['extension link', yes(r.extension_connected)], ['clients', num(r.clients.length)], ['tabs known', num(r.targets)]])];
  if (r.tabs.length) {
    parts.push(el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'tab'), el('th', {}, 'clients'))),
      el('tbody', {}, r.tabs.map((t) => el('tr', {}, el('td', { class: 'mono' }, t.tab), el('td', {}, t.clients.join(', ')))))));
  }
  fill('relay', parts);
}

function drawProxy(p) {
  if (!p) { fill('proxy', empty('No proxy configured (--proxy-config).')); return; }
  if (!p.sessions.length) { fill('proxy', empty('No proxy session open.')); return; }
  const child = (c) => el('div', {}, `${c.server}: `,
    el('span', { class: c.state === 'ready' ? 'ok' : c.state ? 'warn' : 'muted' }, c.state || (c.enabled ? 'not started' : 'disabled')),
    c.restarts ? ` (${c.restarts} restarts)` : '');
  const row = (s) => el('tr', {},
    el('td', { class: 'mono', title: s.project || '' }, s.id.slice(0, 12)),
    el('td', {}, el('code', {}, s.client)),
    el('td', {}, s.children.map(child)));
  fill('proxy', el('table', {},
    el('thead', {}, el('tr', {}, ['session', 'agent', 'children'].map((h) => el('th', {}, h)))),
    el('tbody', {}, p.sessions.map(row))));
}

function draw(state) {
  if (!state) return;
  $('keyform').hidden = true;
  $('main').hidden = false;
  const live = state.agents.filter((a) => a.connected).length;
  $('summary').textContent = `v${state.version} · pid ${state.pid} · up ${ago(since(state.started_at)).replace(' ago', '')} · ${live} agent${live === 1 ? '' : 's'} connected · extension ${state.extension.connected ? 'connected' : 'not connected'}`;
  drawExtension(state.extension);
  drawAgents(state.agents);
  drawBuffers(state.buffers);
  drawErrors(state.errors);
  drawRelay(state.relay);
  drawProxy(state.proxy);
  document.body.dataset.updated = String(Date.now());
}

function setLive(on) {
  const pill = $('live');
  pill.className = `pill ${on ? 'on' : 'off'}`;
  pill.textContent = on ? 'live' : 'reconnecting…';
}

function askKey(message) {
  $('main').hidden = true;
  $('keyform').hidden = false;
  $('keyerror').textContent = message || '';
  $('summary').textContent = 'this daemon needs its API key';
  $('key').focus();
}

async function follow() {
  const key = sessionStorage.getItem(KEY_ITEM);
  const headers = { Accept: 'text/event-stream' };
  if (key) headers['X-Gasoline-Key'] = key;
  let resp;
  try {
    resp = await fetch('/ui/stream', { headers, cache: 'no-store', credentials: 'omit' });
  } catch (_) {
    setLive(false);
    setTimeout(follow, 2000);
    return;
  }
  if (resp.status === 401) {
    sessionStorage.removeItem(KEY_ITEM);
    setLive(false);
    askKey(key ? 'That key was refused.' : '');
    return;
  }
  if (!resp.ok || !resp.body) {
    setLive(false);
    setTimeout(follow, 2000);
    return;
  }
  setLive(true);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
        if (data) {
          last = JSON.parse(data);
          skew = last.now - Date.now() / 1000;
          draw(last);
        }
      }
    }
  } catch (_) { /* reconnect below */ }
  setLive(false);
  setTimeout(follow, 2000);
}

document.addEventListener('DOMContentLoaded', () => {
  $('keyform').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY_ITEM, $('key').value);
    $('key').value = '';
    follow();
  });
  follow();
  setInterval(() => draw(last), 1000);  // ages move on between updates
});
