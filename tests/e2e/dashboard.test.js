#!/usr/bin/env node
/*
 * dashboard.test.js - end-to-end test of the web dashboard in real headless
 * Chromium (Debian's /usr/bin/chromium driven by playwright-core).
 *
 *   1. start `ringmaster serve` on free ports (heartbeat timeout 2 s) with
 *      a read-only token; the page asks for a token, refuses a wrong one
 *      and signs in with the read token
 *   2. open the dashboard, submit a 3-worker job in the form (launcher
 *      "none"); the worker token is read from the form's own POST answer
 *   3. start 3 real `ringmaster-worker` processes for that job
 *   4. see the workers table fill with 3 running workers and the step chart
 *      gain points (it moves)
 *   5. SIGKILL one worker and see a worker marked lost in the table
 *   6. a job started by the local launcher: click the "log" link of its
 *      worker row and see the log tail (launcher header line, token masked)
 *   7. submit a command job in the form (workload "command", one argument
 *      per line, env, workdir; launcher "none"): the POST carries the argv
 *      and the job page shows the command line, env and workdir
 *   8. the Links column: a 3-worker job whose offers are set
 *      by RINGMASTER_TRANSPORTS / RINGMASTER_HOST_ID (two "shm,tcp" on one
 *      host id, one "tcp"): the two shm workers' cells say "shm 1, tcp 1",
 *      the TCP-only one "tcp 2" (the pair rule of common/rm_transports.h),
 *      and each cell's tooltip is "offers: " + the worker's REST transports;
 *      checked on a finished job, and on a running one after two progress
 *      updates (the rows are redrawn from them)
 *   9. the training card: a train job's reported loss and accuracy are
 *      plotted per step (the last point equals the mean of the ranks' step
 *      reports); the card stays hidden for a job that reports no loss
 *  10. screenshots go to the artifacts folder (job-running.png,
 *      job-lost.png, jobs.png, job-links.png, job-log.png, job-command.png,
 *      job-training.png)
 * Every wait has a deadline; every process is stopped by PID.
 *
 * usage: node dashboard.test.js --ringmaster PATH --worker PATH --artifacts DIR
 * exit 0 pass, 1 fail, 77 skipped (no chromium / playwright-core)
 */
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
}
const RINGMASTER = arg('ringmaster');
const WORKER = arg('worker');
const ARTIFACTS = arg('artifacts', path.join(__dirname, '../../artifacts'));
const CHROMIUM = process.env.RINGMASTER_CHROMIUM || '/usr/bin/chromium';
const TOKEN = 'e2e-token-' + process.pid;
const READ = 'e2e-read-' + process.pid; /* the read-only token the page signs in with */

let chromium;
try { ({ chromium } = require('playwright-core')); } catch (e) {
  console.log('SKIP: npm playwright-core not installed (cd tests/e2e && npm ci)'); process.exit(77);
}
if (!fs.existsSync(CHROMIUM)) { console.log(`SKIP: ${CHROMIUM} not found (Debian package chromium)`); process.exit(77); }

const procs = [];
function startServer(tmp) {
  return new Promise((resolve, reject) => {
    const p = spawn(RINGMASTER, ['serve', '--db', path.join(tmp, 'rm.db'), '--grpc', '127.0.0.1:0', '--http', '127.0.0.1:0',
      '--heartbeat-timeout-ms', '2000', '--log-dir', path.join(tmp, 'launched'), '--worker', WORKER], { env: { ...process.env, RINGMASTER_API_TOKEN: TOKEN, RINGMASTER_READ_TOKEN: READ, RINGMASTER_LOG_LEVEL: 'warn',
      RINGMASTER_API_TICK_MS: '500' }, stdio: ['ignore', 'pipe', fs.openSync(path.join(tmp, 'server.log'), 'w')] });
    procs.push(p);
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not print its addresses in 20 s')), 20000);
    p.stdout.on('data', (d) => {
      out += d;
      const http = out.match(/http listening on (\S+)/), grpc = out.match(/grpc listening on (\S+)/);
      if (http && grpc) { clearTimeout(timer); resolve({ http: http[1], grpc: grpc[1] }); }
    });
    p.on('exit', (code) => reject(new Error(`server exited early (${code})`)));
  });
}

function startWorker(grpc, job, token, tmp, i, env = {}, steps = 1000000) {
  const log = fs.openSync(path.join(tmp, `worker-${i}.log`), 'w');
  const p = spawn(WORKER, ['--coordinator', grpc, '--job', String(job), '--token', token,
    '--workload-options', 'count=65536', '--steps', String(steps)],
    { env: { ...process.env, RINGMASTER_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', log, log] });
  procs.push(p);
  return p;
}

/* The Links case: a 3-worker job whose offers are set by the environment:
 * two "shm,tcp" workers with one host id and one "tcp" worker. By the pair
 * rule (common/rm_transports.h) the shm ones link "shm 1, tcp 1", the TCP
 * one "tcp 2". */
async function linksJob(base, srv, tmp, name, steps, logBase) {
  const r = await fetch(`${base}/api/v1/jobs`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`,
    'Content-Type': 'application/json' }, body: JSON.stringify({ name, world_size: 3, steps,
    launcher: 'none', workload_options: 'count=1024' }) });
  const job = await r.json();
  if (r.status !== 201) throw new Error(`${name} submit answered ${r.status}: ${JSON.stringify(job)}`);
  const shm = { RINGMASTER_TRANSPORTS: 'shm,tcp', RINGMASTER_HOST_ID: 'e2ehosta' };
  job.workers = [shm, shm, { RINGMASTER_TRANSPORTS: 'tcp' }]
    .map((env, i) => startWorker(srv.grpc, job.id, job.token, tmp, logBase + i, env, steps));
  return job;
}

async function waitState(base, id, state, ms) {
  const end = Date.now() + ms;
  let j = null;
  while (Date.now() < end) {
    j = await (await fetch(`${base}/api/v1/jobs/${id}`, { headers: { Authorization: `Bearer ${READ}` } })).json();
    if (j.state === state) return j;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`job ${id} not ${state} in ${ms} ms: ${JSON.stringify(j)}`);
}

/* rank -> { offer (REST transports), text and title the Links cell should have } */
async function linksWanted(base, id) {
  const ws = (await (await fetch(`${base}/api/v1/jobs/${id}/workers`, { headers: { Authorization: `Bearer ${READ}` } })).json()).workers;
  const shmOffer = /^shm:e2ehosta\/[0-9a-f]{16} tcp$/;
  const want = new Map();
  for (const w of ws.filter((x) => x.rank >= 0)) {
    if (w.transports !== 'tcp' && !shmOffer.test(w.transports))
      throw new Error(`rank ${w.rank} offers "${w.transports}", not "tcp" or "shm:e2ehosta/<nonce> tcp"`);
    want.set(String(w.rank), { offer: w.transports, text: w.transports === 'tcp' ? 'tcp 2' : 'shm 1, tcp 1',
      title: `offers: ${w.transports}` });
  }
  const tcp = [...want.values()].filter((w) => w.offer === 'tcp').length;
  if (want.size !== 3 || tcp !== 1) throw new Error(`job ${id}: members ${JSON.stringify([...want])}`);
  return want;
}

function linkCells(page) {
  return page.$$eval('#workers-table tbody tr', (rows) => rows.map((r) => ({
    rank: r.dataset.rank, text: r.querySelector('td.links').textContent, title: r.querySelector('td.links').title })));
}

/* "" when every row's Links cell and tooltip are as wanted, else what differs. */
function linksProblems(cells, want) {
  const out = [];
  if (cells.length !== want.size) out.push(`${cells.length} rows, not ${want.size}`);
  for (const c of cells) {
    const w = want.get(c.rank);
    if (!w) out.push(`row of rank ${c.rank} is no member`);
    else if (c.text !== w.text || c.title !== w.title)
      out.push(`rank ${c.rank}: cell "${c.text}" title "${c.title}", not "${w.text}" / "${w.title}"`);
  }
  return out.join('; ');
}

async function stopAll() {
  for (const p of procs.reverse()) {
    if (p.exitCode !== null || p.signalCode !== null) continue;
    const done = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    const t = setTimeout(() => { try { p.kill('SIGKILL'); } catch (e) { /* gone */ } }, 10000);
    await done;
    clearTimeout(t);
  }
}

async function main() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rm-e2e-'));
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  let ctx = null;
  let page = null;
  try {
    const srv = await startServer(tmp);
    const base = `http://${srv.http}`;
    ctx = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
      executablePath: CHROMIUM, headless: true, viewport: { width: 1440, height: 1100 },
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = ctx.pages()[0] || await ctx.newPage();
    page.setDefaultTimeout(30000);
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));

    await page.goto(`${base}/`);
    /* reads need a token: the page asks, says when one is refused, then
     * shows the jobs with the read-only token */
    await page.waitForSelector('#login-form');
    await page.fill('#login-token', 'not-the-token');
    await page.click('#login-form button[type=submit]');
    await page.waitForSelector('#login-msg.err');
    await page.fill('#login-token', READ);
    await page.click('#login-form button[type=submit]');
    await page.waitForSelector('#submit-form');
    await page.waitForSelector('#live.on');
    await page.fill('input[name=name]', 'e2e-allreduce');
    await page.fill('input[name=world_size]', '3');
    await page.fill('input[name=steps]', '1000000');
    await page.selectOption('select[name=launcher]', 'none');
    await page.fill('input[name=workload_options]', 'count=65536');
    await page.fill('input[name=token]', TOKEN);
    const [resp] = await Promise.all([
      page.waitForResponse((r) => r.url().endsWith('/api/v1/jobs') && r.request().method() === 'POST'),
      page.click('#submit-form button[type=submit]'),
    ]);
    if (resp.status() !== 201) throw new Error(`submit answered ${resp.status()}: ${await resp.text()}`);
    const job = await resp.json();
    await page.waitForURL(`${base}/jobs/${job.id}`);
    await page.waitForSelector('#job-name:has-text("e2e-allreduce")');

    const workers = [0, 1, 2].map((i) => startWorker(srv.grpc, job.id, job.token, tmp, i));
    await page.waitForFunction(() => document.querySelectorAll('#workers-table tbody tr .badge.running').length === 3,
      null, { timeout: 30000 });
    const points = () => page.evaluate(() => {
      const c = Chart.getChart('step-chart');
      return c ? c.data.datasets.reduce((n, d) => n + d.data.length, 0) : -1;
    });
    await page.waitForFunction(() => { const c = Chart.getChart('step-chart'); return c && c.data.datasets.length === 3 && c.data.datasets.every((d) => d.data.length > 0); },
      null, { timeout: 30000 });
    const before = await points();
    await page.waitForFunction((n) => Chart.getChart('step-chart').data.datasets.reduce((s, d) => s + d.data.length, 0) > n,
      before, { timeout: 30000 });
    const tput = await page.evaluate(() => Chart.getChart('tput-chart').data.datasets[0].data.length);
    if (tput === 0) throw new Error('all-reduce throughput chart has no points');
    if (!(await page.evaluate(() => document.querySelector('#metrics-card').hidden)))
      throw new Error('the training card is shown for a job whose steps report no loss');
    await page.waitForFunction(() => /step [1-9]/.test(document.querySelector('#job-progress').textContent), null, { timeout: 30000 });
    await page.screenshot({ path: path.join(ARTIFACTS, 'job-running.png'), fullPage: true });

    workers[2].kill('SIGKILL');
    await page.waitForFunction(() => document.querySelectorAll('#workers-table tbody tr .badge.lost').length >= 1,
      null, { timeout: 30000 });
    const timeline = await page.textContent('#timeline');
    if (!/lost/.test(timeline)) throw new Error('event timeline does not mention the lost worker');
    await page.screenshot({ path: path.join(ARTIFACTS, 'job-lost.png'), fullPage: true });

    await page.click('.crumbs a');
    await page.waitForSelector(`#jobs-table tr[data-id="${job.id}"]`);
    await page.screenshot({ path: path.join(ARTIFACTS, 'jobs.png'), fullPage: true });

    // The Links column: offers set per worker, so the pairs are known.
    // A finished job first (nothing ticks any more: deterministic), then a
    // running one after progress updates.
    const done = await linksJob(base, srv, tmp, 'e2e-links-done', 30, 10);
    await waitState(base, done.id, 'succeeded', 60000);
    // three ticks (RINGMASTER_API_TICK_MS 500): the final progress update is
    // published before the page reads its snapshot, not after it
    await new Promise((r) => setTimeout(r, 1500));
    await page.goto(`${base}/jobs/${done.id}`);
    await page.waitForSelector('#job-name:has-text("e2e-links-done")');
    const heads = await page.$$eval('#workers-table thead th', (ths) => ths.map((t) => t.textContent.trim()));
    if (!heads.includes('Links')) throw new Error(`workers table has no Links column: ${heads.join(', ')}`);
    await page.waitForFunction(() => document.querySelectorAll('#workers-table tbody tr').length === 3, null, { timeout: 30000 });
    const bad = linksProblems(await linkCells(page), await linksWanted(base, done.id));
    if (bad) throw new Error(`finished job: ${bad}`);
    await page.screenshot({ path: path.join(ARTIFACTS, 'job-links.png'), fullPage: true });

    const run = await linksJob(base, srv, tmp, 'e2e-links', 1000000, 20);
    await page.goto(`${base}/jobs/${run.id}`);
    await page.waitForSelector('#job-name:has-text("e2e-links")');
    await page.waitForFunction(() => document.querySelectorAll('#workers-table tbody tr .badge.running').length === 3,
      null, { timeout: 30000 });
    for (let k = 0; k < 2; k++) { // two progress updates after all run
      const was = await page.textContent('#job-progress');
      await page.waitForFunction((t) => document.querySelector('#job-progress').textContent !== t, was, { timeout: 30000 });
    }
    // the rows are redrawn from each progress update (api/ticker.c
    // workers_json), which carries links and transports too
    const running = linksProblems(await linkCells(page), await linksWanted(base, run.id));
    if (running) throw new Error(`running job, after progress updates: ${running}`);
    for (const w of run.workers) w.kill('SIGTERM');

    // A job the local launcher starts: its worker row links to the log tail.
    const r = await fetch(`${base}/api/v1/jobs`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`,
      'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'e2e-local', world_size: 1, steps: 5,
      launcher: 'local', workload_options: 'count=1024' }) });
    const local = await r.json();
    if (r.status !== 201) throw new Error(`local submit answered ${r.status}: ${JSON.stringify(local)}`);
    await page.goto(`${base}/jobs/${local.id}`);
    await page.click('#workers-table a.log-link[data-log="0"]', { timeout: 60000 });
    await page.waitForFunction(() => /--token \*\*\*/.test(document.querySelector('#log-text').textContent), null,
      { timeout: 30000 });
    const logText = await page.textContent('#log-text');
    if (logText.includes(local.token)) throw new Error('the log panel shows the worker token');
    if (!/bytes in all/.test(await page.textContent('#log-meta'))) throw new Error('log panel without its size line');
    await page.screenshot({ path: path.join(ARTIFACTS, 'job-log.png'), fullPage: true });

    // A job that runs and ends while the page's event stream is still
    // connecting (the 2026-12-05 CI flake: the snapshot was read before the
    // stream subscribed, the job ended in between, the page never showed
    // its workers). The browser holds the stream's request for 2 s; the
    // page must read its snapshot after the stream is open.
    const quick = await (await fetch(`${base}/api/v1/jobs`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`,
      'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'e2e-quick', world_size: 2, steps: 5,
      launcher: 'none', workload_options: 'count=1024' }) })).json();
    let held = 0;
    const hold = async (route) => { held++; await new Promise((r) => setTimeout(r, 2000)); await route.continue(); };
    await page.route('**/api/v1/events*', hold);
    await page.goto(`${base}/jobs/${quick.id}`);
    const quickWorkers = [0, 1].map((i) => startWorker(srv.grpc, quick.id, quick.token, tmp, 30 + i, {}, 5));
    await Promise.all(quickWorkers.map((w) => new Promise((r) => (w.exitCode !== null ? r() : w.on('exit', r)))));
    await waitState(base, quick.id, 'succeeded', 30000);
    await page.waitForFunction(() => document.querySelectorAll('#workers-table tbody tr .badge.left').length === 2
      && /succeeded/.test(document.querySelector('#job-state').textContent), null, { timeout: 30000 });
    await page.unroute('**/api/v1/events*', hold);
    if (held < 1) throw new Error('the event stream request was never held: the check above proved nothing');

    // The training card: a train job (local launcher) reports loss and
    // accuracy with every step; the page plots them per step.
    const tr = await (await fetch(`${base}/api/v1/jobs`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`,
      'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'e2e-train', world_size: 2, steps: 30,
      workload: 'train', launcher: 'local' }) })).json();
    // The page is opened once the job is over: it then reads every step from
    // /steps (a live page gets the progress stream's samples, one per rank
    // and tick, so a 30-step job that runs in a second leaves few points).
    await waitState(base, tr.id, 'succeeded', 120000);
    await page.goto(`${base}/jobs/${tr.id}`);
    await page.waitForFunction(() => {
      const c = Chart.getChart('metrics-chart');
      return c && !document.querySelector('#metrics-card').hidden && c.data.datasets[0].data.length >= 10
        && c.data.datasets[1].data.length >= 10;
    }, null, { timeout: 30000 });
    const curve = await page.evaluate(() => Chart.getChart('metrics-chart').data.datasets.map((d) => d.data));
    const steps = await (await fetch(`${base}/api/v1/jobs/${tr.id}/steps?limit=1000`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json();
    const last = curve[0][curve[0].length - 1];
    const reported = steps.steps.filter((x) => x.step === last.x && typeof x.loss === 'number');
    const mean = reported.reduce((a, x) => a + x.loss, 0) / reported.length;
    if (!reported.length || Math.abs(mean - last.y) > 1e-9 * Math.max(1, Math.abs(mean)))
      throw new Error(`the loss plotted at step ${last.x} is ${last.y}, the steps say ${mean}`);
    if (curve[1].some((p) => p.y < 0 || p.y > 1)) throw new Error('an accuracy outside 0..1 was plotted');
    // The Metrics card: the train workload reports named metrics (lr,
    // examples/s) with each step; each gets its own chart, the mean of the
    // ranks per step, as /steps has them.
    await page.waitForFunction(() => !document.querySelector('#named-metrics-card').hidden
      && document.querySelectorAll('#named-metrics .metric-item').length >= 2, null, { timeout: 30000 });
    const named = await page.$$eval('#named-metrics .metric-item', (items) => items.map((it) => {
      const c = Chart.getChart(it.querySelector('canvas'));
      return { name: it.dataset.metric, title: it.querySelector('h3').textContent, data: c ? c.data.datasets[0].data : [] };
    }));
    for (const want of ['examples/s', 'lr']) {
      const m = named.find((x) => x.name === want);
      if (!m || m.title !== want || m.data.length < 10) throw new Error(`no chart of ${want} with 10 points: ${JSON.stringify(named.map((x) => [x.name, x.data.length]))}`);
      const p = m.data[m.data.length - 1];
      const at = steps.steps.filter((x) => x.step === p.x && typeof x.metrics[want] === 'number');
      const avg = at.reduce((a, x) => a + x.metrics[want], 0) / at.length;
      if (!at.length || Math.abs(avg - p.y) > 1e-9 * Math.max(1, Math.abs(avg)))
        throw new Error(`${want} plotted at step ${p.x} is ${p.y}, the steps say ${avg}`);
    }
    await page.screenshot({ path: path.join(ARTIFACTS, 'job-training.png'), fullPage: true });

    // A command job from the form: argv one per line.
    await page.goto(`${base}/`);
    await page.waitForSelector('#submit-form');
    if (await page.isVisible('textarea[name=command]')) throw new Error('command field shown for allreduce');
    await page.fill('input[name=name]', 'e2e-command');
    await page.fill('input[name=world_size]', '2');
    await page.selectOption('select[name=workload]', 'command');
    await page.selectOption('select[name=launcher]', 'none');
    await page.fill('input[name=workload_options]', '');
    await page.fill('textarea[name=command]', 'python3\ntrain.py\n--epochs\n3\nhello world\n');
    await page.fill('textarea[name=env]', 'OMP_NUM_THREADS=2\n');
    await page.fill('input[name=workdir]', '/tmp');
    await page.fill('input[name=token]', TOKEN);
    const [cresp] = await Promise.all([
      page.waitForResponse((x) => x.url().endsWith('/api/v1/jobs') && x.request().method() === 'POST'),
      page.click('#submit-form button[type=submit]'),
    ]);
    if (cresp.status() !== 201) throw new Error(`command submit answered ${cresp.status()}: ${await cresp.text()}`);
    const cjob = await cresp.json();
    const argv = JSON.stringify(cjob.spec.command);
    if (argv !== JSON.stringify(['python3', 'train.py', '--epochs', '3', 'hello world']))
      throw new Error(`command job's argv is ${argv}`);
    if (cjob.spec.env.OMP_NUM_THREADS !== '***' || cjob.spec.workdir !== '/tmp') /* values masked */
      throw new Error(`command job's env/workdir: ${JSON.stringify(cjob.spec)}`);
    await page.waitForURL(`${base}/jobs/${cjob.id}`);
    await page.waitForSelector('#job-command-line');
    const shown = await page.textContent('#job-command');
    for (const want of ["python3 train.py --epochs 3 'hello world'", 'OMP_NUM_THREADS=***', '/tmp'])
      if (!shown.includes(want)) throw new Error(`job page shows "${shown}", not "${want}"`);
    await page.screenshot({ path: path.join(ARTIFACTS, 'job-command.png'), fullPage: true });
    if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
    console.log(`e2e dashboard: passed; screenshots in ${ARTIFACTS}`);
    return 0;
  } catch (err) {
    console.error('FAIL:', err.message);
    if (page) {
      await page.screenshot({ path: path.join(ARTIFACTS, 'failure.png'), fullPage: true }).catch(() => {});
      // what the page showed, for a CI run whose screenshot is out of reach
      const shown = await page.evaluate(() => `${location.pathname} [${document.querySelector('#live-text')?.textContent}]\n`
        + (document.querySelector('#app')?.innerText || '')).catch((e) => `(page unreadable: ${e.message})`);
      console.error(`--- the page\n${shown.slice(0, 3000)}`);
    }
    const server = procs[0];
    if (server && (server.exitCode !== null || server.signalCode !== null))
      console.error(`the coordinator died during the test: exit ${server.exitCode} signal ${server.signalCode}`);
    for (const f of fs.readdirSync(tmp, { recursive: true })) if (f.endsWith('.log') && !f.startsWith('profile')) console.error(`--- ${f}\n${fs.readFileSync(path.join(tmp, f), 'utf8').slice(-1500)}`);
    return 1;
  } finally {
    if (ctx) await ctx.close().catch(() => {});
    await stopAll();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().then((code) => process.exit(code));
