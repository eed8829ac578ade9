/*
 * app.js - ringmaster dashboard. Two views, routed on location.pathname:
 *   /            jobs list (state, progress) + submit form
 *   /jobs/{id}   one job: workers table, step-time chart per worker,
 *                all-reduce throughput chart, stall panel, event timeline,
 *                a worker's log tail (fetched when its "log" link is clicked)
 *
 * Data: one REST fetch per view to get the current state, then live updates
 * from the server-sent event stream /api/v1/events (?job=ID on a job page):
 *   progress  job state/step, workers, new step samples, open barriers
 *   event     a coordinator event (timeline; job/worker changes re-fetch the
 *             affected resource once)
 *   reset     events were missed: re-fetch the view
 * Nothing polls; the only timer re-renders "waiting for N s" texts locally.
 *
 * Reads need a token (docs/security.md): the page asks for one (the API
 * token or the read-only token) when a read answers 401, keeps it for the
 * tab in sessionStorage, and sends it on every request as a Bearer header
 * and on the event stream as ?access_token= (EventSource sends no headers).
 * The submit form's API token (localStorage) is sent on mutations, and on
 * reads when no read token was entered.
 */
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
const fmtInt = (n) => (n == null ? '-' : Number(n).toLocaleString('en-US'));
const fmtMs = (v) => (v == null ? '-' : v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0));
const fmtSecs = (ms) => (ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`);
const fmtAge = (ms) => { if (!ms) return '-'; const s = (Date.now() - ms) / 1000;
  return s < 60 ? `${Math.max(0, Math.round(s))} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : s < 86400 ? `${Math.round(s / 3600)} h ago` : new Date(ms).toLocaleDateString(); };
const fmtTime = (ms) => new Date(ms).toLocaleTimeString('en-GB', { hour12: false });
const badge = (state) => el('span', { class: `badge ${state}`, text: state });
const token = () => localStorage.getItem('ringmaster.token') || '';
const readToken = () => sessionStorage.getItem('ringmaster.readToken') || token();
const readHeaders = () => (readToken() ? { Authorization: `Bearer ${readToken()}` } : {});

async function api(path, opts = {}) {
  const headers = { Accept: 'application/json' };
  if (opts.body) headers['Content-Type'] = 'application/json';
  if (opts.auth && token()) headers.Authorization = `Bearer ${token()}`;
  else if (!opts.auth && readToken()) headers.Authorization = `Bearer ${readToken()}`;
  const r = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) { const e = new Error((data.error && data.error.message) || `HTTP ${r.status}`); e.field = data.error && data.error.field; e.status = r.status; throw e; }
  return data;
}

/* ---- live stream ----
 * The server subscribes a stream when it answers the request (api/sse.c:
 * a live stream starts at the newest message then), and `open` fires when
 * that answer's headers arrive. So a view reads its snapshot only after
 * the promise stream() returns has resolved: whatever changes after the
 * snapshot was read reaches the page as a message. Opening the stream
 * first is not enough: the browser may send the EventSource request after
 * the snapshot's own (they share at most 6 connections to the server),
 * and a job that ran and ended in between would never show. The promise
 * also resolves on an error or after STREAM_WAIT_MS, so a page without a
 * stream still shows its snapshot. A stream that reconnects after an
 * error calls handlers.reset (the page re-reads its state): what happened
 * while it was down is read, not lost. */
const STREAM_WAIT_MS = 5000;
let source = null;
function stream(query, handlers) {
  if (source) source.close();
  const live = $('#live');
  const t = readToken();
  const q = t ? `${query}${query ? '&' : '?'}access_token=${encodeURIComponent(t)}` : query;
  const es = new EventSource(`/api/v1/events${q}`);
  let settled = false, ready;
  const first = new Promise((resolve) => { ready = resolve; });
  const settle = () => { if (!settled) { settled = true; clearTimeout(timer); ready(); } };
  const timer = setTimeout(settle, STREAM_WAIT_MS);
  source = es;
  es.onopen = () => {
    live.className = 'live on'; $('#live-text').textContent = 'live';
    /* a snapshot was read before this subscription: read it again */
    if (settled && handlers.reset && source === es) handlers.reset();
    settle();
  };
  es.onerror = () => { live.className = 'live off'; $('#live-text').textContent = 'reconnecting'; settle(); };
  for (const [type, fn] of Object.entries(handlers))
    es.addEventListener(type, (m) => { try { fn(JSON.parse(m.data)); } catch (err) { console.error(err); } });
  return first;
}
const debounce = (fn, ms) => { let t = null; return () => { clearTimeout(t); t = setTimeout(fn, ms); }; };

/* ---- jobs view ---- */
/* "12 / 300"; "12" when the total is unknown (a command job whose program
 * did not tell it: coordinator rm_job_steps_total) */
const stepOf = (step, total) => total ? `${fmtInt(step)} / ${fmtInt(total)}` : fmtInt(step);

function jobRow(j) {
  const size = j.spec.world_size || j.spec.max_workers;
  const pct = j.steps_total ? Math.min(100, (100 * j.step) / j.steps_total) : 0;
  const tr = el('tr', { class: 'link', 'data-id': j.id },
    el('td', { class: 'num', text: j.id }), el('td', { text: j.spec.name }), el('td', {}, badge(j.state)),
    el('td', { class: 'num', text: `${j.workers_alive}/${size}` }),
    el('td', {}, el('div', { class: 'progress-cell' }, el('div', { class: 'progress' }, el('div', { class: 'bar', style: `width:${pct}%` })),
      el('span', { class: 'muted', text: stepOf(j.step, j.steps_total) }))),
    el('td', { class: 'muted', text: fmtAge(j.created_ms), title: new Date(j.created_ms).toLocaleString() }));
  tr.addEventListener('click', () => go(`/jobs/${j.id}`));
  return tr;
}

async function viewJobs() {
  const app = $('#app');
  app.replaceChildren($('#tpl-jobs').content.cloneNode(true));
  const body = $('#jobs-table tbody');
  const load = async () => {
    if (!body.isConnected) return; /* a debounced reload after leaving the view */
    const data = await api('/api/v1/jobs?limit=100');
    if (!body.isConnected) return;
    body.replaceChildren(...data.jobs.map(jobRow));
    $('#jobs-empty').hidden = data.jobs.length > 0;
    $('#jobs-total').textContent = `${data.total} job${data.total === 1 ? '' : 's'}`;
  };
  const reload = debounce(load, 250);
  /* The stream is open before the first load: a job that changes after
   * the load triggers a reload instead of being missed. */
  const opened = stream('', {
    event: (e) => { if (e.kind.startsWith('job') || e.kind === 'generation') reload(); },
    progress: (p) => {
      const tr = body.querySelector(`tr[data-id="${p.job_id}"]`);
      if (!tr) { reload(); return; }
      const pct = p.steps_total ? Math.min(100, (100 * p.step) / p.steps_total) : 0;
      tr.children[2].replaceChildren(badge(p.state));
      tr.children[3].textContent = `${p.workers_alive}/${tr.children[3].textContent.split('/')[1]}`;
      tr.querySelector('.bar').style.width = `${pct}%`;
      tr.querySelector('.progress-cell .muted').textContent = stepOf(p.step, p.steps_total);
    },
    reset: reload,
  });
  setupForm(); /* the form needs no data: usable while the list loads */
  await opened;
  await load();
}

/* Command jobs: one argument per line (blank lines inside the
 * list are kept as empty arguments; trailing ones are dropped), env one
 * KEY=VALUE per line. */
function commandFields(form) {
  const lines = (t) => t.replace(/\r/g, '').split('\n');
  const argv = lines(form.command.value);
  while (argv.length && argv[argv.length - 1] === '') argv.pop();
  while (argv.length && argv[0] === '') argv.shift();
  const out = { command: argv };
  const env = {};
  for (const l of lines(form.env.value)) {
    if (!l.trim()) continue;
    const eq = l.indexOf('=');
    env[eq < 0 ? l.trim() : l.slice(0, eq).trim()] = eq < 0 ? '' : l.slice(eq + 1);
  }
  if (Object.keys(env).length) out.env = env;
  if (form.workdir.value.trim()) out.workdir = form.workdir.value.trim();
  return out;
}

/* Aggregation: sent only when it is not the default (mean, no
 * clipping); the coordinator checks the method's rule against the world
 * size and names the field ("aggregation.f") when it cannot hold. */
function aggregationFields(form) {
  const num = (n) => Number(form.elements[n].value || 0);
  const a = { method: form.elements['aggregation.method'].value, f: num('aggregation.f'),
    clip_norm: num('aggregation.clip_norm'), m: num('aggregation.m') };
  if (a.method === 'mean' && !a.f && !a.clip_norm && !a.m) return null;
  return a;
}

function setupForm() {
  const form = $('#submit-form');
  const cmd = $('#command-fields');
  const showCommand = () => { cmd.hidden = form.workload.value !== 'command'; };
  form.workload.addEventListener('change', showCommand);
  showCommand();
  form.token.value = token();
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const msg = $('#submit-msg');
    form.querySelectorAll('.bad').forEach((i) => i.classList.remove('bad'));
    localStorage.setItem('ringmaster.token', form.token.value.trim());
    const spec = { name: form.name.value.trim(), world_size: Number(form.world_size.value), steps: Number(form.steps.value),
      workload: form.workload.value, algorithm: form.algorithm.value, launcher: form.launcher.value, dtype: form.dtype.value };
    if (form.workload_options.value.trim()) spec.workload_options = form.workload_options.value.trim();
    if (spec.workload === 'command') Object.assign(spec, commandFields(form));
    const agg = aggregationFields(form);
    if (agg) spec.aggregation = agg;
    msg.className = 'form-msg'; msg.textContent = 'Submitting...';
    try {
      const job = await api('/api/v1/jobs', { method: 'POST', body: JSON.stringify(spec), auth: true });
      msg.className = 'form-msg ok'; msg.textContent = `Job ${job.id} submitted.`;
      go(`/jobs/${job.id}`);
    } catch (err) {
      msg.className = 'form-msg err';
      msg.textContent = err.status === 401 ? 'Unauthorized: enter the server\'s API token.' : err.message;
      const input = err.field && (form.elements[err.field] || form.elements[err.field.split('.')[0]]);
      if (input) input.classList.add('bad');
      if (err.status === 401) form.token.classList.add('bad');
    }
  });
}

/* ---- job view ---- */
const PALETTE = ['#2563eb', '#0891b2', '#7c3aed', '#0d9488', '#4f46e5', '#0284c7', '#9333ea', '#059669'];
const MAX_POINTS = 300;

function makeCharts() {
  if (typeof Chart === 'undefined') {
    $('#app').prepend(el('div', { class: 'notice', text: 'Charts are unavailable: Chart.js is not installed on the server (Debian package libjs-chart.js).' }));
    return null;
  }
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  Chart.defaults.color = '#64748b';
  const common = { animation: false, spanGaps: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
    interaction: { mode: 'nearest', intersect: false },
    scales: { x: { type: 'linear', title: { display: true, text: 'step' }, ticks: { precision: 0 }, grid: { color: '#f1f5f9' } },
      y: { beginAtZero: true, grid: { color: '#f1f5f9' } } },
    plugins: { legend: { position: 'bottom', labels: { boxWidth: 12, boxHeight: 2 } } } };
  const stepChart = new Chart($('#step-chart'), { type: 'line', data: { datasets: [] },
    options: { ...common, scales: { ...common.scales, y: { ...common.scales.y, title: { display: true, text: 'ms' } } } } });
  const tputChart = new Chart($('#tput-chart'), { type: 'line', data: { datasets: [{ label: 'all-reduce GB/s', data: [], borderColor: '#0d9488',
    backgroundColor: 'rgba(13,148,136,.12)', fill: true, pointRadius: 0, borderWidth: 2, tension: 0.2 }] },
    options: { ...common, plugins: { legend: { display: false } }, scales: { ...common.scales, y: { ...common.scales.y, title: { display: true, text: 'GB/s' } } } } });
  /* What the program reports with its steps (loss, accuracy): loss on the left
   * axis, accuracy on the right (0..1); the card shows once a step carries one. */
  const metricsChart = new Chart($('#metrics-chart'), { type: 'line', data: { datasets: [
    { label: 'loss', data: [], yAxisID: 'y', borderColor: '#2563eb', pointRadius: 0, borderWidth: 2, tension: 0.15 },
    { label: 'accuracy', data: [], yAxisID: 'y1', borderColor: '#059669', pointRadius: 0, borderWidth: 2, tension: 0.15 }] },
    options: { ...common, scales: { ...common.scales, y: { ...common.scales.y, title: { display: true, text: 'loss' } },
      y1: { position: 'right', min: 0, max: 1, title: { display: true, text: 'accuracy' }, grid: { drawOnChartArea: false } } } } });
  /* One small chart per named metric the program reports (perplexity, lr,
   * ...): made on the metric's first sample (JobView.drawNamed). */
  const namedChart = (canvas, name, i) => new Chart(canvas, { type: 'line', data: { datasets: [
    { label: name, data: [], borderColor: PALETTE[i % PALETTE.length], pointRadius: 0, borderWidth: 2, tension: 0.15 }] },
    options: { ...common, plugins: { legend: { display: false } },
      scales: { ...common.scales, y: { grid: { color: '#f1f5f9' }, title: { display: true, text: name } } } } });
  return { stepChart, tputChart, metricsChart, namedChart };
}

class JobView {
  constructor(id) { this.id = id; this.seen = new Set(); this.byStep = new Map(); this.metrics = new Map(); this.named = new Map(); this.namedCharts = new Map(); this.stragglers = new Set(); this.barriers = []; this.offset = 0; this.lastEvent = 0; }

  async start() {
    const app = $('#app');
    app.replaceChildren($('#tpl-job').content.cloneNode(true));
    this.charts = makeCharts();
    $('#cancel-btn').addEventListener('click', () => this.cancel());
    $('#log-refresh').addEventListener('click', () => this.showLog(this.logIndex));
    $('#log-close').addEventListener('click', () => { this.logIndex = undefined; $('#log-panel').hidden = true; });
    /* The stream is open before the snapshot is read (stream()), so nothing
     * that happens after the read is missed: events that arrive before or
     * while loadAll runs are held and applied after it (a worker that joins
     * and finishes in that window still gets its row). */
    this.held = [];
    const opened = stream(`?job=${this.id}`, {
      progress: (p) => { if (p.job_id === this.id) this.onProgress(p); },
      event: (e) => this.onEvent(e),
      reset: () => this.loadAll(),
    });
    await opened;
    await this.loadAll();
    this.timer = setInterval(() => this.renderStall(), 1000);
  }

  stop() { clearInterval(this.timer); }

  async loadAll() {
    const base = `/api/v1/jobs/${this.id}`;
    this.held = this.held || [];
    let job, workers, events, barriers, steps;
    try {
      [job, workers, events, barriers, steps] = await Promise.all([api(base), api(`${base}/workers`),
        api(`${base}/events`), api(`${base}/barriers`), api(`${base}/steps?limit=4000`)]);
    } catch (err) { this.held = null; throw err; }
    if (!$('#timeline')) return; /* the view was left meanwhile */
    this.renderJob(job);
    this.renderWorkers(workers.workers);
    $('#timeline').replaceChildren();
    this.lastEvent = 0;
    events.events.forEach((e) => this.addEvent(e));
    this.setBarriers(barriers.barriers, barriers.now_ms);
    this.addSamples(steps.steps);
    const held = this.held;
    this.held = null;
    (held || []).forEach((e) => this.onEvent(e));
  }

  renderJob(j) {
    this.job = j;
    $('#job-id').textContent = `job ${j.id}`;
    $('#job-name').textContent = j.spec.name;
    const s = j.spec;
    const size = s.world_size ? `${s.world_size} workers` : `${s.min_workers}-${s.max_workers} workers (elastic)`;
    $('#job-meta').innerHTML = '';
    $('#job-meta').append(`${size} · workload `, el('b', { text: s.workload }), ` · algorithm `, el('b', { text: s.algorithm }),
      ` · ${s.dtype} · launcher ${s.launcher}${s.deterministic ? ' · deterministic' : ''} · generation ${j.generation}${j.reason ? ' · ' : ''}`, j.reason ? el('b', { text: j.reason }) : '');
    this.renderCommand(s);
    this.renderAggregation(s);
    this.renderSecure(j);
    this.renderStraggler(j);
    this.renderState(j.state, j.step, j.steps_total);
    this.renderResult(j);
  }

  /* Straggler policy: "straggler deadline", "straggler stale
   * (max_staleness 3)"; under auto the mode the coordinator is in now,
   * "auto: mitigating (deadline) since step 42" or "auto: synchronous"
   * (each switch is a straggler_auto event, and refetches the job). Nothing
   * for none. */
  renderStraggler(j) {
    const s = j.spec, p = s.straggler_policy || 'none';
    if (p === 'none') return;
    if (p !== 'auto') {
      $('#job-meta').append(' · straggler ', el('b', { text: p }), p === 'stale' ? ` (max_staleness ${s.max_staleness})` : '');
      return;
    }
    const m = j.straggler_mitigation || 'off';
    $('#job-meta').append(' · straggler ', el('b', {
      id: 'job-mitigation', class: m === 'off' ? '' : 'mitigating',
      text: m === 'off' ? 'auto: synchronous' : `auto: mitigating (${m}) since step ${j.straggler_mitigation_step}`,
    }));
  }

  /* Aggregation: "aggregation krum · f 1 · clip_norm 5" next to
   * the job's meta line; nothing for the default (mean, no clipping). */
  renderAggregation(s) {
    const a = s.aggregation || { method: 'mean' };
    const parts = ['f', 'm', 'clip_norm', 'tau', 'iterations'].filter((k) => a[k]).map((k) => ` · ${k} ${a[k]}`);
    if (a.method === 'mean' && !parts.length) return;
    $('#job-meta').append(' · aggregation ', el('b', { id: 'job-aggregation', text: a.method }), parts.join(''));
  }

  /* Secure aggregation: "secure aggregation · 32-bit · clip 1 ·
   * threshold 3 · neighbours all", and once a loss was recovered "2 steps
   * redone (3 dropouts)" (secure_recovered events refetch the job). Nothing
   * for a plain job (the spec shows the object only when it is on). */
  renderSecure(j) {
    const a = j.spec.secure_aggregation;
    if (!a) return;
    const scale = a.scale ? ` · scale ${a.scale}` : '';
    $('#job-meta').append(' · ', el('b', { id: 'job-secure', class: 'secure', text: 'secure aggregation' }),
      ` · ${a.bits}-bit · clip ${a.clip}${scale} · threshold ${a.threshold} · neighbours ${a.neighbours}`);
    const n = j.secure_recovered_steps || 0;
    if (n) {
      $('#job-meta').append(' · ', el('b', { id: 'job-secure-recovered', class: 'recovered',
        text: `${n} step${n === 1 ? '' : 's'} redone (${j.secure_dropouts} dropout${j.secure_dropouts === 1 ? '' : 's'})` }));
    }
  }

  /* Command jobs: the argv as a shell would quote it, env and workdir. */
  renderCommand(s) {
    const box = $('#job-command');
    const argv = s.command || [];
    box.hidden = !argv.length;
    box.innerHTML = '';
    if (!argv.length) return;
    const q = (a) => (/^[A-Za-z0-9_.,\/:=@%+-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);
    box.append('command ', el('code', { id: 'job-command-line', text: argv.map(q).join(' ') }));
    const env = Object.entries(s.env || {});
    /* the server masks every value ("***": secrets are never returned) */
    if (env.length) box.append(' · env ', el('code', { text: env.map(([k, v]) => `${k}=${v === '***' ? v : q(v)}`).join(' ') }));
    if (s.workdir) box.append(' · workdir ', el('code', { text: s.workdir }));
  }

  /* The "Result" card: final test accuracy and loss (and the other numeric
   * figures) of a succeeded job, from GET /jobs/{id}'s "result" object
   * (train reports the held-out accuracy as "accuracy"). */
  renderResult(j) {
    const card = $('#result-card');
    if (!card) return;
    const r = j.result;
    card.hidden = !(j.state === 'succeeded' && r && typeof r === 'object');
    if (card.hidden) return;
    const acc = r.test_accuracy ?? r.accuracy;
    const figs = [];
    const fig = (label, value, main) => el('div', { class: `fig${main ? ' main' : ''}` },
      el('span', { class: 'muted', text: label }), el('b', { text: value }));
    if (typeof acc === 'number') figs.push(fig('test accuracy', `${(100 * acc).toFixed(2)} %`, true));
    if (typeof r.test_loss === 'number') figs.push(fig('test loss', r.test_loss.toFixed(4), true));
    for (const [k, v] of Object.entries(r)) {
      if (['accuracy', 'test_accuracy', 'test_loss'].includes(k) || typeof v !== 'number') continue;
      figs.push(fig(k.replace(/_/g, ' '), Number.isInteger(v) ? fmtInt(v) : v.toFixed(4)));
    }
    $('#result-figures').replaceChildren(...figs);
    $('#result-note').textContent = typeof r.test_samples === 'number'
      ? `held-out split of ${fmtInt(r.test_samples)} samples` : 'reported by the workers when they finished';
  }

  renderState(state, step, total) {
    $('#job-state').replaceWith(Object.assign(badge(state), { id: 'job-state' }));
    $('#job-bar').style.width = `${total ? Math.min(100, (100 * step) / total) : 0}%`;
    $('#job-progress').textContent = total ? `step ${fmtInt(step)} of ${fmtInt(total)}` : `step ${fmtInt(step)}`;
    $('#cancel-btn').disabled = ['succeeded', 'failed', 'cancelled'].includes(state);
  }

  renderWorkers(workers) {
    const body = $('#workers-table tbody');
    if (!body) return; /* the job view was left while an update was in flight */
    const current = workers.filter((w) => w.rank >= 0 || w.state === 'joining');
    this.stragglers = new Set(current.filter((w) => w.straggler).map((w) => w.rank));
    body.replaceChildren(...current.map((w) => el('tr', { class: `${w.straggler ? 'straggler' : ''} ${w.suspect ? 'suspect' : ''} ${w.state === 'lost' ? 'lost' : ''}`, 'data-rank': w.rank },
      el('td', { class: 'num', text: w.rank < 0 ? '-' : w.rank }),
      el('td', {}, badge(w.state), ...(w.straggler ? [el('span', { class: 'badge straggler', text: 'straggler' })] : []),
        ...(w.suspect ? [el('span', { class: 'badge suspect', text: 'suspect', title: 'Byzantine suspect: excluded by the robust aggregation in most recent steps (see the byzantine_suspect event)' })] : [])),
      el('td', { text: w.host || '-' }),
      el('td', { class: 'links', text: w.links || '-', title: `offers: ${w.transports || 'tcp'}` }), el('td', { class: 'num', text: w.generation }), el('td', { class: 'num', text: fmtInt(w.step) }),
      el('td', { class: 'num', text: fmtMs(w.step_ms) }), el('td', { class: 'num', text: fmtMs(w.comm_ms) }),
      el('td', { class: 'num', text: ['lost', 'left', 'failed', 'stopped'].includes(w.state) ? '-' : fmtSecs(w.ms_since_heartbeat) }),
      el('td', {}, ...(this.hasLogs && w.launch_index >= 0 ? [this.logLink(w.launch_index)] : [])))));
    $('#workers-empty').hidden = current.length > 0;
    const alive = current.filter((w) => w.state === 'running' || w.state === 'joining').length;
    const lost = current.filter((w) => w.state === 'lost').length;
    $('#workers-summary').textContent = `${alive} alive${lost ? `, ${lost} lost` : ''}`;
    this.styleDatasets();
  }

  /* Worker logs exist for the launchers that start processes (local, slurm),
   * one per process: worker-<launch_index>.log. The launch index is not the
   * rank after a recovery (ranks move on a shrink; a replacement gets the
   * next index), so the link uses the worker's launch_index. */
  get hasLogs() { return !!this.job && ['local', 'slurm'].includes(this.job.spec.launcher); }

  logLink(index) {
    const a = el('a', { class: 'log-link', 'data-log': index, title: `worker-${index}.log`, text: 'log' });
    a.addEventListener('click', () => this.showLog(index));
    return a;
  }

  async showLog(index) {
    this.logIndex = index;
    const panel = $('#log-panel');
    if (!panel) return;
    panel.hidden = false;
    $('#log-title').textContent = `Worker log (launch index ${index})`;
    let text, meta;
    try {
      const r = await fetch(`/api/v1/jobs/${this.id}/workers/${index}/log?tail=200`, { headers: readHeaders() });
      text = await r.text();
      if (!r.ok) { let m = text; try { m = JSON.parse(text).error.message; } catch (e) { /* not JSON */ }
        text = m; meta = `HTTP ${r.status}`; } else meta = `last 200 lines · ${fmtInt(Number(r.headers.get('X-Log-Size')))} bytes in all`;
    } catch (err) { text = err.message; meta = 'error'; }
    if (this.logIndex !== index || !$('#log-panel')) return; /* another log was asked for meanwhile */
    const pre = $('#log-text');
    pre.textContent = text || '(empty)';
    pre.scrollTop = pre.scrollHeight;
    $('#log-meta').textContent = meta;
  }

  addEvent(e) {
    if (e.seq <= this.lastEvent) return;
    this.lastEvent = e.seq;
    const bad = /lost|fail|broken|cancel|error|byzantine_suspect|secure_threshold/.test(e.kind), good = /succeeded|released|formed|generation|secure_recovered/.test(e.kind);
    const li = el('li', {}, el('span', { class: 't', text: fmtTime(e.time_ms) }),
      el('span', { class: `k ${bad ? 'bad' : good ? 'good' : ''}`, text: e.kind.replace(/_/g, ' ') }), el('span', { text: e.message }));
    $('#timeline').prepend(li);
  }

  onEvent(e) {
    if (e.job_id !== this.id) return;
    if (this.held) { this.held.push(e); return; } /* a snapshot is being read */
    this.addEvent(e);
    if (!this.refetch) this.refetch = debounce(async () => {
      const base = `/api/v1/jobs/${this.id}`;
      const [job, workers] = await Promise.all([api(base), api(`${base}/workers`)]);
      this.renderJob(job); this.renderWorkers(workers.workers);
    }, 200);
    if (/^(job|worker|generation|barrier|straggler_auto|secure_)/.test(e.kind)) this.refetch();
  }

  onProgress(p) {
    this.renderState(p.state, p.step, p.steps_total);
    if (this.job) { this.job.step = p.step; this.job.state = p.state; }
    this.renderWorkers(p.workers.map((w) => ({ ...w, ms_since_heartbeat: w.ms_since_heartbeat })));
    this.addSamples(p.samples);
    this.setBarriers(p.barriers, p.now_ms);
  }

  addSamples(samples) {
    if (!this.charts) return;
    const { stepChart, tputChart } = this.charts;
    let changed = false;
    for (const s of samples) {
      const key = `${s.generation}:${s.rank}:${s.step}`;
      if (this.seen.has(key)) continue;
      this.seen.add(key); changed = true;
      let ds = stepChart.data.datasets.find((d) => d.rank === s.rank);
      if (!ds) {
        ds = { label: `rank ${s.rank}`, rank: s.rank, data: [], pointRadius: 0, borderWidth: 1.5, tension: 0.15 };
        stepChart.data.datasets.push(ds);
        stepChart.data.datasets.sort((a, b) => a.rank - b.rank);
      }
      const total = (s.compute_ms || 0) + (s.comm_ms || 0) + (s.wait_ms || 0);
      const prev = ds.data[ds.data.length - 1];
      if (prev && s.step > prev.x + 1) ds.data.push({ x: prev.x + 1, y: null }); /* sampled: show a gap */
      ds.data.push({ x: s.step, y: total });
      if (ds.data.length > MAX_POINTS) ds.data.shift();
      if (typeof s.loss === 'number' || typeof s.accuracy === 'number') {
        const m = this.metrics.get(s.step) || { loss: 0, nl: 0, acc: 0, na: 0 };
        if (typeof s.loss === 'number') { m.loss += s.loss; m.nl += 1; }
        if (typeof s.accuracy === 'number') { m.acc += s.accuracy; m.na += 1; }
        this.metrics.set(s.step, m);
      }
      for (const [name, v] of Object.entries(s.metrics || {})) { /* step -> sum and count of ranks */
        if (typeof v !== 'number') continue;
        if (!this.named.has(name)) this.named.set(name, new Map());
        const per = this.named.get(name), a = per.get(s.step) || { sum: 0, n: 0 };
        a.sum += v; a.n += 1; per.set(s.step, a);
      }
      if (s.comm_ms > 0 && s.allreduce_bytes > 0) {
        const agg = this.byStep.get(s.step) || { sum: 0, n: 0 };
        agg.sum += s.allreduce_bytes / (s.comm_ms / 1000) / 1e9; agg.n += 1;
        this.byStep.set(s.step, agg);
      }
    }
    if (!changed) return;
    for (const ds of stepChart.data.datasets) ds.data.sort((a, b) => a.x - b.x);
    const steps = [...this.byStep.keys()].sort((a, b) => a - b).slice(-MAX_POINTS);
    for (const k of [...this.byStep.keys()]) if (k < steps[0]) this.byStep.delete(k);
    const pts = [];
    for (const k of steps) {
      if (pts.length && k > pts[pts.length - 1].x + 1) pts.push({ x: pts[pts.length - 1].x + 1, y: null });
      pts.push({ x: k, y: this.byStep.get(k).sum / this.byStep.get(k).n });
    }
    tputChart.data.datasets[0].data = pts;
    this.styleDatasets();
    tputChart.update('none');
    this.drawMetrics();
    this.drawNamed();
  }

  /* Each named metric per step, the mean of the ranks that reported it, in
   * its own chart of the "Metrics" card (shown once a step carries one). */
  drawNamed() {
    if (!this.named.size) return;
    const names = [...this.named.keys()].sort();
    for (const name of names) {
      let chart = this.namedCharts.get(name);
      if (!chart) {
        const canvas = el('canvas');
        $('#named-metrics').append(el('div', { class: 'metric-item', 'data-metric': name },
          el('h3', { text: name }), el('div', { class: 'chart small' }, canvas)));
        chart = this.charts.namedChart(canvas, name, this.namedCharts.size);
        this.namedCharts.set(name, chart);
      }
      const per = this.named.get(name);
      const steps = [...per.keys()].sort((a, b) => a - b).slice(-MAX_POINTS);
      for (const k of [...per.keys()]) if (k < steps[0]) per.delete(k);
      chart.data.datasets[0].data = steps.map((k) => ({ x: k, y: per.get(k).sum / per.get(k).n }));
      chart.update('none');
    }
    $('#named-metrics-card').hidden = false;
  }

  drawMetrics() {
    if (!this.metrics.size) return;
    const { metricsChart } = this.charts;
    const steps = [...this.metrics.keys()].sort((a, b) => a - b).slice(-MAX_POINTS);
    for (const k of [...this.metrics.keys()]) if (k < steps[0]) this.metrics.delete(k);
    const loss = [], acc = [];
    for (const k of steps) {
      const m = this.metrics.get(k);
      if (m.nl) loss.push({ x: k, y: m.loss / m.nl });
      if (m.na) acc.push({ x: k, y: m.acc / m.na });
    }
    metricsChart.data.datasets[0].data = loss;
    metricsChart.data.datasets[1].data = acc;
    metricsChart.data.datasets[1].hidden = acc.length === 0;
    $('#metrics-card').hidden = false;
    metricsChart.update('none');
  }

  /* Stragglers stand out: flagged by the coordinator, or a recent median
   * step time 1.5x above the median of all ranks. */
  styleDatasets() {
    if (!this.charts) return;
    const { stepChart } = this.charts;
    const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor(s.length / 2)] : 0; };
    const recent = stepChart.data.datasets.map((d) => median(d.data.slice(-20).filter((p) => p.y != null).map((p) => p.y)));
    const overall = median(recent);
    stepChart.data.datasets.forEach((d, i) => {
      const slow = this.stragglers.has(d.rank) || (overall > 0 && recent[i] > 1.5 * overall && stepChart.data.datasets.length > 1);
      d.borderColor = slow ? '#dc2626' : PALETTE[d.rank % PALETTE.length];
      d.borderWidth = slow ? 3 : 1.5;
      d.label = slow ? `rank ${d.rank} (straggler)` : `rank ${d.rank}`;
      d.order = slow ? 0 : 1;
    });
    stepChart.update('none');
  }

  setBarriers(barriers, nowMs) {
    this.barriers = barriers.filter((b) => b.state === 'open' && b.missing.length > 0);
    this.skew = nowMs ? nowMs - Date.now() : 0;
    this.renderStall();
  }

  /* In words: which ranks have not reached which barrier, for how long. */
  renderStall() {
    const panel = $('#stall');
    if (!panel) return; /* view left while an update was in flight */
    const now = Date.now() + (this.skew || 0);
    const items = [];
    let critical = false;
    for (const b of this.barriers) {
      const waited = now - b.opened_ms;
      if (waited < 2000) continue; /* a normal barrier closes quickly */
      const left = b.deadline_ms - now;
      critical ||= left < 0.25 * (b.deadline_ms - b.opened_ms);
      const ranks = b.missing.map((m) => m.rank);
      const who = ranks.length === 1 ? `Rank ${ranks[0]} has` : `Ranks ${ranks.slice(0, -1).join(', ')} and ${ranks[ranks.length - 1]} have`;
      const details = b.missing.map((m) => `rank ${m.rank}: last step ${fmtInt(m.step)}, ${m.state}, heartbeat ${fmtSecs(m.ms_since_heartbeat)} ago`).join('; ');
      items.push(el('li', {}, el('b', { text: `${who} not reached barrier "${b.name}" after ${fmtSecs(waited)}` }),
        ` (generation ${b.generation}, ${b.arrived} of ${b.expected} arrived, ${left > 0 ? `deadline in ${fmtSecs(left)}` : 'deadline passed'}). ${details}.`));
    }
    panel.hidden = items.length === 0;
    panel.classList.toggle('critical', critical);
    $('#stall-list').replaceChildren(...items);
  }

  async cancel() {
    const btn = $('#cancel-btn');
    btn.disabled = true;
    try {
      const j = await api(`/api/v1/jobs/${this.id}/cancel`, { method: 'POST', body: JSON.stringify({ reason: 'cancelled from the dashboard' }), auth: true });
      this.renderJob(j);
    } catch (err) {
      alert(err.status === 401 ? 'Unauthorized: set the API token in the submit form first.' : err.message);
      btn.disabled = false;
    }
  }
}

/* ---- router ---- */
let view = null;
function go(path) { history.pushState({}, '', path); route(); }
async function route() {
  if (view && view.stop) view.stop();
  view = null;
  const m = location.pathname.match(/^\/jobs\/(\d+)$/);
  try {
    if (m) { view = new JobView(Number(m[1])); await view.start(); } else await viewJobs();
  } catch (err) {
    if (err.status === 401) { login(); return; }
    $('#app').replaceChildren(el('div', { class: 'card' }, el('h2', { text: 'Error' }), el('p', { text: err.message })));
  }
}

/* A read answered 401: ask for a token (once per tab), then show the view. */
function login() {
  if (source) { source.close(); source = null; }
  const had = sessionStorage.getItem('ringmaster.readToken') || token();
  const input = el('input', { name: 'token', type: 'password', id: 'login-token', autocomplete: 'off',
    placeholder: 'API token or read-only token' });
  const form = el('form', { id: 'login-form', class: 'login' },
    el('label', { text: 'Token' }, input), el('button', { type: 'submit', class: 'btn', text: 'Show jobs' }));
  const msg = el('p', { id: 'login-msg', class: had ? 'err' : 'muted', text: had
    ? 'The server refused this token: enter its API token or read-only token (serve --read-token).'
    : 'This coordinator needs a token to read its jobs: enter its API token or read-only token (serve --read-token).' });
  if (had) input.classList.add('bad');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem('ringmaster.readToken', input.value.trim());
    route();
  });
  $('#app').replaceChildren(el('div', { class: 'card' }, el('h2', { text: 'Sign in' }), msg, form));
  input.focus();
}
window.addEventListener('popstate', route);
route();

/* ---- storage banner ----
 * /readyz answers 503 storage_error ("disk full" in its message when that
 * is the cause) while the coordinator
 * cannot write its database (docs/storage.md): submissions and cancels are
 * refused then, and running jobs wait. Polled every 5 s; the banner goes
 * when the store takes writes again. */
async function storeBanner() {
  const b = $('#store-banner');
  try {
    const r = await fetch('/readyz');
    const j = await r.json().catch(() => ({}));
    const code = j.error && j.error.code;
    if (r.status === 503 && code === 'storage_error') {
      b.textContent = 'Storage: ' + j.error.message +
        '. Nothing new is stored until writes succeed again; running jobs wait.';
      b.hidden = false;
    } else {
      b.hidden = true;
    }
  } catch (err) { /* the coordinator is away: the live indicator says so */ }
}
storeBanner();
setInterval(storeBanner, 5000);
