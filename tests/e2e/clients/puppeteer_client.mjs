// A puppeteer-core client for tests/e2e/test_relay_puppeteer.py: connects to the Gasoline daemon
// with connect({browserURL}) and prints one JSON line with what it saw.
//   node puppeteer_client.mjs <browserURL> <pageURL> alone <siteURL>
//   node puppeteer_client.mjs <browserURL> <pageURL> evaluate <marker> <count>
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../../.ci/node/package.json'));
const puppeteer = require('puppeteer-core');

const [browserURL, pageURL, mode, ...rest] = process.argv.slice(2);
const out = {};
const browser = await puppeteer.connect({ browserURL, defaultViewport: null });
try {
  const pages = await browser.pages();
  const page = pages.find((p) => p.url() === pageURL);
  if (!page) throw new Error(`no page at ${pageURL}; pages: ${pages.map((p) => p.url())}`);
  if (mode === 'alone') {
    const [site] = rest;
    out.sum = await page.evaluate(() => 1 + 1);
    await page.goto(`${site}/commands.html`);
    out.title = await page.title();
    const consoleSeen = new Promise((resolve) => page.on('console', (m) => { if (m.text() === 'hello from puppeteer') resolve(m.text()); }));
    await page.evaluate(() => console.log('hello from puppeteer'));
    out.console = await Promise.race([consoleSeen, new Promise((r) => setTimeout(() => r(null), 10000))]);
    await page.type('#q', 'relay');
    await page.click('button[type=submit]');
    out.submitted = await page.$eval('#out', (e) => e.textContent);
    const png = await page.screenshot({ encoding: 'base64' });
    out.png = png.slice(0, 12);
    out.pngLength = png.length;
    out.version = await browser.version();
  } else if (mode === 'evaluate') {
    const [marker, count] = rest;
    const values = [];
    for (let i = 0; i < Number(count); i++) values.push(await page.evaluate((m, n) => [m, n, document.title], marker, i));
    out.values = values;
  }
} finally {
  await browser.disconnect();
}
process.stdout.write(JSON.stringify(out) + '\n');
