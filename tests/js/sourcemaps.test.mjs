// Unit tests of the source-map resolver (extension/lib/sourcemaps.js): VLQ mappings, frame parsing,
// lookups, inline and file maps, the same-origin rule and the cache. Run by
// tests/test_extension_units.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeMappings, parseFrames, createSourceMapper, MAX_CACHED } from '../../extension/lib/sourcemaps.js';

const MAP = {
  version: 3, file: 'bundle.js', sources: ['src/app.ts', 'webpack://x/src/util.ts'], names: ['boom', 'later'],
  // line 1: col 0 -> app.ts 10:0; col 18 -> app.ts 11:4 name boom. line 2: col 0 -> util.ts 2:2 name later.
  mappings: 'AASA,kBACIA;ACTFC',
};

test('mappings decode to absolute segments', () => {
  assert.deepEqual(decodeMappings(MAP.mappings), [[[0, 0, 9, 0], [18, 0, 10, 4, 0]], [[0, 1, 1, 2, 1]]]);
  assert.deepEqual(decodeMappings(';;AAAA'), [[], [], [[0, 0, 0, 0]]]);
  assert.throws(() => decodeMappings('A!'), /bad mappings/);
});

test('V8 frames parse, with and without a function name', () => {
  const stack = 'Error: x\n    at boom (http://h.test/b.js:1:25)\n    at http://h.test/b.js:2:3\n    at <anonymous>';
  assert.deepEqual(parseFrames(stack), [
    { fn: 'boom', url: 'http://h.test/b.js', line: 1, column: 25 },
    { fn: null, url: 'http://h.test/b.js', line: 2, column: 3 },
  ]);
});

function site(files) {
  const fetched = [];
  return { fetched, fetchText: async (url) => { fetched.push(url); return files[url] === undefined ? null : files[url]; } };
}

test('frames map through a file map next to the script; other origins are not fetched', async () => {
  const web = site({
    'http://h.test/js/b.js': 'function boom(){}\n//# sourceMappingURL=b.js.map\n',
    'http://h.test/js/b.js.map': JSON.stringify(MAP),
  });
  const mapper = createSourceMapper(web);
  const stack = 'Error: x\n    at boom (http://h.test/js/b.js:1:25)\n    at later (http://h.test/js/b.js:2:1)\n    at http://cdn.test/lib.js:1:1';
  const frames = await mapper.mapStack(stack, 'http://h.test/page.html');
  assert.deepEqual(frames[0], { function: 'boom', url: 'http://h.test/js/b.js', line: 1, column: 25, source: 'http://h.test/js/src/app.ts', source_line: 11, source_column: 5, name: 'boom' });
  assert.deepEqual(frames[1], { function: 'later', url: 'http://h.test/js/b.js', line: 2, column: 1, source: 'webpack://x/src/util.ts', source_line: 2, source_column: 3, name: 'later' });
  assert.deepEqual(frames[2], { function: null, url: 'http://cdn.test/lib.js', line: 1, column: 1 });
  assert.deepEqual(web.fetched, ['http://h.test/js/b.js', 'http://h.test/js/b.js.map']);  // once each (cached)
});

test('an inline data: map works; no map or a broken one maps nothing', async () => {
  const inline = 'data:application/json;base64,' + Buffer.from(JSON.stringify(MAP)).toString('base64');
  const web = site({
    'http://h.test/a.js': 'x()\n//# sourceMappingURL=' + inline,
    'http://h.test/plain.js': 'x()',
    'http://h.test/broken.js': 'x()\n//# sourceMappingURL=broken.map',
    'http://h.test/broken.map': '{not json',
    'http://h.test/far.js': 'x()\n//# sourceMappingURL=http://other.test/far.map',
  });
  const mapper = createSourceMapper(web);
  const one = await mapper.mapStack('E\n    at f (http://h.test/a.js:1:20)', 'http://h.test/');
  assert.equal(one[0].source, 'http://h.test/src/app.ts');
  for (const name of ['plain', 'broken', 'far']) {
    assert.equal(await mapper.mapStack(`E\n    at f (http://h.test/${name}.js:1:1)`, 'http://h.test/'), null, name);
  }
  assert.ok(!web.fetched.includes('http://other.test/far.map'));
});

test('the cache keeps the last MAX_CACHED scripts', async () => {
  const web = site({});
  const mapper = createSourceMapper(web);
  for (let i = 0; i <= MAX_CACHED; i++) await mapper.mapStack(`E\n    at f (http://h.test/${i}.js:1:1)`, 'http://h.test/');
  await mapper.mapStack('E\n    at f (http://h.test/0.js:1:1)', 'http://h.test/');
  assert.equal(web.fetched.filter((u) => u === 'http://h.test/0.js').length, 2);
  await mapper.mapStack(`E\n    at f (http://h.test/${MAX_CACHED}.js:1:1)`, 'http://h.test/');
  assert.equal(web.fetched.filter((u) => u === `http://h.test/${MAX_CACHED}.js`).length, 1);
});
