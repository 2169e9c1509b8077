// lockstep dashboard — vanilla JS, no libraries, no network beyond this server.
//
// Data comes from GET /api/runs and GET /api/runs/<name> (docs/dashboard.md),
// or, in a `lockstep report` file, from the JSON embedded in
// <script id="lockstep-data">. Every drawn chart's container carries
// data-series-count and data-point-count (and the per-worker and phase panels
// data-ranks), so a headless browser's DOM dump shows what was drawn.
'use strict';
(function () {
  const {
    el, isNum, fmtNum, fmtBytes, fmtDuration, fmtDate, column, byStep, lineChart, phaseChart
  } = LockstepCharts;
  const POLL_MS = 2000;        // while a selected or listed run is running
  const IDLE_POLL_MS = 10000;  // otherwise: new runs still show up
  const STALE_S = 120;         // "running" but no update for this long
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
                  '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

  const state = {
    report: null,      // the embedded data of a report, or null when served
    logdir: '',
    runs: [],          // [{name, run} | {name, error}]
    selected: [],      // run names, in selection order
    details: {},       // name -> GET /api/runs/<name>
    errors: {},        // name -> error text of its last fetch
    listError: null,
    sweep: null,       // GET /api/sweep, or null
    phaseWindow: 50,
    timer: null,
    initialised: false,
  };

  function nowSeconds() {
    return state.report ? state.report.report.generated_time : Date.now() / 1000;
  }

  function runInfo(name) {
    const d = state.details[name];
    if (d && d.run) return d.run;
    const entry = state.runs.find((r) => r.name === name);
    return (entry && entry.run) || {};
  }

  function isStale(run) {
    return run.status === 'running' && isNum(run.updated_time) && nowSeconds() - run.updated_time > STALE_S;
  }

  function runColor(name) {
    const i = state.selected.indexOf(name);
    return COLORS[(i < 0 ? 0 : i) % COLORS.length];
  }

  // ---- the runs table ------------------------------------------------------------

  function renderRuns() {
    const tbody = document.querySelector('#runs tbody');
    tbody.replaceChildren();
    const noRuns = document.getElementById('no-runs');
    noRuns.hidden = state.runs.length > 0;
    if (!state.runs.length) {
      noRuns.textContent = state.report ? 'This report holds no run.' :
        `No runs in ${state.logdir} yet. A run appears when training writes ${state.logdir}/NAME/run.json ` +
        `(monitor.dir=${state.logdir}/NAME in its config); this page checks every ${IDLE_POLL_MS / 1000} s.`;
    }
    for (const entry of state.runs) {
      const run = entry.run || {};
      const box = el('input', { type: 'checkbox', id: 'sel-' + entry.name });
      box.checked = state.selected.includes(entry.name);
      box.disabled = !!state.report;
      box.addEventListener('change', () => toggle(entry.name, box.checked));
      const statusText = entry.error ? 'unreadable' : isStale(run) ? 'running?' : (run.status || '?');
      const status = el('span', { class: 'status ' + (entry.error ? 'failed' : isStale(run) ? 'stale' : (run.status || '')), text: statusText });
      if (isStale(run)) status.title = 'status is running but run.json has not changed for ' + fmtDuration(nowSeconds() - run.updated_time);
      const stepCell = el('td', { class: 'num' });
      if (isNum(run.step)) {
        stepCell.append(document.createTextNode(run.step + (isNum(run.total_steps) ? ' / ' + run.total_steps : '')));
        if (isNum(run.total_steps) && run.total_steps > 0) {
          const bar = el('span', { class: 'progress' }, [el('span', { style: `width:${Math.min(100, run.step / run.total_steps * 100)}%` })]);
          stepCell.append(bar);
        }
      }
      const nameCell = el('td', {}, [el('label', { for: 'sel-' + entry.name, text: entry.name })]);
      if (entry.error) nameCell.append(el('div', { class: 'error', text: entry.error }));
      tbody.append(el('tr', {}, [
        el('td', {}, [box]), nameCell, el('td', {}, [status]),
        el('td', { class: 'num', text: isNum(run.world_size) ? String(run.world_size) : '–' }), stepCell,
        el('td', { class: 'num', text: isNum(run.global_batch) ? String(run.global_batch) : '–' }),
        el('td', { text: run.hostname || '–' }),
        el('td', { text: fmtDate(run.start_time) }),
        el('td', { text: !isNum(run.updated_time) ? '–' : state.report ? fmtDate(run.updated_time)
          : fmtDuration(nowSeconds() - run.updated_time) + ' ago' }),
      ]));
    }
  }

  // ---- the charts over all selected runs ----------------------------------------

  function renderCompare() {
    const loss = [], throughput = [];
    const many = state.selected.length > 1;
    for (const name of state.selected) {
      const d = state.details[name];
      if (!d) continue;
      const color = runColor(name);
      loss.push(Object.assign({ name: many ? name + ' train' : 'train loss', color, mode: 'line' },
                              byStep(d.train, 'loss')));
      loss.push(Object.assign({ name: many ? name + ' validation' : 'validation loss', color, mode: 'points' },
                              byStep(d.val, 'val_loss')));
      throughput.push(Object.assign({ name: many ? name : 'samples/s', color, mode: 'line' },
                                    byStep(d.train, 'samples_per_sec')));
    }
    const empty = state.selected.length ? 'no data yet' : 'select a run above';
    lineChart(document.getElementById('loss-chart'), loss, { xLabel: 'step', empty });
    lineChart(document.getElementById('throughput-chart'), throughput, { xLabel: 'step', yZero: true, empty });
  }

  // ---- one panel per selected run ---------------------------------------------------

  const panels = new Map();  // name -> {root, parts}

  function panelFor(name) {
    if (panels.has(name)) return panels.get(name);
    const parts = {
      title: el('h2'),
      summary: el('div', { class: 'summary' }),
      error: el('div', { class: 'error', hidden: '' }),
      workers: el('div', { class: 'workers grid', 'data-run': name }),
      gpusTitle: el('h3', { text: 'GPUs (one panel per worker; time since the run started)', hidden: '' }),
      gpus: el('div', { class: 'gpus grid', 'data-panels': '0', hidden: '' }),
      memoryTitle: el('h3', { text: 'Memory per worker (end of run; MB = 10^6 bytes)', hidden: '' }),
      memory: el('table', { class: 'memory-table', 'data-ranks': '0', hidden: '' }),
      stalenessTitle: el('h3', { hidden: '' }),
      staleness: el('table', { class: 'staleness-table', 'data-updates': '0', 'data-bins': '0', hidden: '' }),
      generationsTitle: el('h3', { hidden: '' }),
      generations: el('table', { class: 'generations-table', 'data-changes': '0', hidden: '' }),
      phaseChart: el('div', { class: 'chart phases', 'data-run': name }),
      phaseTable: el('table', { class: 'phase-table' }),
      windowInput: el('input', { type: 'number', min: '1', value: String(state.phaseWindow) }),
      timelines: el('div'),
      config: el('pre', { class: 'config' }),
    };
    parts.windowInput.addEventListener('change', () => {
      const v = parseInt(parts.windowInput.value, 10);
      if (v > 0) { state.phaseWindow = v; render(); }
    });
    const root = el('section', { class: 'run-panel', 'data-run': name }, [
      parts.title, parts.summary, parts.error,
      el('h3', { text: 'Workers (one line per rank; time since the run started)' }), parts.workers,
      parts.gpusTitle, parts.gpus,
      parts.memoryTitle, parts.memory,
      parts.stalenessTitle, parts.staleness, parts.generationsTitle, parts.generations,
      el('h3', { text: 'Step phases per rank' }),
      el('div', { class: 'phase-controls' }, [document.createTextNode('mean over the last '), parts.windowInput,
        document.createTextNode(' steps of each rank')]),
      parts.phaseChart, parts.phaseTable,
      parts.timelines,
      el('details', {}, [el('summary', { text: 'config.yaml' }), parts.config]),
    ]);
    const panel = { root, parts };
    panels.set(name, panel);
    return panel;
  }

  function workerChart(title, series, opts) {
    const chart = el('div', { class: 'chart', 'data-chart': opts.key });
    const fig = el('figure', {}, [el('figcaption', { text: title }), chart]);
    return { fig, chart, series, opts };
  }

  // One panel per worker's GPU (the gpu_* fields of system/rank<R>.jsonl): utilisation and memory
  // used (% of the device's total) over time; the caption holds the last memory, power, SM clock
  // and temperature readings.
  function gpuPanels(system, t0) {
    const GiB = 1024 * 1024 * 1024;
    return system.filter((s) => column(s, 'gpu_util').some(isNum)).map((s) => {
      const lastOf = (key) => { const v = column(s, key); for (let i = v.length - 1; i >= 0; i--) if (isNum(v[i])) return v[i]; return NaN; };
      const xs = column(s, 'time').map((t) => t - t0);
      const total = column(s, 'gpu_mem_total_bytes');
      const memPct = column(s, 'gpu_mem_bytes').map((v, i) => (isNum(v) && isNum(total[i]) && total[i] > 0 ? 100 * v / total[i] : NaN));
      const used = lastOf('gpu_mem_bytes'), all = lastOf('gpu_mem_total_bytes');
      const facts = [
        isNum(used) ? (used / GiB).toFixed(1) + (isNum(all) ? ' / ' + (all / GiB).toFixed(1) : '') + ' GiB' : null,
        isNum(lastOf('gpu_power_watts')) ? lastOf('gpu_power_watts').toFixed(0) + ' W' : null,
        isNum(lastOf('gpu_sm_clock_mhz')) ? lastOf('gpu_sm_clock_mhz').toFixed(0) + ' MHz SM' : null,
        isNum(lastOf('gpu_temp_c')) ? lastOf('gpu_temp_c').toFixed(0) + ' °C' : null,
      ].filter(Boolean);
      const index = lastOf('gpu_index');
      const title = 'rank ' + s.rank + (isNum(index) ? ' · GPU ' + index : '') + ': utilisation and memory used, % (last: ' +
        (facts.join(', ') || '–') + ')';
      const c = workerChart(title, [
        { name: 'utilisation %', color: COLORS[0], mode: 'line', xs, ys: column(s, 'gpu_util') },
        { name: 'memory used %', color: COLORS[1], mode: 'line', xs, ys: memPct },
      ], { key: 'gpu-' + s.rank, xLabel: 'seconds', yZero: true });
      c.fig.dataset.gpuPanel = String(s.rank);
      return c;
    });
  }

  // run.json "memory" (the Trainer's per-rank figures, written when the run finished).
  function renderMemory(parts, memory) {
    const ranks = Array.isArray(memory) ? memory : [];
    parts.memoryTitle.hidden = parts.memory.hidden = ranks.length === 0;
    parts.memory.dataset.ranks = String(ranks.length);
    const mb = (v) => (isNum(v) ? (v / 1e6).toFixed(2) : '–');
    const columns = [['parameters', 'parameter_bytes'], ['gradients', 'gradient_bytes'], ['optimizer', 'optimizer_bytes']];
    const head = el('tr', {}, ['rank', ...columns.map((c) => c[0]), 'model state', 'comm buffers', 'fwd+bwd peak', 'peak RSS']
      .map((t) => el('th', { text: t })));
    const rows = ranks.map((m) => {
      const state = columns.reduce((sum, c) => sum + (isNum(m[c[1]]) ? m[c[1]] : 0), 0);
      return el('tr', {}, [el('td', { text: String(m.rank) }), ...columns.map((c) => el('td', { class: 'num', text: mb(m[c[1]]) })),
        el('td', { class: 'num', 'data-model-state': String(state), text: mb(state) }),
        el('td', { class: 'num', text: mb(m.comm_buffer_bytes) }), el('td', { class: 'num', text: mb(m.step_peak_bytes) }),
        el('td', { class: 'num', text: mb(m.peak_rss_bytes) })]);
    });
    parts.memory.replaceChildren(head, ...rows);
  }

  // run.json "generations" (an elastic run that lost workers): each new generation's step, size and
  // how long the others took to go on.
  function renderGenerations(parts, generations) {
    const list = Array.isArray(generations) ? generations : [];
    parts.generationsTitle.hidden = parts.generations.hidden = list.length === 0;
    parts.generations.dataset.changes = String(list.length);
    const seconds = list.map((g) => g.recovery_seconds).filter(isNum);
    parts.generationsTitle.textContent = 'Elastic: ' + list.length + ' change(s) of the workers' +
      (seconds.length ? ', ' + seconds.reduce((a, b) => a + b, 0).toFixed(2) + ' s to go on in all' : '');
    const head = el('tr', {}, ['generation', 'after step', 'workers', 'seconds to go on'].map((t) => el('th', { text: t })));
    const rows = list.map((g) => el('tr', { 'data-generation': String(g.generation) }, [
      el('td', { class: 'num', text: String(g.generation) }), el('td', { class: 'num', text: String(g.step) }),
      el('td', { class: 'num', text: g.previous_world_size + ' → ' + g.world_size }),
      el('td', { class: 'num', text: isNum(g.recovery_seconds) ? g.recovery_seconds.toFixed(2) : '–' })]));
    parts.generations.replaceChildren(head, ...rows);
  }

  // run.json "ps" (an async_ps run, once finished): the applied updates by staleness, a bar each,
  // and each worker's seconds waiting for the servers.
  function renderStaleness(parts, ps) {
    const counts = ps && Array.isArray(ps.staleness) ? ps.staleness.map((v) => (isNum(v) ? v : 0)) : [];
    const total = counts.reduce((a, b) => a + b, 0);
    parts.stalenessTitle.hidden = parts.staleness.hidden = counts.length === 0;
    parts.staleness.dataset.updates = String(total);
    parts.staleness.dataset.bins = String(counts.length);
    const waits = ps && Array.isArray(ps.wait_seconds) ? ps.wait_seconds : [];
    parts.stalenessTitle.textContent = 'Parameter server: staleness of the ' + total + ' applied updates (bound ' +
      (isNum(ps && ps.staleness_bound) ? ps.staleness_bound : counts.length - 1) + ')' +
      (waits.length ? '; workers waited ' + waits.map((w) => (isNum(w) ? w.toFixed(1) + ' s' : '–')).join(', ') : '');
    const top = Math.max(1, ...counts);
    const head = el('tr', {}, ['staleness', 'updates', ''].map((t) => el('th', { text: t })));
    const rows = counts.map((c, g) => el('tr', { 'data-staleness': String(g), 'data-count': String(c) }, [
      el('td', { class: 'num', text: String(g) }), el('td', { class: 'num', text: String(c) }),
      el('td', {}, [el('div', { class: 'bar', style: 'width:' + (100 * c / top).toFixed(1) + '%' })])]));
    parts.staleness.replaceChildren(head, ...rows);
  }

  function renderPanel(name) {
    const { root, parts } = panelFor(name);
    const d = state.details[name];
    const run = runInfo(name);
    parts.title.replaceChildren(el('span', { class: 'swatch', style: 'background:' + runColor(name) }),
      document.createTextNode(name + ' '), el('span', { class: 'status ' + (run.status || ''), text: run.status || '?' }));
    const err = state.errors[name];
    parts.error.hidden = !err;
    parts.error.textContent = err ? 'cannot read run ' + name + ': ' + err : '';
    if (!d) { parts.workers.dataset.ranks = '0'; return root; }

    const train = d.train || {};
    const last = (key) => { const v = column(train, key); for (let i = v.length - 1; i >= 0; i--) if (isNum(v[i])) return v[i]; return NaN; };
    const lastVal = (key) => { const v = column(d.val, key); for (let i = v.length - 1; i >= 0; i--) if (isNum(v[i])) return v[i]; return NaN; };
    const end = run.status === 'running' ? nowSeconds() : run.updated_time;
    const figures = [
      ['step', isNum(run.step) ? run.step + (isNum(run.total_steps) ? ' / ' + run.total_steps : '') : '–'],
      ['train loss', fmtNum(last('loss'))], ['validation loss', fmtNum(lastVal('val_loss'))],
      ['validation accuracy', isNum(lastVal('val_accuracy')) ? (lastVal('val_accuracy') * 100).toFixed(2) + ' %' : '–'],
      ['samples/s', fmtNum(last('samples_per_sec'))], ['learning rate', fmtNum(last('lr'))],
      ['workers', isNum(run.world_size) ? String(run.world_size) : '–'],
      ['global batch', isNum(run.global_batch) ? String(run.global_batch) : '–'],
      ['host', run.hostname || '–'], ['elapsed', fmtDuration(end - run.start_time)],
    ];
    parts.summary.replaceChildren(...figures.map(([k, v]) => el('div', {}, [el('b', { text: v }), el('span', { text: k })])));

    const system = d.system || [];
    const t0 = isNum(run.start_time) ? run.start_time : Math.min(...system.map((s) => column(s, 'time')[0]).filter(isNum));
    const perRank = (key, scale) => system.map((s, i) => ({
      name: 'rank ' + s.rank, color: COLORS[i % COLORS.length], mode: 'line',
      xs: column(s, 'time').map((t) => t - t0), ys: column(s, key).map((v) => (isNum(v) ? v * scale : v)),
    }));
    const hasGpu = system.some((s) => column(s, 'gpu_util').some(isNum) || column(s, 'gpu_mem_bytes').some(isNum));
    const MiB = 1 / (1024 * 1024);
    const charts = [
      workerChart('CPU % (100 = one core)', perRank('cpu_percent', 1), { key: 'cpu', xLabel: 'seconds', yZero: true }),
      workerChart('Resident memory (MiB)', perRank('rss_bytes', MiB), { key: 'rss', xLabel: 'seconds', yZero: true }),
    ];
    if (hasGpu) {
      charts.push(workerChart('GPU utilisation %', perRank('gpu_util', 1), { key: 'gpu-util', xLabel: 'seconds', yZero: true }));
      charts.push(workerChart('GPU memory (MiB)', perRank('gpu_mem_bytes', MiB), { key: 'gpu-mem', xLabel: 'seconds', yZero: true }));
    }
    parts.workers.replaceChildren(...charts.map((c) => c.fig));
    parts.workers.dataset.ranks = String(system.length);
    parts.workers.dataset.gpu = hasGpu ? 'yes' : 'no';
    for (const c of charts) lineChart(c.chart, c.series, Object.assign({ empty: 'no samples yet (system/rank<R>.jsonl)' }, c.opts));
    const gpus = gpuPanels(system, t0);
    parts.gpusTitle.hidden = parts.gpus.hidden = gpus.length === 0;
    parts.gpus.replaceChildren(...gpus.map((c) => c.fig));
    parts.gpus.dataset.panels = String(gpus.length);
    for (const c of gpus) lineChart(c.chart, c.series, c.opts);

    renderMemory(parts, run.memory);
    renderStaleness(parts, run.ps);
    renderGenerations(parts, run.generations);

    parts.windowInput.value = String(state.phaseWindow);
    phaseChart(parts.phaseChart, parts.phaseTable, d.phases || [], state.phaseWindow);

    const timelines = d.timelines || [];
    parts.timelines.replaceChildren();
    if (timelines.length) {
      parts.timelines.append(document.createTextNode('Chrome traces (open in chrome://tracing or ui.perfetto.dev): '));
      for (const t of timelines) {
        const label = 'rank ' + t.rank + ' (' + fmtBytes(t.bytes) + ')';
        if (state.report) {
          parts.timelines.append(el('code', { text: 'timeline/rank' + t.rank + '.trace.json' }), document.createTextNode(' '));
        } else {
          parts.timelines.append(el('a', { href: 'api/runs/' + encodeURIComponent(name) + '/timeline/' + t.rank, download: '', text: label }),
            document.createTextNode(' '));
        }
      }
    }
    parts.config.textContent = d.config || '(no config.yaml)';
    return root;
  }

  function renderPanels() {
    const host = document.getElementById('run-panels');
    for (const name of [...panels.keys()]) if (!state.selected.includes(name)) panels.delete(name);
    // Attach first: charts size themselves from their container's width.
    host.replaceChildren(...state.selected.map((name) => panelFor(name).root));
    state.selected.forEach(renderPanel);
  }

  function render() {
    document.getElementById('source').textContent = state.report
      ? 'report of ' + state.report.report.run_dir + ', generated ' + fmtDate(state.report.report.generated_time)
      : 'log directory ' + state.logdir;
    const banner = document.getElementById('error');
    banner.hidden = !state.listError;
    banner.textContent = state.listError || '';
    LockstepSweep.render(state.report ? state.report.sweep || null : state.sweep);
    renderRuns();
    renderCompare();
    renderPanels();
  }

  // The log directory's sweep (GET /api/sweep): null when it holds none (404).
  async function fetchSweep() {
    try {
      const response = await fetch('api/sweep', { cache: 'no-store' });
      if (response.status === 404) return null;
      const body = await response.json();
      return response.ok ? body : { error: body.error || 'HTTP ' + response.status, trials: [] };
    } catch (e) {
      return null;
    }
  }

  // ---- data ---------------------------------------------------------------------------

  async function getJson(url) {
    const response = await fetch(url, { cache: 'no-store' });
    let body;
    try { body = await response.json(); } catch (e) { body = { error: 'unreadable answer (' + e + ')' }; }
    if (!response.ok) throw new Error(body.error || ('HTTP ' + response.status));
    return body;
  }

  async function fetchDetail(name) {
    try {
      state.details[name] = await getJson('api/runs/' + encodeURIComponent(name));
      delete state.errors[name];
    } catch (e) {
      state.errors[name] = e.message;
    }
  }

  function anyRunning() {
    return state.runs.some((r) => r.run && r.run.status === 'running' && !isStale(r.run));
  }

  async function poll() {
    clearTimeout(state.timer);
    try {
      const list = await getJson('api/runs');
      state.logdir = list.logdir;
      state.runs = list.runs;
      state.listError = null;
    } catch (e) {
      state.listError = 'cannot reach the dashboard server: ' + e.message;
    }
    const names = new Set(state.runs.map((r) => r.name));
    if (!state.initialised) {
      state.selected = state.selected.filter((n) => names.has(n));
      if (!state.selected.length && state.runs.length) state.selected = [state.runs[0].name];
      state.initialised = state.runs.length > 0 || !!state.listError;
    }
    const stale = state.selected.filter((name) => {
      const d = state.details[name];
      const entry = state.runs.find((r) => r.name === name);
      if (!d || state.errors[name]) return true;
      const now = entry && entry.run ? entry.run : {};
      return d.run.status === 'running' || now.updated_time !== d.run.updated_time || now.status !== d.run.status;
    });
    if (!state.listError) await Promise.all(stale.map(fetchDetail));
    state.sweep = await fetchSweep();
    render();
    const live = document.getElementById('live');
    live.className = 'live' + (anyRunning() ? ' on' : '');
    live.textContent = anyRunning() ? 'live: updates every ' + POLL_MS / 1000 + ' s' : 'no run is running; checking every ' + IDLE_POLL_MS / 1000 + ' s';
    state.timer = setTimeout(poll, anyRunning() ? POLL_MS : IDLE_POLL_MS);
  }

  function toggle(name, on) {
    state.selected = state.selected.filter((n) => n !== name);
    if (on) state.selected.push(name);
    history.replaceState(null, '', '#runs=' + state.selected.map(encodeURIComponent).join(','));
    if (on && !state.details[name]) fetchDetail(name).then(render); else render();
  }

  function selectionFromHash() {
    const m = /^#runs=(.*)$/.exec(location.hash);
    return m ? m[1].split(',').filter(Boolean).map(decodeURIComponent) : [];
  }

  function start() {
    const embedded = document.getElementById('lockstep-data');
    if (embedded) {
      state.report = JSON.parse(embedded.textContent);
      state.runs = state.report.runs;
      state.details = state.report.details;
      state.selected = state.runs.map((r) => r.name);
      document.getElementById('live').textContent = 'static report';
      render();
    } else {
      state.selected = selectionFromHash();
      if (state.selected.length) state.initialised = true;
      poll();
    }
    let resizeTimer = null;
    window.addEventListener('resize', () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(render, 150); });
  }

  start();
})();
