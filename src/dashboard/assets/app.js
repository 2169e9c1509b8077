// lockstep dashboard — vanilla JS, no libraries, no network beyond this server.
//
// Data comes from GET /api/runs and GET /api/runs/<name> (docs/dashboard.md),
// or, in a `lockstep report` file, from the JSON embedded in
// <script id="lockstep-data">. Every drawn chart's container carries
// data-series-count and data-point-count (and the per-worker and phase panels
// data-ranks), so a headless browser's DOM dump shows what was drawn.
'use strict';
(function () {
  const POLL_MS = 2000;        // while a selected or listed run is running
  const IDLE_POLL_MS = 10000;  // otherwise: new runs still show up
  const STALE_S = 120;         // "running" but no update for this long
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
                  '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const PHASES = [
    ['data_wait_ms', 'data wait', '#9aa1a9'],
    ['forward_ms', 'forward', '#1f77b4'],
    ['backward_ms', 'backward', '#ff7f0e'],
    ['comm_wait_ms', 'comm wait', '#d62728'],
    ['optimizer_ms', 'optimizer', '#2ca02c'],
  ];

  const state = {
    report: null,      // the embedded data of a report, or null when served
    logdir: '',
    runs: [],          // [{name, run} | {name, error}]
    selected: [],      // run names, in selection order
    details: {},       // name -> GET /api/runs/<name>
    errors: {},        // name -> error text of its last fetch
    listError: null,
    phaseWindow: 50,
    timer: null,
    initialised: false,
  };

  // ---- small helpers ---------------------------------------------------------

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') node.textContent = v;
      else if (k === 'class') node.className = v;
      else node.setAttribute(k, v);
    }
    for (const c of children || []) node.append(c);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  function isNum(v) { return typeof v === 'number' && isFinite(v); }

  function fmtNum(v) {
    if (!isNum(v)) return '–';
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (a >= 1000) return Math.round(v).toLocaleString('en-US');
    return String(+v.toPrecision(4));
  }

  function fmtBytes(v) {
    if (!isNum(v)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (+v.toPrecision(3)) + ' ' + units[i];
  }

  function fmtDuration(s) {
    if (!isNum(s)) return '–';
    s = Math.max(0, s);
    if (s < 60) return Math.round(s) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.round((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.round((s % 86400) / 3600) + ' h';
  }

  function fmtDate(unix) {
    if (!isNum(unix)) return '–';
    const d = new Date(unix * 1000);
    const pad = (n) => String(n).padStart(2, '0');
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

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

  function column(obj, key) { return (obj && Array.isArray(obj[key])) ? obj[key] : []; }

  // A resumed run appends steps it already logged before its checkpoint; the
  // later line is the one that counts (docs/monitoring.md). Keeps x increasing.
  function laterLinesWin(xs, ys) {
    const outX = [], outY = [];
    for (let i = 0; i < Math.min(xs.length, ys.length); i++) {
      while (outX.length && outX[outX.length - 1] >= xs[i]) { outX.pop(); outY.pop(); }
      outX.push(xs[i]); outY.push(ys[i]);
    }
    return { xs: outX, ys: outY };
  }

  function byStep(table, key) { return laterLinesWin(column(table, 'step'), column(table, key)); }

  // ---- charts ------------------------------------------------------------------

  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    const raw = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
    return ticks;
  }

  function placeholder(container, text) {
    container.replaceChildren(el('div', { class: 'placeholder', text }));
  }

  // Draws `series` ([{name, color, xs, ys, mode: 'line'|'points'}]) into `container`
  // as an SVG line chart with axes, a legend and a hover read-out.
  function lineChart(container, series, opts) {
    opts = opts || {};
    const yFormat = opts.yFormat || fmtNum;
    const xFormat = opts.xFormat || fmtNum;
    const data = [];
    let points = 0;
    for (const s of series) {
      const xs = [], ys = [];
      const n = Math.min(s.xs.length, s.ys.length);
      for (let i = 0; i < n; i++) {
        if (isNum(s.xs[i]) && isNum(s.ys[i])) { xs.push(s.xs[i]); ys.push(s.ys[i]); }
      }
      if (xs.length) { data.push(Object.assign({}, s, { xs, ys })); points += xs.length; }
    }
    container.dataset.seriesCount = String(data.length);
    container.dataset.pointCount = String(points);
    if (!points) { placeholder(container, opts.empty || 'no data yet'); return; }

    let xMin = Infinity, xMax = -Infinity, yMin = Infinity, yMax = -Infinity;
    for (const s of data) {
      for (let i = 0; i < s.xs.length; i++) {
        xMin = Math.min(xMin, s.xs[i]); xMax = Math.max(xMax, s.xs[i]);
        yMin = Math.min(yMin, s.ys[i]); yMax = Math.max(yMax, s.ys[i]);
      }
    }
    if (opts.yZero) yMin = Math.min(0, yMin);
    if (xMax === xMin) { xMin -= 1; xMax += 1; }
    if (yMax === yMin) { const d = Math.abs(yMax) * 0.1 || 1; yMin -= d; yMax += d; }
    const pad = (yMax - yMin) * 0.05;
    if (!(opts.yZero && yMin === 0)) yMin -= pad;
    yMax += pad;

    const W = Math.max(280, container.clientWidth || 560), H = opts.height || 240;
    const m = { l: 62, r: 14, t: 10, b: 34 };
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const X = (x) => m.l + (x - xMin) / (xMax - xMin) * pw;
    const Y = (y) => m.t + ph - (y - yMin) / (yMax - yMin) * ph;

    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img' });
    for (const t of niceTicks(yMin, yMax, 5)) {
      root.append(svg('line', { class: 'gridline', x1: m.l, x2: W - m.r, y1: Y(t), y2: Y(t) }));
      const label = svg('text', { x: m.l - 6, y: Y(t) + 4, 'text-anchor': 'end' });
      label.textContent = yFormat(t);
      root.append(label);
    }
    for (const t of niceTicks(xMin, xMax, Math.max(2, Math.floor(pw / 90)))) {
      root.append(svg('line', { class: 'axis', x1: X(t), x2: X(t), y1: m.t + ph, y2: m.t + ph + 4 }));
      const label = svg('text', { x: X(t), y: m.t + ph + 16, 'text-anchor': 'middle' });
      label.textContent = xFormat(t);
      root.append(label);
    }
    root.append(svg('line', { class: 'axis', x1: m.l, x2: W - m.r, y1: m.t + ph, y2: m.t + ph }));
    root.append(svg('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph }));
    if (opts.xLabel) {
      const label = svg('text', { x: m.l + pw / 2, y: H - 2, 'text-anchor': 'middle' });
      label.textContent = opts.xLabel;
      root.append(label);
    }

    for (const s of data) {
      if (s.mode === 'points' || s.xs.length === 1) {  // one sample: a dot, not an invisible line
        const r = s.xs.length > 300 ? 1.5 : 3;
        let d = '';
        for (let i = 0; i < s.xs.length; i++) {
          const x = X(s.xs[i]), y = Y(s.ys[i]);
          d += `M${(x - r).toFixed(1)} ${y.toFixed(1)}a${r} ${r} 0 1 0 ${2 * r} 0a${r} ${r} 0 1 0 ${-2 * r} 0`;
        }
        root.append(svg('path', { d, fill: s.color, stroke: '#fff', 'stroke-width': 0.8 }));
      } else {
        root.append(svg('path', { d: linePath(s, X, Y, pw), fill: 'none', stroke: s.color,
                                  'stroke-width': 1.6, 'stroke-linejoin': 'round' }));
      }
    }

    const cursor = svg('line', { class: 'cursor', y1: m.t, y2: m.t + ph, visibility: 'hidden' });
    root.append(cursor);
    const overlay = svg('rect', { x: m.l, y: m.t, width: pw, height: ph, fill: 'transparent' });
    root.append(overlay);
    const tooltip = el('div', { class: 'tooltip', hidden: '' });
    overlay.addEventListener('mousemove', (ev) => {
      const box = root.getBoundingClientRect();
      const px = (ev.clientX - box.left) * (W / box.width);
      const x = xMin + (px - m.l) / pw * (xMax - xMin);
      tooltip.replaceChildren(el('div', { text: (opts.xLabel || 'x') + ' ' + xFormat(x) }));
      for (const s of data) {
        const i = nearestIndex(s.xs, x);
        const row = el('div', {}, [el('span', { class: 'swatch', style: 'background:' + s.color }),
          document.createTextNode(s.name + ': ' + yFormat(s.ys[i]) + ' @ ' + xFormat(s.xs[i]))]);
        tooltip.append(row);
      }
      cursor.setAttribute('x1', px); cursor.setAttribute('x2', px);
      cursor.setAttribute('visibility', 'visible');
      tooltip.hidden = false;
      const left = (ev.clientX - box.left) + 12;
      tooltip.style.left = Math.min(left, box.width - 180) + 'px';
      tooltip.style.top = '8px';
    });
    overlay.addEventListener('mouseleave', () => { cursor.setAttribute('visibility', 'hidden'); tooltip.hidden = true; });

    const legend = el('div', { class: 'legend' });
    for (const s of data) {
      legend.append(el('span', {}, [el('span', { class: 'swatch', style: 'background:' + s.color }),
        document.createTextNode(s.name + (s.mode === 'points' ? ' (dots)' : ''))]));
    }
    container.replaceChildren(root, legend, tooltip);
  }

  // A polyline; with more points than pixels, each pixel column keeps its min and max (spikes stay visible).
  function linePath(s, X, Y, pw) {
    const n = s.xs.length;
    let d = '';
    if (n <= 2 * pw) {
      for (let i = 0; i < n; i++) d += (i ? 'L' : 'M') + X(s.xs[i]).toFixed(1) + ' ' + Y(s.ys[i]).toFixed(1);
      return d;
    }
    let col = null, lo = 0, hi = 0, first = true;
    const flush = () => {
      if (col === null) return;
      d += (first ? 'M' : 'L') + col + ' ' + Y(lo).toFixed(1) + 'L' + col + ' ' + Y(hi).toFixed(1);
      first = false;
    };
    for (let i = 0; i < n; i++) {
      const c = Math.round(X(s.xs[i]));
      if (c !== col) { flush(); col = c; lo = hi = s.ys[i]; } else { lo = Math.min(lo, s.ys[i]); hi = Math.max(hi, s.ys[i]); }
    }
    flush();
    return d;
  }

  function nearestIndex(xs, x) {
    let lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid; else hi = mid;
    }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }

  // Mean of each phase over the last `window` steps of each rank, drawn as one stacked bar per rank.
  function phaseChart(container, table, phases, window) {
    const rows = [];
    for (const p of phases) {
      const steps = column(p, 'step');
      const n = steps.length;
      const from = Math.max(0, n - window);
      const mean = (key) => {
        const v = column(p, key);
        let sum = 0, count = 0;
        for (let i = from; i < n; i++) if (isNum(v[i])) { sum += v[i]; count++; }
        return count ? sum / count : NaN;
      };
      const parts = PHASES.map(([key]) => mean(key));
      const step = mean('step_ms');
      const known = parts.reduce((a, v) => a + (isNum(v) ? v : 0), 0);
      rows.push({ rank: p.rank, steps: n - from, parts, other: isNum(step) ? Math.max(0, step - known) : 0,
                  step, comm: mean('comm_ms'), buckets: mean('buckets') });
    }
    container.dataset.ranks = String(rows.length);
    const drawn = PHASES.filter((_, i) => rows.some((r) => isNum(r.parts[i]))).length;
    container.dataset.seriesCount = String(drawn);
    container.dataset.pointCount = String(rows.reduce((a, r) => a + r.steps, 0));
    table.replaceChildren();
    if (!rows.length) { placeholder(container, 'no phase timings yet (phases/rank<R>.jsonl)'); return; }

    const W = Math.max(280, container.clientWidth || 560);
    const barH = 22, gap = 8, m = { l: 62, r: 70, t: 4, b: 4 };
    const H = m.t + m.b + rows.length * (barH + gap);
    const maxTotal = Math.max(...rows.map((r) => Math.max(isNum(r.step) ? r.step : 0,
      r.parts.reduce((a, v) => a + (isNum(v) ? v : 0), 0))), 1e-9);
    const pw = W - m.l - m.r;
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img' });
    rows.forEach((r, ri) => {
      const y = m.t + ri * (barH + gap);
      const label = svg('text', { x: m.l - 6, y: y + barH / 2 + 4, 'text-anchor': 'end' });
      label.textContent = 'rank ' + r.rank;
      root.append(label);
      let x = m.l;
      const segments = PHASES.map(([, name, color], i) => [name, color, r.parts[i]]);
      segments.push(['other', '#e3e5e8', r.other]);
      for (const [name, color, ms] of segments) {
        if (!isNum(ms) || ms <= 0) continue;
        const w = ms / maxTotal * pw;
        const rect = svg('rect', { x, y, width: Math.max(w, 0.5), height: barH, fill: color });
        const title = svg('title');
        const share = isNum(r.step) && r.step > 0 ? ` (${Math.round(ms / r.step * 100)}%)` : '';
        title.textContent = `rank ${r.rank} ${name}: ${fmtNum(ms)} ms${share}`;
        rect.append(title);
        root.append(rect);
        x += w;
      }
      const total = svg('text', { x: x + 6, y: y + barH / 2 + 4 });
      total.textContent = fmtNum(r.step) + ' ms';
      root.append(total);
    });
    const legend = el('div', { class: 'legend' });
    for (const [, name, color] of PHASES.concat([['', 'other (step − phases)', '#e3e5e8']])) {
      legend.append(el('span', {}, [el('span', { class: 'swatch', style: 'background:' + color }), document.createTextNode(name)]));
    }
    container.replaceChildren(root, legend);

    const head = el('tr', {}, ['rank', 'steps'].concat(PHASES.map((p) => p[1] + ' ms'),
      ['other ms', 'step ms', 'comm ms (total)', 'buckets']).map((h, i) => el('th', { class: i ? 'num' : '', text: h })));
    table.append(el('thead', {}, [head]));
    const body = el('tbody');
    for (const r of rows) {
      const cells = [String(r.rank), String(r.steps)].concat(r.parts.map(fmtNum),
        [fmtNum(r.other), fmtNum(r.step), fmtNum(r.comm), fmtNum(r.buckets)]);
      body.append(el('tr', {}, cells.map((c, i) => el('td', { class: i ? 'num' : '', text: c }))));
    }
    table.append(body);
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
    renderRuns();
    renderCompare();
    renderPanels();
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
