// Gasoline — roles, accessible names and selectors for an element (shared by two worlds).
//
// Loaded twice, into separate JavaScript worlds: in a tracked page's world just before capture.js
// (the user-action capture names the element a person acted on), and in the isolated world just
// before commands.js (an agent's selectors are resolved against the same roles and names). Pure DOM
// code: no chrome.* calls, no state. Defines globalThis.__gasolineSelectors; capture.js takes the
// functions and removes the global again, so the page never sees it.
(() => {
  'use strict';
  if (globalThis.__gasolineSelectors) return;

  const clip = (s, n) => {
    s = String(s == null ? '' : s);
    return s.length > n ? s.slice(0, n) + '…' : s;
  };
  const norm = (s) => String(s || '').replace(/\s+/g, ' ').trim();

  // ---------------------------------------------------------------- roles and names
  const INPUT_ROLES = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', checkbox: 'checkbox', radio: 'radio',
    range: 'slider', number: 'spinbutton', search: 'searchbox', hidden: null,
  };
  const IMPLICIT_ROLES = {
    A: (el) => (el.hasAttribute('href') ? 'link' : null),
    BUTTON: () => 'button', SELECT: (el) => (el.multiple || el.size > 1 ? 'listbox' : 'combobox'),
    TEXTAREA: () => 'textbox', IMG: (el) => (el.getAttribute('alt') === '' ? 'presentation' : 'img'),
    H1: () => 'heading', H2: () => 'heading', H3: () => 'heading', H4: () => 'heading', H5: () => 'heading', H6: () => 'heading',
    NAV: () => 'navigation', MAIN: () => 'main', FORM: () => 'form', UL: () => 'list', OL: () => 'list', LI: () => 'listitem',
    TABLE: () => 'table', DIALOG: () => 'dialog', HEADER: () => 'banner', FOOTER: () => 'contentinfo', ASIDE: () => 'complementary',
    OPTION: () => 'option', PROGRESS: () => 'progressbar', SUMMARY: () => 'button',
    INPUT: (el) => {
      const t = (el.getAttribute('type') || 'text').toLowerCase();
      return Object.prototype.hasOwnProperty.call(INPUT_ROLES, t) ? INPUT_ROLES[t] : 'textbox';
    },
  };

  const roleOf = (el) => {
    const explicit = el.getAttribute && el.getAttribute('role');
    if (explicit) return explicit.trim().split(/\s+/)[0];
    const f = IMPLICIT_ROLES[el.tagName];
    return f ? f(el) : null;
  };

  const labelsText = (el) => {
    if (el.labels && el.labels.length) return norm(Array.from(el.labels).map((l) => l.textContent).join(' '));
    return '';
  };

  const accessibleName = (el) => {
    const aria = el.getAttribute('aria-label');
    if (aria && aria.trim()) return norm(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const text = by.split(/\s+/).map((id) => { const n = document.getElementById(id); return n ? n.textContent : ''; }).join(' ');
      if (norm(text)) return norm(text);
    }
    const fromLabel = labelsText(el);
    if (fromLabel) return fromLabel;
    if (el.tagName === 'IMG') return norm(el.getAttribute('alt'));
    if (el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(el.type)) return norm(el.value);
    const role = roleOf(el);
    if (!['textbox', 'searchbox', 'combobox', 'listbox', 'spinbutton', 'slider'].includes(role)) {
      const text = norm(el.innerText !== undefined ? el.innerText : el.textContent);
      if (text) return clip(text, 200);
    }
    return norm(el.getAttribute('title') || el.getAttribute('placeholder') || '');
  };

  // ---------------------------------------------------------------- selectors (for recorded actions)
  const cssEscape = (s) => (globalThis.CSS && CSS.escape ? CSS.escape(s) : String(s).replace(/[^a-zA-Z0-9_-]/g, '\\$&'));

  const cssPath = (el) => {
    if (el.id && document.querySelectorAll('#' + cssEscape(el.id)).length === 1) return '#' + cssEscape(el.id);
    const parts = [];
    let node = el;
    while (node && node.nodeType === 1 && node !== document.documentElement && parts.length < 6) {
      let part = node.tagName.toLowerCase();
      if (node.id && document.querySelectorAll('#' + cssEscape(node.id)).length === 1) {
        parts.unshift('#' + cssEscape(node.id));
        break;
      }
      const parent = node.parentElement;
      if (parent) {
        const same = Array.from(parent.children).filter((c) => c.tagName === node.tagName);
        if (same.length > 1) part += ':nth-of-type(' + (same.indexOf(node) + 1) + ')';
      }
      parts.unshift(part);
      node = parent;
    }
    return parts.join(' > ');
  };

  // Whether a field holds a secret: the same rule as the worker's redactor (lib/redact.js
  // isSensitiveField), for the command handlers of the isolated world (dom, get_value,
  // state_capture) and role names. Keep the two in step.
  const SECRET_AUTOCOMPLETE = /(?:^|\s)(?:current-password|new-password|one-time-code|cc-[a-z-]+|transaction-amount)(?:\s|$)/i;
  const SECRET_FIELD_NAME = /pass(?:word|wd|code|phrase)?|pwd|secret|token|otp|one.?time|pin\b|cvv|cvc|csc|card.?(?:number|num|no)|cc.?(?:num|number|exp|csc)|ssn|security.?code/i;
  const sensitiveField = (el) => !!el && el.nodeType === 1 && (String(el.type || '').toLowerCase() === 'password'
    || SECRET_AUTOCOMPLETE.test(el.getAttribute('autocomplete') || '')
    || SECRET_FIELD_NAME.test(el.getAttribute('name') || '') || SECRET_FIELD_NAME.test(el.id || ''));

  const selectorsFor = (el) => {
    const out = { css: cssPath(el), tag: el.tagName.toLowerCase() };
    const testId = el.getAttribute('data-testid') || el.getAttribute('data-test-id') || el.getAttribute('data-test') || el.getAttribute('data-cy');
    if (testId) out.testId = testId;
    const aria = el.getAttribute('aria-label');
    if (aria) out.ariaLabel = aria;
    const role = roleOf(el);
    if (role) {
      const name = sensitiveField(el) ? '' : accessibleName(el);
      out.role = { role, name: clip(name, 100) };
    }
    if (el.id) out.id = el.id;
    if (el.getAttribute('name')) out.name = el.getAttribute('name');
    if (el.getAttribute('placeholder')) out.placeholder = el.getAttribute('placeholder');
    const isField = el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT';
    if (!isField) {
      const text = norm(el.innerText !== undefined ? el.innerText : el.textContent);
      if (text && text.length <= 80) out.text = text;
    }
    return out;
  };

  Object.defineProperty(globalThis, '__gasolineSelectors', {
    value: Object.freeze({ clip, norm, roleOf, accessibleName, cssEscape, selectorsFor, sensitiveField }),
    enumerable: false,
    configurable: true,
  });
})();
