// Gasoline — the one redactor every captured item passes through in the service worker, before it
// is queued for the daemon. It runs here, not in the page's world, because the page can replace
// anything of ours that runs in its realm. The daemon redacts again (gasoline/core/redaction/redactor.py) as a
// second line; agents only ever see what both let through.
//
// What it does, for every item of every kind (console, exceptions, network bodies, WebSocket
// frames, actions, performance snapshots):
// * values under sensitive keys, at any depth of any object or of JSON text (bodies, frames,
//   console arguments), become "[REDACTED:<kind>]";
// * URLs (query AND fragment): sensitive parameters are redacted (access_token, code, id_token, …);
// * headers: an allow-list; any other header keeps its name and loses its value;
// * form-encoded text (a=1&password=x) and "key: value" / key=value text: sensitive keys redacted;
//   Bearer/Basic credentials, JWTs and card numbers (Luhn-checked) in free text too;
// * input actions: the value of a field whose type, name, id or autocomplete says it is secret
//   (password, one-time-code, cc-*, …) is redacted, and so are keys typed into it.

import SECRET_NAMES from './secret-names.js';

const MARK = (kind) => `[REDACTED:${kind}]`;

// The names whose values are secret: one list, shared with the daemon (lib/secret-names.json,
// which the daemon reads; secret-names.js is generated from it).
const SENSITIVE_KEYS = new Set(SECRET_NAMES.keys);
const SENSITIVE_SUFFIXES = SECRET_NAMES.suffixes;
// In URLs and forms more names carry secrets: OAuth codes and tickets ride in the query or the
// fragment (too common as JSON keys to redact there).
const URL_KEYS = new Set(SECRET_NAMES.params);

const normKey = (name) => String(name).trim().replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase().replace(/[-.\s]/g, '_');

/** Whether a value stored under `name` must not leave the browser. */
export function isSensitiveKey(name) {
  if (typeof name !== 'string' || !name || name.length > 200) return false;
  const k = normKey(name);
  const flat = k.replace(/_/g, '');
  return SENSITIVE_KEYS.has(k) || SENSITIVE_KEYS.has(flat) || SENSITIVE_SUFFIXES.some((s) => k.endsWith(s) || flat.endsWith(s.replace(/_/g, '')));
}

function kindOf(name) {
  const k = normKey(name);
  if (k.includes('authorization')) return 'authorization';
  if (k.includes('cookie')) return 'cookie';
  if (k.includes('pass') || k.includes('pwd')) return 'password';
  if (k.includes('token') || k === 'code') return 'token';
  if (k.includes('secret')) return 'secret';
  if (k.includes('key')) return 'api_key';
  if (k.includes('sess') || k.includes('sid')) return 'session';
  if (k.includes('card') || k.includes('cvv') || k.includes('cvc') || k.includes('cc_')) return 'card';
  return 'secret';
}

// ------------------------------------------------------------------ input fields

const SECRET_AUTOCOMPLETE = /(?:^|\s)(?:current-password|new-password|one-time-code|cc-[a-z-]+|transaction-amount)(?:\s|$)/i;
const SECRET_FIELD_NAME = /pass(?:word|wd|code|phrase)?|pwd|secret|token|otp|one.?time|pin\b|cvv|cvc|csc|card.?(?:number|num|no)|cc.?(?:num|number|exp|csc)|ssn|security.?code/i;

/**
 * The one rule for "this input holds a secret": its type is password, its autocomplete names a
 * password, a one-time code or card data (cc-*), or its name / id says so.
 */
export function isSensitiveField({ type = '', name = '', id = '', autocomplete = '' } = {}) {
  if (String(type).toLowerCase() === 'password') return true;
  if (SECRET_AUTOCOMPLETE.test(String(autocomplete))) return true;
  return SECRET_FIELD_NAME.test(String(name)) || SECRET_FIELD_NAME.test(String(id));
}

// ------------------------------------------------------------------ text

function luhn(digits) {
  let sum = 0;
  let dbl = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (dbl) { d *= 2; if (d > 9) d -= 9; }
    sum += d;
    dbl = !dbl;
  }
  return sum % 10 === 0;
}

const TEXT_KEY = '(?:[A-Za-z0-9_.-]*?(?:password|passwd|secret|token|api[_-]?key|apikey|private[_-]?key|session[_-]?id|sessid|credentials)|passwd|pwd|session|jsessionid|phpsessid|connect\\.sid|cvv|cvc|otp)';
const TEXT_RULES = [
  // "key": "value" inside JSON-ish text we could not parse (truncated bodies, GraphQL arguments)
  [new RegExp(`((["']?)${TEXT_KEY}\\2\\s*:\\s*)"((?:[^"\\\\\\n]|\\\\.){1,4096})"`, 'gi'), (m, pre) => `${pre}"${MARK('secret')}"`],
  // key=value / key: value; not a GraphQL variable ($password: String!) nor a reference to one
  [new RegExp(`(?<![$\\w])(${TEXT_KEY})(\\s*[=:]\\s*)(?!\\[REDACTED:|\\$)([^\\s&,;"'})]{1,4096})`, 'gi'), (m, key, sep) => `${key}${sep}${MARK(kindOf(key))}`],
  [/\b(authorization|proxy-authorization|cookie|set-cookie)(\s*:\s*)(?!\[REDACTED:)[^\n\r]{1,4096}/gi, (m, key, sep) => `${key}${sep}${MARK(kindOf(key))}`],
  [/\b(Bearer|Basic|Digest|Token)\s+(?!\[REDACTED:)[A-Za-z0-9._~+/=-]{8,}/g, (m, scheme) => `${scheme} ${MARK('token')}`],
  [/\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\b/g, () => MARK('jwt')],
  // card numbers: 13-19 digits (spaces or dashes between groups) starting like a card (2-6), Luhn-valid
  [/\b[2-6](?:[ -]?\d){12,18}\b/g, (m) => { const d = m.replace(/\D/g, ''); return d.length >= 13 && d.length <= 19 && luhn(d) ? MARK('card') : m; }],
  // Credentials in console text, as the daemon's scan finds them (gasoline/core/redaction/shapes.py):
  // a password input's value in HTML,
  [/<input\s[^<>]{0,4096}/gi, (tag) => (/\stype\s*=\s*\\?["']?password(?![\w-])/i.test(tag)
    ? tag.replace(/(\svalue\s*=\s*)(?:(\\?")((?:[^"\\]|\\[^"])*)(\\?")|(\\?')((?:[^'\\]|\\[^'])*)(\\?')|([^\s"'>\\]+))/gi,
      (m, pre, q1, v1, e1, q2, v2, e2, v3) => {
        const value = v1 ?? v2 ?? v3;
        if (!value || value.startsWith('[REDACTED:')) return m;
        return v1 !== undefined ? `${pre}${q1}${MARK('password')}${e1}` : v2 !== undefined ? `${pre}${q2}${MARK('password')}${e2}` : `${pre}${MARK('password')}`;
      })
    : tag)],
  // --password X, --db-password X, --token X, --api-key X (a variable or a placeholder is kept),
  [/(--(?:[a-z0-9]+-)*(?:password|passwd|pass|pwd|passphrase|secret|token|api-?key|auth-?token|access-?token|client-?secret)\s+["']?)(?!\[REDACTED:)([^\s"'$<>{}[\]`-][^\s"'`]{3,4095})/gi,
    (m, pre, value) => `${pre}${MARK(kindOf(pre.replace(/[\s"']/g, '').replace(/^-+/, '')))}`],
  // a password flag after the command it belongs to, on the same line (mysql -pSECRET; sshpass,
  // docker login, mongo -p X; sqlcmd -P X; redis-cli -a X; curl -u user:pass; httpie -a user:pass)
  [/\b(mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|mariadb-dump|mariadb-admin)\b([^\r\n|;&]{0,300}?\s-p)(?!\[REDACTED:)([^\s"'$<>`-][^\s"'`]{0,4095})/g,
    (m, cmd, mid) => `${cmd}${mid}${MARK('password')}`],
  [/\b(sshpass|(?:docker|podman|buildah|nerdctl)\s+login|helm\s+registry\s+login|mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport)\b([^\r\n|;&]{0,300}?\s-p\s+["']?)(?!\[REDACTED:)([^\s"'$<>`-][^\s"'`]{0,4095})/g,
    (m, cmd, mid) => `${cmd}${mid}${MARK('password')}`],
  [/\b(sqlcmd\b[^\r\n|;&]{0,300}?\s-P\s+["']?|redis-cli\b[^\r\n|;&]{0,300}?\s-a\s+["']?)(?!\[REDACTED:)([^\s"'$<>`-][^\s"'`]{0,4095})/g,
    (m, pre) => `${pre}${MARK('password')}`],
  [/(\bcurl\b[^\r\n|;&]{0,300}?\s(?:-u|-U|--user|--proxy-user)(?:\s+|=)["']?[^\s:"'$]{0,256}:|(?:^|\s)https?(?![\w:/.-])[^\r\n|;&]{0,300}?\s(?:-a|--auth)(?:\s+|=)["']?[^\s:"'$]{0,256}:)(?!\[REDACTED:)([^\s"'$`][^\s"'`]{0,4095})/g,
    (m, pre) => `${pre}${MARK('password')}`],
  // scheme://user:password@host (an empty user too) in free text
  [/(\b[A-Za-z][A-Za-z0-9+.-]{1,20}:\/\/[^\s/:@"'<>]{0,256}:)(?!\[REDACTED:)([^\s/@"'<>]{1,256})(?=@)/g,
    (m, pre) => `${pre}${MARK('credentials')}`],
];

function redactPlainText(text) {
  let out = text;
  for (const [re, fn] of TEXT_RULES) out = out.replace(re, fn);
  return out;
}

const FORM_TEXT = /^[^\s=&{}[\]"]{1,200}=[^\s&]*(?:&[^\s=&]{1,200}=[^\s&]*)*$/;

/** Free text, JSON text or form-encoded text with its secrets replaced. */
export function redactText(text, depth = 0) {
  if (typeof text !== 'string' || !text) return text;
  const t = text.trim();
  if ((t.startsWith('{') && t.endsWith('}')) || (t.startsWith('[') && t.endsWith(']'))) {
    try {
      return JSON.stringify(redactValue(JSON.parse(t), depth + 1));
    } catch (_) { /* not JSON (or truncated): fall through to the text rules */ }
  }
  if (FORM_TEXT.test(t) && t.includes('=')) {
    return t.split('&').map((pair) => {
      const i = pair.indexOf('=');
      let key = pair.slice(0, i);
      try { key = decodeURIComponent(key.replace(/\+/g, ' ')); } catch (_) { /* keep raw */ }
      return isSensitiveKey(key) || URL_KEYS.has(normKey(key)) ? `${pair.slice(0, i)}=${MARK(kindOf(key))}` : redactPlainText(pair);
    }).join('&');
  }
  return redactPlainText(text);
}

// ------------------------------------------------------------------ URLs

function redactParams(part) {
  // part: "a=1&b=2" (no leading ?/#); keeps what is not a parameter list as it is (text rules).
  if (!part.includes('=')) return redactPlainText(part);
  return part.split('&').map((pair) => {
    const i = pair.indexOf('=');
    if (i < 0) return pair;
    let key = pair.slice(0, i);
    try { key = decodeURIComponent(key.replace(/\+/g, ' ')); } catch (_) { /* keep raw */ }
    return isSensitiveKey(key) || URL_KEYS.has(normKey(key)) ? `${pair.slice(0, i)}=${MARK(kindOf(key))}` : pair;
  }).join('&');
}

/** A URL with sensitive query and fragment parameters (and user:password@) redacted. */
export function redactUrl(url) {
  if (typeof url !== 'string' || !url) return url;
  let out = url;
  out = out.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@\s]+@/i, (m, scheme) => `${scheme}${MARK('credentials')}@`);
  const hash = out.indexOf('#');
  let fragment = '';
  if (hash >= 0) { fragment = out.slice(hash + 1); out = out.slice(0, hash); }
  const q = out.indexOf('?');
  if (q >= 0) out = out.slice(0, q + 1) + redactParams(out.slice(q + 1));
  if (hash >= 0) {
    // "#access_token=…&…", "#/callback?code=…", or a plain anchor
    const inner = fragment.indexOf('?');
    fragment = inner >= 0 ? fragment.slice(0, inner + 1) + redactParams(fragment.slice(inner + 1)) : (fragment.includes('=') ? redactParams(fragment) : fragment);
    out += '#' + fragment;
  }
  return out;
}

// ------------------------------------------------------------------ headers

const HEADER_ALLOW = new Set([
  'accept', 'accept-encoding', 'accept-language', 'accept-ranges', 'access-control-allow-credentials',
  'access-control-allow-headers', 'access-control-allow-methods', 'access-control-allow-origin',
  'access-control-expose-headers', 'access-control-max-age', 'access-control-request-headers',
  'access-control-request-method', 'age', 'allow', 'cache-control', 'connection', 'content-disposition',
  'content-encoding', 'content-language', 'content-length', 'content-range', 'content-security-policy',
  'content-security-policy-report-only', 'content-type', 'cross-origin-embedder-policy',
  'cross-origin-opener-policy', 'cross-origin-resource-policy', 'date', 'etag', 'expires', 'host',
  'if-match', 'if-modified-since', 'if-none-match', 'keep-alive', 'last-modified', 'link', 'location',
  'origin', 'permissions-policy', 'pragma', 'range', 'referer', 'referrer-policy', 'retry-after',
  'server', 'server-timing', 'strict-transport-security', 'timing-allow-origin', 'traceparent',
  'tracestate', 'transfer-encoding', 'upgrade', 'user-agent', 'vary', 'via', 'x-content-type-options',
  'x-correlation-id', 'x-frame-options', 'x-powered-by', 'x-request-id', 'x-requested-with',
  'x-response-time', 'x-xss-protection',
]);
const URL_HEADERS = new Set(['location', 'referer', 'link', 'origin']);

/** Headers ({name: value} or [[name, value]]) through the allow-list. */
export function redactHeaders(headers) {
  const one = (name, value) => {
    const k = String(name).toLowerCase();
    if (!HEADER_ALLOW.has(k)) return MARK('header');
    return URL_HEADERS.has(k) ? redactUrl(String(value)) : value;
  };
  if (Array.isArray(headers)) return headers.map((h) => (Array.isArray(h) && h.length >= 2 ? [h[0], one(h[0], h[1])] : h));
  if (headers && typeof headers === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(headers)) out[k] = one(k, v);
    return out;
  }
  return headers;
}

// ------------------------------------------------------------------ values and items

const URL_FIELDS = new Set(['url', 'page_url', 'pageUrl', 'from_url', 'to_url', 'filename', 'referrer', 'href', 'src', 'name']);
const HEADER_FIELDS = new Set(['headers', 'request_headers', 'response_headers', 'requestHeaders', 'responseHeaders']);
const MAX_DEPTH = 24;

/** Any JSON value with sensitive keys, URLs, headers and text redacted; `key` is its own name. */
export function redactValue(value, depth = 0, key = '') {
  if (depth > MAX_DEPTH) return value;
  if (typeof value === 'string') {
    if (URL_FIELDS.has(key) && /^[a-z][a-z0-9+.-]*:/i.test(value)) return redactPlainText(redactUrl(value));
    return redactText(value, depth);
  }
  if (Array.isArray(value)) return value.map((v) => redactValue(v, depth + 1));
  if (value && typeof value === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(value)) {
      if (isSensitiveKey(k) && v !== null && v !== '' && !(typeof v === 'string' && v.startsWith('[REDACTED:'))) out[k] = MARK(kindOf(k));
      else if (HEADER_FIELDS.has(k)) out[k] = redactHeaders(v);
      else out[k] = redactValue(v, depth + 1, k);
    }
    return out;
  }
  return value;
}

/** One captured item ({kind, payload}) as it may leave the browser. */
export function redactItem(kind, payload) {
  const out = redactValue(payload);
  if (kind === 'action' && out && typeof out === 'object') {
    const field = { type: payload.input_type, name: payload.input_name, id: payload.input_id, autocomplete: payload.autocomplete };
    if (isSensitiveField(field)) {
      if ('value' in out) out.value = MARK('input');
      if (out.type === 'keypress' && typeof out.key === 'string' && out.key.length === 1) out.key = MARK('input');
    }
  }
  return out;
}
