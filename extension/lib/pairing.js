// Gasoline — the extension knows it is talking to the Gasoline daemon (gasoline/core/trust/identity.py).
//
// The daemon has a P-256 identity key kept in its state dir. The user pins it once: the popup shows
// the fingerprint the daemon offers (GET /pairing) and the user confirms it matches what
// `gasoline identity` prints. From then on, every new connection is a challenge: the worker sends
// an ephemeral ECDH key and a nonce (POST /pairing/challenge), derives the session key from the
// PINNED key, and the daemon must answer with an HMAC only the holder of the private key can
// compute. Every /sync answer (the command channel) must then carry X-Gasoline-Proof, an HMAC of
// the request's nonce and the answer's bytes under that session key.
//
// Until a session is verified the worker sends nothing but GET /health and the two /pairing
// routes: no capture batch, no /sync (whose body names the tracked tab), no command runs. A failed
// request (daemon down) ends the session: whoever answers next must prove itself again.
//
// The other way round, the daemon pins THIS extension (trust on first use): the worker holds a
// long-term ECDSA P-256 key of its own, created once, non-extractable, kept in IndexedDB (a
// CryptoKey is stored as such: its private half never exists as bytes the worker could leak). Each
// challenge carries the public key and a signature over the ephemeral key and the nonce, so the
// session belongs to this key. Every request of the session is then sealed (AES-256-GCM under
// HMAC(K, "gasoline-seal-v1 key"), the method, path and session authenticated with the body) and
// the /sync answer comes back sealed and bound to its request: a process that takes the port reads
// no capture, no command result, and cannot inject a command. Each sealed request carries the
// session's next request number (authenticated): the daemon opens each number once, so a recorded
// request resent is refused.

const enc = new TextEncoder();
const CHALLENGE_LABEL = enc.encode('gasoline-daemon-v1 challenge');
const RESPONSE_LABEL = enc.encode('gasoline-daemon-v1 response');
const PROTOCOL = 'gasoline-pairing-v1';
const EXT_CHALLENGE_LABEL = enc.encode('gasoline-extension-v1 challenge');
const EXT_LINK_LABEL = enc.encode('gasoline-extension-v1 link');
const SEAL_KEY_LABEL = enc.encode('gasoline-seal-v1 key');
const SEAL_REQUEST_LABEL = enc.encode('gasoline-seal-v1 request\n');
const SEAL_RESPONSE_LABEL = enc.encode('gasoline-seal-v1 response\n');
const KEY_DB = 'gasoline-keys';
const KEY_STORE = 'keys';
const KEY_NAME = 'extension';

export const b64u = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
export function unb64u(text) {
  const s = String(text).replace(/-/g, '+').replace(/_/g, '/');
  const bin = atob(s + '='.repeat((4 - (s.length % 4)) % 4));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}
const concat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
};
const random = (n) => crypto.getRandomValues(new Uint8Array(n));

/** The fingerprint of a raw public key: SHA-256, first 80 bits, base32 in groups of 4 (as the daemon). */
export async function fingerprintOf(rawKey) {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', rawKey)).slice(0, 10);
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of digest) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) { out += alphabet[(value >>> (bits - 5)) & 31]; bits -= 5; }
  }
  return out.match(/.{1,4}/g).join('-');
}

function idbRequest(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

let extensionKeyPromise = null;
/**
 * This extension's long-term key {privateKey, raw, fingerprint}: read from IndexedDB, created
 * there (non-extractable) the first time. One per browser profile and extension install.
 */
export function extensionKey() {
  if (!extensionKeyPromise) {
    extensionKeyPromise = (async () => {
      const open = indexedDB.open(KEY_DB, 1);
      open.onupgradeneeded = () => open.result.createObjectStore(KEY_STORE);
      const db = await idbRequest(open);
      try {
        let pair = await idbRequest(db.transaction(KEY_STORE).objectStore(KEY_STORE).get(KEY_NAME));
        if (!pair || !pair.privateKey || !pair.publicKey) {
          pair = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign', 'verify']);
          const tx = db.transaction(KEY_STORE, 'readwrite');
          // add, not put: a worker that raced us to it keeps its key, and we read that one
          tx.objectStore(KEY_STORE).add({ privateKey: pair.privateKey, publicKey: pair.publicKey }, KEY_NAME);
          await new Promise((resolve) => { tx.oncomplete = resolve; tx.onerror = resolve; tx.onabort = resolve; });
          pair = await idbRequest(db.transaction(KEY_STORE).objectStore(KEY_STORE).get(KEY_NAME));
        }
        const raw = new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey));
        return { privateKey: pair.privateKey, raw, fingerprint: await fingerprintOf(raw) };
      } finally {
        db.close();
      }
    })();
    extensionKeyPromise.catch(() => { extensionKeyPromise = null; });
  }
  return extensionKeyPromise;
}

/** Why the worker is not talking to the daemon; `state` is what the popup shows. */
export class NotPaired extends Error {
  constructor(state, message) {
    super(message);
    this.state = state;
  }
}

/**
 * The pairing state of one worker.
 *
 * `fetchDaemon(path, init)` fetches from the configured daemon (raw Response); `getPinned()`
 * resolves to the pinned identity {key, fingerprint} or null.
 */
export function createPairing({ fetchDaemon, getPinned }) {
  let session = null;    // {id, key (CryptoKey HMAC), pinnedKey}
  let pending = null;    // the challenge under way
  const info = { state: 'unknown', message: '', offered: null, fingerprint: '', extensionFingerprint: '' };
  extensionKey().then((k) => { info.extensionFingerprint = k.fingerprint; }, () => {});

  const set = (state, message, extra = {}) => Object.assign(info, { state, message }, extra);

  async function offered() {
    const resp = await fetchDaemon('/pairing', { method: 'GET' });
    if (resp.status === 404) return null;
    if (!resp.ok) throw new Error(`GET /pairing answered HTTP ${resp.status}`);
    const data = await resp.json();
    if (!data || data.protocol !== PROTOCOL || typeof data.key !== 'string') return null;
    const raw = unb64u(data.key);
    return { key: data.key, fingerprint: await fingerprintOf(raw) };
  }

  async function challenge(pinned) {
    const pinnedRaw = unb64u(pinned.key);
    const daemonKey = await crypto.subtle.importKey('raw', pinnedRaw, { name: 'ECDH', namedCurve: 'P-256' }, false, []);
    const eph = await crypto.subtle.generateKey({ name: 'ECDH', namedCurve: 'P-256' }, false, ['deriveBits']);
    const ephRaw = new Uint8Array(await crypto.subtle.exportKey('raw', eph.publicKey));
    const nonce = random(32);
    const own = await extensionKey();
    info.extensionFingerprint = own.fingerprint;
    const sig = new Uint8Array(await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, own.privateKey, concat(EXT_CHALLENGE_LABEL, ephRaw, nonce)));
    const resp = await fetchDaemon('/pairing/challenge', {
      method: 'POST',
      body: JSON.stringify({ key: b64u(ephRaw), nonce: b64u(nonce), ext_key: b64u(own.raw), ext_sig: b64u(sig) }),
    });
    if (resp.status === 403) {
      // The daemon pins another extension (or this one is not the one it knows): the user decides.
      const refusal = await resp.json().catch(() => null);
      throw new NotPaired('refused', (refusal && refusal.error) || `the daemon refused this extension (${own.fingerprint}): it is paired with another one`);
    }
    if (resp.status === 404 || resp.status === 405) {
      throw new NotPaired('unsupported', `the server at this port does not support Gasoline pairing (HTTP ${resp.status} for /pairing/challenge): it is not the paired Gasoline daemon; capture and commands are stopped`);
    }
    if (!resp.ok) throw new Error(`POST /pairing/challenge answered HTTP ${resp.status}`);
    const data = await resp.json().catch(() => null);
    if (!data || typeof data.session !== 'string' || typeof data.proof !== 'string') {
      throw new NotPaired('mismatch', 'the server at this port answered the pairing challenge with nonsense: it is not the paired Gasoline daemon; capture and commands are stopped');
    }
    const shared = await crypto.subtle.deriveBits({ name: 'ECDH', public: daemonKey }, eph.privateKey, 256);
    const hkdf = await crypto.subtle.importKey('raw', shared, 'HKDF', false, ['deriveBits']);
    const keyBits = await crypto.subtle.deriveBits(
      { name: 'HKDF', hash: 'SHA-256', salt: nonce, info: concat(enc.encode(PROTOCOL), pinnedRaw, ephRaw) }, hkdf, 256);
    const key = await crypto.subtle.importKey('raw', keyBits, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
    let ok = false;
    try {
      ok = await crypto.subtle.verify('HMAC', key, unb64u(data.proof), concat(CHALLENGE_LABEL, nonce));
    } catch (_) { ok = false; }
    if (!ok) {
      let other = null;
      try { other = await offered(); } catch (_) { /* shown without it */ }
      throw new NotPaired('mismatch', `the server at this port could not prove it is the paired Gasoline daemon (expected identity ${pinned.fingerprint}`
        + (other && other.fingerprint !== pinned.fingerprint ? `, it offers ${other.fingerprint}` : '')
        + '); capture and commands are stopped. If you replaced the daemon\'s state dir on purpose, pair again in the popup');
    }
    const sealBits = await crypto.subtle.sign('HMAC', key, SEAL_KEY_LABEL);
    const aes = await crypto.subtle.importKey('raw', sealBits, 'AES-GCM', false, ['encrypt', 'decrypt']);
    return { id: data.session, key, aes, pinnedKey: pinned.key, seq: 0 };
  }

  /** Resolves to a verified session, or throws L{NotPaired} / a network error. */
  async function ensureSession() {
    const pinned = await getPinned();
    if (session && (!pinned || session.pinnedKey !== pinned.key)) session = null;
    if (session) return session;
    if (!pinned) {
      const offer = await offered().catch((e) => { throw e; });
      if (!offer) {
        set('unsupported', 'the server at this port does not offer Gasoline pairing; nothing is sent to it', { offered: null });
        throw new NotPaired('unsupported', info.message);
      }
      set('unpaired', `not paired yet: confirm the daemon's identity ${offer.fingerprint} in the Gasoline popup (compare it with what \`gasoline identity\` prints)`, { offered: offer });
      throw new NotPaired('unpaired', info.message);
    }
    if (!pending) {
      pending = challenge(pinned).then((s) => {
        session = s;
        set('paired', '', { offered: null, fingerprint: pinned.fingerprint });
        return s;
      }, (e) => {
        if (e instanceof NotPaired) set(e.state, e.message, { fingerprint: pinned.fingerprint });
        throw e;
      }).finally(() => { pending = null; });
    }
    return pending;
  }

  /** Whether `proof` is the session's HMAC of (nonce, body bytes). */
  async function verifyAnswer(s, nonce, body, proof) {
    if (!proof) return false;
    try {
      return await crypto.subtle.verify('HMAC', s.key, unb64u(proof), concat(RESPONSE_LABEL, enc.encode(nonce), enc.encode('\n'), new Uint8Array(body)));
    } catch (_) {
      return false;
    }
  }

  /**
   * A sealed request body: {body, iv, headers} (AES-256-GCM; method, path, session and the
   * request's number authenticated). Each request of a session has the next number (1, 2, ...),
   * taken before any await so requests sealed at once get distinct ones; it is the IV's last 8
   * bytes (after 4 random ones) and the daemon refuses a number it has already opened (a
   * replayed request), accepting those that arrive out of order within its window.
   */
  async function seal(s, method, path, bytes) {
    s.seq = (s.seq || 0) + 1;
    const seq = s.seq;
    const iv = random(12);
    new DataView(iv.buffer).setBigUint64(4, BigInt(seq));
    const aad = concat(SEAL_REQUEST_LABEL, enc.encode(`${method} ${path}\n${s.id}\n${seq}`));
    const ct = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: aad }, s.aes, bytes));
    return {
      body: concat(iv, ct), iv,
      headers: { 'Content-Type': 'application/x-gasoline-sealed', 'X-Gasoline-Session': s.id, 'X-Gasoline-Sealed': '1' },
    };
  }

  /** The plaintext of a sealed answer to the request sealed with `iv`, or null when it does not open. */
  async function openAnswer(s, iv, body) {
    const bytes = new Uint8Array(body);
    if (bytes.length < 28) return null;
    try {
      return new Uint8Array(await crypto.subtle.decrypt(
        { name: 'AES-GCM', iv: bytes.slice(0, 12), additionalData: concat(SEAL_RESPONSE_LABEL, iv) }, s.aes, bytes.slice(12)));
    } catch (_) {
      return null;
    }
  }

  /** The extension's proof that opens its CDP link: HMAC(K, label | nonce), base64url. */
  async function linkProof(s, nonce) {
    return b64u(await crypto.subtle.sign('HMAC', s.key, concat(EXT_LINK_LABEL, enc.encode(nonce))));
  }

  /** Forget the session (the daemon went away, or an answer was not signed): re-challenge next time. */
  function reset() {
    session = null;
  }

  return { ensureSession, verifyAnswer, seal, openAnswer, linkProof, reset, info, offered };
}
