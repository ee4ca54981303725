// Unit tests of extension/lib/redact.js (node:test; run by tests/test_extension_units.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  isSensitiveField, isSensitiveKey, redactHeaders, redactItem, redactText, redactUrl, redactValue,
} from '../../extension/lib/redact.js';

test('sensitive keys whatever their case or separators; ordinary keys are not', () => {
  for (const key of ['password', 'Password', 'apiKey', 'X-Api-Key', 'access_token', 'userPassword',
    'client-secret', 'session.id', 'JSESSIONID', 'cvv', 'Set-Cookie']) {
    assert.equal(isSensitiveKey(key), true, key);
  }
  for (const key of ['name', 'email', 'status', 'message', '', 'x'.repeat(201), 42, null]) {
    assert.equal(isSensitiveKey(key), false, String(key).slice(0, 20));
  }
});

test('a field is secret by its type, autocomplete, name or id', () => {
  assert.equal(isSensitiveField({ type: 'PASSWORD' }), true);
  assert.equal(isSensitiveField({ autocomplete: 'cc-number' }), true);
  assert.equal(isSensitiveField({ autocomplete: 'username current-password' }), true);
  assert.equal(isSensitiveField({ name: 'otp' }), true);
  assert.equal(isSensitiveField({ id: 'card_number' }), true);
  assert.equal(isSensitiveField({ type: 'email', name: 'email', autocomplete: 'email' }), false);
  assert.equal(isSensitiveField(), false);
});

test('JSON text keeps its shape and loses its secrets, at any depth', () => {
  const out = JSON.parse(redactText('{"user":"ann","password":"hunter2","nested":[{"api_key":"k-123"}]}'));
  assert.deepEqual(out, { user: 'ann', password: '[REDACTED:password]', nested: [{ api_key: '[REDACTED:api_key]' }] });
});

test('form text, key=value text, credentials, JWTs and card numbers in free text', () => {
  assert.equal(redactText('user=ann&password=hunter2&x=1'), 'user=ann&password=[REDACTED:password]&x=1');
  assert.equal(redactText('login failed: password=hunter2 for ann'), 'login failed: password=[REDACTED:password] for ann');
  assert.equal(redactText('Authorization: Bearer abcdefghijklmnop'), 'Authorization: [REDACTED:authorization]');
  assert.equal(redactText('sent Bearer abcdefghijklmnop'), 'sent Bearer [REDACTED:token]');
  assert.equal(redactText('jwt eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl here'), 'jwt [REDACTED:jwt] here');
  assert.equal(redactText('card 4111 1111 1111 1111 ok'), 'card [REDACTED:card] ok');
  assert.equal(redactText('order 4111 1111 1111 1112 ok'), 'order 4111 1111 1111 1112 ok'); // not Luhn-valid
  assert.equal(redactText('mutation($password: String!)'), 'mutation($password: String!)');
  assert.equal(redactText('nothing to hide here'), 'nothing to hide here');
  assert.equal(redactText(''), '');
  assert.equal(redactText(5), 5);
});

test('URLs: sensitive query and fragment parameters, and user:password@', () => {
  assert.equal(redactUrl('https://e.com/cb?code=abc&state=1'), 'https://e.com/cb?code=[REDACTED:token]&state=1');
  assert.equal(redactUrl('https://e.com/#access_token=abc&expires_in=3600'),
    'https://e.com/#access_token=[REDACTED:token]&expires_in=3600');
  assert.equal(redactUrl('https://e.com/#/callback?id_token=abc'), 'https://e.com/#/callback?id_token=[REDACTED:token]');
  assert.equal(redactUrl('https://ann:hunter2@e.com/x'), 'https://[REDACTED:credentials]@e.com/x');
  assert.equal(redactUrl('https://e.com/docs#section-2'), 'https://e.com/docs#section-2');
  assert.equal(redactUrl('https://e.com/search?q=shoes'), 'https://e.com/search?q=shoes');
});

test('headers go through an allow-list; URL headers keep their URL, redacted', () => {
  assert.deepEqual(redactHeaders({ 'Content-Type': 'application/json', Cookie: 'sid=1', 'X-Custom': 'v',
    Location: 'https://e.com/cb?code=abc' }), {
    'Content-Type': 'application/json', Cookie: '[REDACTED:header]', 'X-Custom': '[REDACTED:header]',
    Location: 'https://e.com/cb?code=[REDACTED:token]',
  });
  assert.deepEqual(redactHeaders([['accept', '*/*'], ['authorization', 'Basic abc'], 'junk']),
    [['accept', '*/*'], ['authorization', '[REDACTED:header]'], 'junk']);
  assert.equal(redactHeaders(null), null);
});

test('values: sensitive keys, URL fields, header fields and text, nested', () => {
  const out = redactValue({
    url: 'https://e.com/?token=abc', headers: { Authorization: 'Bearer x' },
    args: ['password=hunter2', { secret: 's' }], token: '', count: 3,
  });
  assert.deepEqual(out, {
    url: 'https://e.com/?token=[REDACTED:token]', headers: { Authorization: '[REDACTED:header]' },
    args: ['password=[REDACTED:password]', { secret: '[REDACTED:secret]' }], token: '', count: 3,
  });
});

test('an input action on a secret field loses its value and its typed keys', () => {
  const typed = redactItem('action', { type: 'input', value: 'hunter2', input_type: 'password' });
  assert.equal(typed.value, '[REDACTED:input]');
  const key = redactItem('action', { type: 'keypress', key: 'h', input_name: 'otp' });
  assert.equal(key.key, '[REDACTED:input]');
  const plain = redactItem('action', { type: 'input', value: 'ann', input_type: 'text', input_name: 'user' });
  assert.equal(plain.value, 'ann');
  assert.equal(redactItem('console', { message: 'hello' }).message, 'hello');
});
