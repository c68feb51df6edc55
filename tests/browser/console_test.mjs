// The web console in a real browser: Debian's headless Chromium, driven by playwright-core, against
// a real anvild on the example registry (a git repository made here, the example model generated
// by anvil-engine, engines really qualified). It checks that every page loads without console
// errors and shows what the API reports, that a pin made in the console needs the token (a wrong
// one is refused, the right one changes the default), that the live view shows a transition when
// the registry changes, and that the pages work by keyboard and at a phone's width. Screenshots go
// to $ANVIL_SCREENSHOTS (default <build>/console-screenshots).
//
// usage: node tests/browser/console_test.mjs <build dir>     exit 77: skipped (the reason is printed)
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const build = path.resolve(process.argv[2] || path.join(root, 'build/gcc'));
const chromium = process.env.ANVIL_CHROMIUM || '/usr/bin/chromium';
const shots = path.resolve(process.env.ANVIL_SCREENSHOTS || path.join(build, 'console-screenshots'));
const SKIP = 77;

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

if (!fs.existsSync(chromium)) skip(`no Chromium at ${chromium} (scripts/install-deps.sh installs Debian's chromium)`);
let chromiumApi;
try {
  ({ chromium: chromiumApi } = await import('playwright-core'));
} catch {
  skip('playwright-core is not installed in tests/browser (scripts/test.sh runs npm ci there)');
}
for (const bin of ['daemon/anvild', 'daemon/anvil', 'engine/anvil-engine']) {
  if (!fs.existsSync(path.join(build, bin))) skip(`${path.join(build, bin)} is not built`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const step = (text) => console.log(`-- ${text}`);

async function until(what, fn, timeoutMs = 120000, everyMs = 250) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

// ---- the world: a git registry, the example model, anvild
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'anvil-console-'));
const registry = path.join(work, 'registry');
const git = (...args) => execFileSync('git', args, {
  cwd: registry,
  env: { ...process.env, GIT_AUTHOR_NAME: 'anvil', GIT_AUTHOR_EMAIL: 'anvil@localhost', GIT_COMMITTER_NAME: 'anvil', GIT_COMMITTER_EMAIL: 'anvil@localhost' },
});
fs.cpSync(path.join(root, 'examples/registry'), registry, { recursive: true });
// Two of the embedded recipes are enough to pin one over the other; fewer qualifications keep the test short.
for (const gone of ['anvil-tiny-llama-f32-draft-layers-cpu.json', 'anvil-tiny-llama-q8-cpu.json']) fs.rmSync(path.join(registry, 'recipes', gone));
git('init', '-q', '-b', 'main');
git('add', '-A');
git('commit', '-q', '-m', 'example registry for the console test');

const model = path.join(work, 'models/anvil-tiny-llama-early-exit-seed1');
step('generating the example model');
execFileSync(path.join(build, 'engine/anvil-engine'), ['make-model', '--out', model, '--preset', 'small', '--layers', '8', '--early-exit', '1', '--seed', '1'], { stdio: 'ignore' });

const config = JSON.parse(fs.readFileSync(path.join(root, 'examples/anvild.json'), 'utf8'));
config.sources[0].url = registry;
config.sources[0].poll_interval_seconds = 2;
config.data_dir = path.join(work, 'data');
config.model_root = path.join(work, 'models');
config.cache_root = path.join(work, 'cache');
config.listen = '127.0.0.1:0';
config.serve = '127.0.0.1:0';
config.stop_engines_on_exit = true;
config.engine_ports = { first: 25000, last: 25199 };  // apart from the other tests' engines
// No candidate can beat the default by 90 %: bf16 stays validated beside the f32 default, so there
// is something to pin, whatever this machine's timings.
config.requirements.thresholds.min_warm_e2e_gain.value = 0.9;
fs.writeFileSync(path.join(work, 'anvild.json'), JSON.stringify(config, null, 2));

const log = fs.openSync(path.join(work, 'anvild.log'), 'w');
const daemon = spawn(path.join(build, 'daemon/anvild'), ['--config', path.join(work, 'anvild.json')], { stdio: ['ignore', log, log] });
let daemonExited = null;
daemon.on('exit', (code, signal) => { daemonExited = signal || code; });

let browser;
async function cleanUp() {
  if (browser) await browser.close().catch(() => {});
  if (daemonExited === null) {
    daemon.kill('SIGTERM');
    await until('anvild to stop', () => daemonExited !== null, 30000).catch(() => daemon.kill('SIGKILL'));
  }
}

let failed = false;
try {
  const addresses = await until('anvild to write its addresses', () => {
    const f = path.join(work, 'data/addresses.json');
    if (daemonExited !== null) throw new Error(`anvild exited (${daemonExited})`);
    return fs.existsSync(f) && JSON.parse(fs.readFileSync(f, 'utf8'));
  }, 30000);
  const base = `http://${addresses.api}`;
  const token = fs.readFileSync(path.join(work, 'data/api-token'), 'utf8').trim();
  const api = async (p) => {
    const r = await fetch(base + p);
    assert.equal(r.status, 200, `GET ${p}: ${r.status}`);
    return (await r.json());
  };

  step('waiting for anvild to qualify the example recipes and choose a default');
  await until('a settled registry with a default', async () => {
    const s = await api('/api/v1/status');
    return s.default && s.recipes.candidate === 0 && s.recipes.qualifying === 0 && s.recipes.validated + s.recipes.promoted >= 2 && s.endpoint.upstream;
  }, 240000, 1000);
  const firstDefault = (await api('/api/v1/default')).data;
  const other = (await api('/api/v1/recipes?status=validated')).data[0];
  assert.ok(other, 'a validated recipe besides the default');

  fs.mkdirSync(shots, { recursive: true });
  browser = await chromiumApi.launch({
    executablePath: chromium,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`); });
  const noProblems = (where) => {
    assert.deepEqual(problems, [], `${where}: ${problems.join('; ')}`);
  };
  const open = async (hash) => {
    await page.goto(`${base}/${hash}`);
    await page.waitForSelector('main[aria-busy="false"] h1');
  };

  step('overview: the default and the statuses the API reports');
  await open('#/');
  assert.equal((await page.textContent('#default-recipe')).trim(), firstDefault.recipe_id);
  const status = await api('/api/v1/status');
  for (const [s, n] of Object.entries(status.recipes)) {
    const text = await page.textContent(`.counts a[href="#/recipes?status=${s}"]`);
    assert.match(text, new RegExp(`${s}\\s+${n}$`), `the count of ${s}`);
  }
  const conditions = await page.$$eval('table.conditions tbody tr', (rows) => rows.map((r) => r.cells[0].textContent));
  assert.deepEqual(conditions.sort(), status.conditions.map((c) => c.type).sort());
  await page.screenshot({ path: path.join(shots, 'overview.png'), fullPage: true });
  await page.screenshot({ path: path.join(shots, 'overview-top.png') });
  noProblems('overview');

  step('recipes: the table, a filter and the order match the API');
  await open('#/recipes');
  const listed = await page.$$eval('#recipes-table tbody tr', (rows) => rows.map((r) => [r.cells[0].textContent, r.cells[1].textContent]));
  const fromApi = (await api('/api/v1/recipes?limit=50')).data.map((r) => [r.id, r.status]);
  assert.deepEqual(listed, fromApi);
  await page.selectOption('#f-status', 'rejected');
  await page.waitForFunction(() => location.hash.includes('status=rejected') && document.querySelector('main[aria-busy="false"]'));
  await page.waitForSelector('#recipes-summary');
  const rejected = await page.$$eval('#recipes-table tbody tr', (rows) => rows.map((r) => r.cells[0].textContent));
  assert.deepEqual(rejected, (await api('/api/v1/recipes?status=rejected')).data.map((r) => r.id));
  await open('#/recipes?sort=-status');
  const sorted = await page.$$eval('#recipes-table tbody tr', (rows) => rows.map((r) => r.cells[0].textContent));
  assert.deepEqual(sorted, (await api('/api/v1/recipes?sort=-status')).data.map((r) => r.id));
  assert.equal(await page.getAttribute('#recipes-table th:nth-child(2)', 'aria-sort'), 'descending');
  await page.screenshot({ path: path.join(shots, 'recipes.png'), fullPage: true });
  noProblems('recipes');

  step('recipe: provenance, timeline, feasibility and receipts');
  await open(`#/recipe/${encodeURIComponent(other.id)}`);
  const detail = (await api(`/api/v1/recipes/${encodeURIComponent(other.id)}`)).data;
  const body = await page.textContent('main');
  for (const fact of [detail.revisions[0].sha256, detail.revisions[0].commit, detail.revisions[0].path, detail.revisions[0].blob]) assert.ok(body.includes(fact), `the page shows ${fact}`);
  assert.equal(await page.locator('#timeline li').count(), detail.history.length);
  assert.ok(await page.locator('.receipt table.gates').count() >= 1, 'a receipt with its gates');
  assert.ok(body.includes('relative_quality_loss'), 'the measurements');
  await page.screenshot({ path: path.join(shots, 'recipe.png'), fullPage: true });
  noProblems('recipe');

  step('decisions: the chart and the table');
  await open('#/decisions');
  await page.waitForFunction(() => window.Chart && window.Chart.getChart(document.getElementById('decision-chart')));
  const decisions = (await api('/api/v1/decisions')).data;
  const rows = await page.$$eval('table.decisions tbody tr', (rs) => rs.map((r) => r.cells[0].textContent));
  assert.equal(rows.length, decisions.candidates.length);
  const plotted = await page.evaluate(() => window.Chart.getChart(document.getElementById('decision-chart')).data.datasets.map((d) => d.label));
  assert.ok(plotted.includes('the default (control)'), `the default is marked: ${plotted}`);
  assert.ok(plotted.some((l) => l.startsWith('gain threshold')) && plotted.some((l) => l.startsWith('quality loss threshold')), 'threshold lines');
  // Hovering a held-back candidate shows why it is held back.
  const held = decisions.candidates.find((c) => c.decision.action !== 'promote');
  assert.ok(held, 'a candidate held back or passed over');
  const point = await page.evaluate((id) => {
    const chart = window.Chart.getChart(document.getElementById('decision-chart'));
    for (let d = 0; d < chart.data.datasets.length; ++d) {
      const i = chart.data.datasets[d].data.findIndex((p) => p.c && p.c.recipe_id === id);
      if (i >= 0) {
        const el = chart.getDatasetMeta(d).data[i];
        const box = chart.canvas.getBoundingClientRect();
        return { x: box.left + el.x, y: box.top + el.y, d, i };
      }
    }
    return null;
  }, held.recipe_id);
  assert.ok(point, `${held.recipe_id} is plotted`);
  await page.mouse.move(point.x, point.y);
  const tip = await page.waitForFunction(({ d, i }) => {
    const chart = window.Chart.getChart(document.getElementById('decision-chart'));
    const active = chart.tooltip.getActiveElements();
    if (!active.length || active[0].datasetIndex !== d || active[0].index !== i) return null;
    return [].concat(chart.tooltip.body.map((b) => b.lines).flat()).join(' | ');
  }, point);
  const tipText = await tip.jsonValue();
  assert.ok(tipText.includes(held.decision.reason), `the tooltip gives the reason: ${tipText}`);
  await page.screenshot({ path: path.join(shots, 'decisions.png'), fullPage: true });
  noProblems('decisions');

  step('engines: what runs, with the tail of its log');
  await open('#/engines');
  const engines = (await api('/api/v1/engines')).data;
  assert.equal(await page.locator('pre.log-text').count(), engines.length);
  assert.ok((await page.textContent('pre.log-text')).trim().length > 0, 'a log tail');
  await page.screenshot({ path: path.join(shots, 'engines.png'), fullPage: true });
  noProblems('engines');

  step('a pin without the right token is refused; with it the default changes');
  await open(`#/recipe/${encodeURIComponent(other.id)}`);
  // Without a token: the console sends nothing (cancelled), and the API refuses such a write anyway.
  await page.click('#action-pin');
  await page.waitForSelector('#token-dialog[open]');
  await page.click('#token-cancel');
  await page.waitForFunction(() => document.getElementById('notice').textContent.includes('cancelled, nothing was sent'));
  const bare = await page.evaluate(async (id) => (await fetch('/api/v1/default', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ recipe_id: id }) })).status, other.id);
  assert.equal(bare, 401, 'a write without the token');
  problems.length = 0;  // that 401 was asked for
  await page.click('#action-pin');
  await page.waitForSelector('#token-dialog[open]');
  await page.fill('#token-input', 'not-the-token');
  await page.click('#token-form button[type="submit"]');
  await page.waitForFunction(() => document.getElementById('token-why').textContent.includes('refused'));
  await page.click('#token-cancel');
  await page.waitForSelector('#notice.notice-error');
  assert.equal((await api('/api/v1/default')).data.recipe_id, firstDefault.recipe_id, 'the default is unchanged');
  assert.equal((await api('/api/v1/status')).policy.pinned, null, 'nothing is pinned');
  problems.length = 0;  // the refused write is a 401 the page expected
  await page.click('#action-pin');
  await page.waitForSelector('#token-dialog[open]');
  await page.fill('#token-input', token);
  await page.click('#token-form button[type="submit"]');
  await page.waitForSelector('#notice.notice-ok');
  await until('the pinned recipe to become the default', async () => (await api('/api/v1/default')).data?.recipe_id === other.id, 60000);
  await open('#/');
  await page.waitForFunction((id) => document.getElementById('default-recipe')?.textContent.trim() === id, other.id, { timeout: 30000 });
  noProblems('pin');

  step('live: a registry commit shows up in the open overview');
  const added = 'anvil-tiny-llama-bf16-cpu-copy';
  const doc = JSON.parse(fs.readFileSync(path.join(registry, 'recipes/anvil-tiny-llama-bf16-cpu.json'), 'utf8'));
  doc.id = added;
  fs.writeFileSync(path.join(registry, 'recipes', `${added}.json`), JSON.stringify(doc, null, 2));
  git('add', '-A');
  git('commit', '-q', '-m', 'a new recipe');
  await page.waitForFunction((id) => [...document.querySelectorAll('#feed li')].some((li) => li.textContent.includes(id) && li.textContent.includes('candidate')),
    added, { timeout: 60000 });
  await page.screenshot({ path: path.join(shots, 'overview-live.png'), fullPage: true });
  noProblems('live');

  step('keyboard: the skip link first, then the sections');
  const keys = await context.newPage();
  keys.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await keys.goto(`${base}/#/`);
  await keys.waitForSelector('main[aria-busy="false"] h1');
  const focused = () => keys.evaluate(() => document.activeElement.textContent.trim());
  await keys.keyboard.press('Tab');
  assert.equal(await focused(), 'Skip to content');
  await keys.keyboard.press('Tab');
  await keys.keyboard.press('Tab');
  assert.equal(await focused(), 'Overview');
  await keys.keyboard.press('Tab');
  assert.equal(await focused(), 'Recipes');
  await keys.keyboard.press('Enter');
  await keys.waitForFunction(() => location.hash === '#/recipes' && document.querySelector('main[aria-busy="false"] h1')?.textContent === 'Recipes');
  // Navigation moves focus to the page, so the next Tab is inside it, not back in the header.
  await keys.keyboard.press('Tab');
  assert.ok(await keys.evaluate(() => document.getElementById('main').contains(document.activeElement)), 'focus is in the new page');
  await keys.close();

  step("a phone's width");
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true });
  const small = await phone.newPage();
  small.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  for (const [hash, name] of [['#/', 'phone-overview.png'], ['#/decisions', 'phone-decisions.png']]) {
    await small.goto(`${base}/${hash}`);
    await small.waitForSelector('main[aria-busy="false"] h1');
    const overflow = await small.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 1, `${hash} fits the phone's width (overflows by ${overflow} px)`);
    await small.screenshot({ path: path.join(shots, name), fullPage: true });
  }
  noProblems('phone');
  await phone.close();

  step('10,000 recipes more: the table pages, filters and sorts them');
  const before = (await api('/api/v1/recipes?limit=1')).meta.total;
  const template = JSON.parse(fs.readFileSync(path.join(registry, 'recipes/glm53-flash-exl3-q4-rtxpro6000-sglang-tp4.json'), 'utf8'));
  // A seed-shaped recipe ({data, meta}) that needs GPUs this machine lacks: judged and rejected on paper.
  for (let i = 0; i < 10000; ++i) {
    template.data.id = `load-${String(i).padStart(5, '0')}`;
    fs.writeFileSync(path.join(registry, 'recipes', `${template.data.id}.json`), JSON.stringify(template));
  }
  git('add', '-A');
  git('commit', '-q', '-m', '10,000 recipes');
  await until('anvild to judge 10,000 more recipes', async () => {
    const s = await api('/api/v1/status');
    return Object.values(s.recipes).reduce((a, b) => a + b, 0) >= before + 10000 && s.recipes.candidate === 0;
  }, 240000, 1000);
  const total = (await api('/api/v1/recipes?limit=1')).meta.total;
  let started = Date.now();
  await open('#/recipes?sort=-status&limit=100');
  const firstPageMs = Date.now() - started;
  assert.equal(await page.textContent('#recipes-summary'), `1–100 of ${total.toLocaleString('en-US')}`);
  const top = await page.$$eval('#recipes-table tbody tr', (rows) => rows.map((r) => r.cells[0].textContent));
  assert.deepEqual(top, (await api('/api/v1/recipes?sort=-status&limit=100')).data.map((r) => r.id));
  const lastOffset = Math.floor((total - 1) / 100) * 100;
  const lastSummary = `${(lastOffset + 1).toLocaleString('en-US')}–${total.toLocaleString('en-US')} of ${total.toLocaleString('en-US')}`;
  started = Date.now();
  await page.click('text=last »');
  // Waits for the last page's own summary: right after the click, the first page's is still drawn
  // and not busy, until the hash change starts the next draw.
  await page.waitForFunction(
    (expected) => location.hash.includes('offset=') && document.querySelector('main[aria-busy="false"] #recipes-summary')?.textContent === expected,
    lastSummary, { timeout: 30000 }).catch(() => {});
  const lastPageMs = Date.now() - started;
  assert.equal(await page.textContent('#recipes-summary'), lastSummary);
  await page.fill('#f-q', 'load-09999');
  await page.press('#f-q', 'Enter');
  await page.waitForFunction(() => location.hash.includes('q=load-09999') && document.querySelector('main[aria-busy="false"] #recipes-summary')?.textContent === '1–1 of 1');
  assert.deepEqual(await page.$$eval('#recipes-table tbody tr', (rows) => rows.map((r) => r.cells[0].textContent)), ['load-09999']);
  noProblems('10,000 recipes');
  console.log(`   at ${total} recipes: first page (sorted by status, 100 rows) drawn in ${firstPageMs} ms, the last page in ${lastPageMs} ms`);
  console.log(`console test passed; screenshots in ${shots}`);
} catch (e) {
  failed = true;
  console.error(`console test FAILED: ${e.stack || e.message}`);
  console.error(`anvild's log (${path.join(work, 'anvild.log')}), last lines:`);
  console.error(fs.readFileSync(path.join(work, 'anvild.log'), 'utf8').split('\n').slice(-30).join('\n'));
} finally {
  await cleanUp();
  if (!failed) fs.rmSync(work, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
