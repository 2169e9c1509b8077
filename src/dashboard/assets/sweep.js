// lockstep dashboard: the sweep page (docs/dashboard.md#sweeps) — vanilla JS, SVG, no libraries.
//
// Draws a `lockstep sweep` directory's trials (GET /api/sweep, or the "sweep" of a report's
// embedded data): a sortable trials table, parallel coordinates of the parameters and the
// objective, the objective against each parameter, runtime against accuracy coloured by batch
// size, and the objective at each ASHA rung. Every chart's container carries data-point-count
// (and data-line-count where it draws lines), so a headless browser's DOM dump shows what was drawn.
'use strict';
const LockstepSweep = (function () {
  const { el, svg, isNum, fmtNum, placeholder, niceTicks } = LockstepCharts;
  const W = 460, H = 240, M = { l: 56, r: 14, t: 12, b: 38 };
  const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];

  function measured(t) { return isNum(t.objective); }
  function paramKeys(sweep) { return sweep.trials.length ? Object.keys(sweep.trials[0].params) : []; }

  // A parameter as numbers: its values (strings become category indices) and whether to draw it in
  // log scale (positive numbers spanning at least 20x).
  function axisOf(trials, key) {
    const raw = trials.map((t) => t.params[key]);
    if (raw.every(isNum)) {
      const lo = Math.min(...raw), hi = Math.max(...raw);
      const log = lo > 0 && hi / lo >= 20;
      return { key, values: raw, log, lo, hi, categories: null };
    }
    const categories = [...new Set(raw.map(String))];
    return { key, values: raw.map((v) => categories.indexOf(String(v))), log: false, lo: 0,
             hi: Math.max(1, categories.length - 1), categories };
  }

  function scaleOf(axis, a, b) {
    const f = (v) => (axis.log ? Math.log10(v) : v);
    const lo = f(axis.lo), hi = f(axis.hi);
    const span = hi - lo || 1;
    return (v) => a + ((f(v) - lo) / span) * (b - a);
  }

  function fmtValue(axis, v) { return axis.categories ? axis.categories[v] : fmtNum(v); }

  // Better trials blue, worse red (rank among the measured ones, under the sweep's mode).
  function objectiveColors(sweep) {
    const done = sweep.trials.filter(measured).map((t) => t.objective).sort((x, y) => x - y);
    return (t) => {
      if (!measured(t) || done.length < 2) return '#1f77b4';
      let r = done.indexOf(t.objective) / (done.length - 1);
      if (sweep.mode !== 'max') r = 1 - r;
      return 'rgb(' + Math.round(214 - 183 * r) + ',' + Math.round(39 + 80 * r) + ',' + Math.round(40 + 140 * r) + ')';
    };
  }

  function frame(container, w, h) {
    const root = svg('svg', { viewBox: '0 0 ' + w + ' ' + h, width: '100%', class: 'sweep-svg' });
    container.replaceChildren(root);
    return root;
  }

  function text(root, x, y, s, anchor, cls) {
    const t = svg('text', { x, y, 'text-anchor': anchor || 'middle', class: cls || 'axis-label' });
    t.textContent = s;
    root.appendChild(t);
  }

  // Points [{x, y, color, title}] over axes xAxis/yAxis (axisOf-like objects).
  function scatter(container, points, xAxis, yAxis, xTitle, yTitle) {
    container.dataset.pointCount = String(points.length);
    if (!points.length) { placeholder(container, 'no finished trial yet'); return; }
    const root = frame(container, W, H);
    const X = scaleOf(xAxis, M.l, W - M.r), Y = scaleOf(yAxis, H - M.b, M.t);
    root.appendChild(svg('line', { x1: M.l, y1: H - M.b, x2: W - M.r, y2: H - M.b, class: 'axis' }));
    root.appendChild(svg('line', { x1: M.l, y1: M.t, x2: M.l, y2: H - M.b, class: 'axis' }));
    const xTicks = xAxis.categories ? xAxis.categories.map((_, i) => i) : xAxis.log
      ? [xAxis.lo, Math.sqrt(xAxis.lo * xAxis.hi), xAxis.hi] : niceTicks(xAxis.lo, xAxis.hi, 5);
    for (const v of xTicks) text(root, X(v), H - M.b + 14, fmtValue(xAxis, v));
    for (const v of niceTicks(yAxis.lo, yAxis.hi, 5)) text(root, M.l - 6, Y(v) + 4, fmtNum(v), 'end');
    text(root, (M.l + W - M.r) / 2, H - 6, xTitle);
    text(root, 12, M.t + 8, yTitle, 'start');
    for (const p of points) {
      const c = svg('circle', { cx: X(p.x), cy: Y(p.y), r: 4, fill: p.color, class: 'dot' });
      const title = svg('title', {});
      title.textContent = p.title;
      c.appendChild(title);
      root.appendChild(c);
    }
  }

  function valueAxis(values) {
    const lo = Math.min(...values), hi = Math.max(...values);
    return { lo: lo === hi ? lo - 1 : lo, hi: lo === hi ? hi + 1 : hi, log: false, categories: null };
  }

  function parallel(container, sweep) {
    const done = sweep.trials.filter(measured);
    container.dataset.lineCount = String(done.length);
    if (!done.length) { placeholder(container, 'no finished trial yet'); return; }
    const axes = paramKeys(sweep).map((k) => axisOf(done, k));
    axes.push(Object.assign(valueAxis(done.map((t) => t.objective)),
                            { key: sweep.metric || 'objective', values: done.map((t) => t.objective) }));
    const w = Math.max(1000, 220 * axes.length), h = 300, right = 110;
    const root = frame(container, w, h);
    const x = (i) => M.l + (i * (w - M.l - right)) / Math.max(1, axes.length - 1);
    const ys = axes.map((a) => scaleOf(a, h - M.b, M.t));
    const color = objectiveColors(sweep);
    done.forEach((t, j) => {
      const pts = axes.map((a, i) => x(i).toFixed(1) + ',' + ys[i](a.values[j]).toFixed(1)).join(' ');
      const line = svg('polyline', { points: pts, fill: 'none', stroke: color(t), 'stroke-width': 1.5, class: 'pc-line' });
      const title = svg('title', {});
      title.textContent = t.name + ': ' + fmtNum(t.objective);
      line.appendChild(title);
      root.appendChild(line);
    });
    axes.forEach((a, i) => {
      root.appendChild(svg('line', { x1: x(i), y1: M.t, x2: x(i), y2: h - M.b, class: 'axis' }));
      text(root, x(i), h - M.b + 16, a.key);
      text(root, x(i) + 4, M.t + 8, fmtValue(a, a.categories ? a.hi : a.hi), 'start', 'tick');
      text(root, x(i) + 4, h - M.b - 2, fmtValue(a, a.lo), 'start', 'tick');
    });
  }

  function perParameter(container, sweep) {
    const done = sweep.trials.filter(measured);
    const color = objectiveColors(sweep);
    const yAxis = done.length ? valueAxis(done.map((t) => t.objective)) : null;
    container.replaceChildren();
    let total = 0;
    for (const key of paramKeys(sweep)) {
      const fig = el('figure', {}, [el('figcaption', { text: (sweep.metric || 'objective') + ' by ' + key })]);
      const box = el('div', { class: 'chart sweep-param', 'data-param': key });
      fig.appendChild(box);
      container.appendChild(fig);
      const axis = axisOf(done, key);
      scatter(box, done.map((t, j) => ({ x: axis.values[j], y: t.objective, color: color(t),
                                         title: t.name + ': ' + fmtNum(t.objective) })),
              axis, yAxis, key, sweep.metric || 'objective');
      total += done.length;
    }
    container.dataset.pointCount = String(total);
  }

  function runtime(container, sweep) {
    const acc = (t) => (isNum(t.validation_accuracy) ? t.validation_accuracy : t.objective);
    const done = sweep.trials.filter((t) => measured(t) && isNum(acc(t)));
    const batches = [...new Set(done.map((t) => t.params['trainer.batch_size']).filter((b) => b !== undefined))]
      .sort((a, b) => a - b);
    const color = (t) => (batches.length ? PALETTE[batches.indexOf(t.params['trainer.batch_size']) % PALETTE.length]
                                         : '#1f77b4');
    const yName = done.some((t) => isNum(t.validation_accuracy)) ? 'validation accuracy' : (sweep.metric || 'objective');
    scatter(container, done.map((t) => ({ x: t.seconds, y: acc(t), color: color(t),
                                          title: t.name + ': ' + fmtNum(acc(t)) + ' in ' + fmtNum(t.seconds) + ' s' })),
            valueAxis(done.map((t) => t.seconds).concat([0])), done.length ? valueAxis(done.map(acc)) : null,
            'seconds', yName);
    if (batches.length && done.length) {
      container.appendChild(el('div', { class: 'legend' }, batches.map((b, i) =>
        el('span', { class: 'legend-item' }, [el('span', { class: 'swatch', style: 'background:' + PALETTE[i % PALETTE.length] }),
                                              el('span', { text: 'batch ' + b })]))));
    }
  }

  function rungs(container, sweep) {
    const laddered = sweep.trials.filter((t) => Array.isArray(t.rungs) && t.rungs.length);
    container.dataset.lineCount = String(laddered.length);
    if (!laddered.length) { placeholder(container, 'no early stopping in this sweep'); return; }
    const color = objectiveColors(sweep);
    const series = laddered.map((t) => ({ name: t.name, color: color(t), mode: 'line',
                                          xs: t.rungs.map((r) => r.resource), ys: t.rungs.map((r) => r.objective) }));
    LockstepCharts.lineChart(container, series, { xFormat: fmtNum });
    container.dataset.lineCount = String(laddered.length);
  }

  const sortState = { key: 'trial', descending: false };

  function cell(t, key) {
    if (key.startsWith('param:')) return t.params[key.slice(6)];
    if (key === 'rungs') return Array.isArray(t.rungs) ? t.rungs.length : 0;
    return t[key];
  }

  function table(container, sweep) {
    const keys = ['trial', 'status', 'objective'].concat(paramKeys(sweep).map((k) => 'param:' + k), ['rungs', 'steps', 'seconds']);
    const rows = sweep.trials.slice().sort((a, b) => {
      const x = cell(a, sortState.key), y = cell(b, sortState.key);
      const missing = (v) => v === null || v === undefined;
      if (missing(x) !== missing(y)) return missing(x) ? 1 : -1;
      const c = isNum(x) && isNum(y) ? x - y : String(x).localeCompare(String(y));
      return sortState.descending ? -c : c;
    });
    const head = el('tr', {}, keys.map((k) => {
      const th = el('th', { class: 'sortable', 'data-key': k,
                            text: k.replace('param:', '') + (sortState.key === k ? (sortState.descending ? ' \u25BC' : ' \u25B2') : '') });
      th.addEventListener('click', () => {
        sortState.descending = sortState.key === k ? !sortState.descending : false;
        sortState.key = k;
        table(container, sweep);
      });
      return th;
    }));
    const body = rows.map((t) => el('tr', { class: 'trial ' + t.status }, keys.map((k) => {
      const v = cell(t, k);
      return el('td', { text: k === 'trial' ? t.name : isNum(v) ? fmtNum(v) : v === null || v === undefined ? '' : String(v),
                        title: k === 'status' && t.error ? t.error : '' });
    })));
    container.replaceChildren(el('thead', {}, [head]), el('tbody', {}, body));
    container.dataset.rowCount = String(rows.length);
  }

  function render(sweep) {
    const section = document.getElementById('sweep-section');
    if (!sweep) { section.hidden = true; return; }
    section.hidden = false;
    const count = (s) => sweep.trials.filter((t) => t.status === s).length;
    document.getElementById('sweep-summary').textContent =
      sweep.name + ': ' + sweep.trials.length + ' trials, ' + count('done') + ' done, ' + count('pruned') + ' pruned, ' +
      count('failed') + ' failed, ' + count('running') + ' running; objective ' + (sweep.metric || '?') + ' (' +
      (sweep.mode || '?') + ')';
    table(document.getElementById('trials'), sweep);
    parallel(document.getElementById('sweep-parallel'), sweep);
    perParameter(document.getElementById('sweep-params'), sweep);
    runtime(document.getElementById('sweep-runtime'), sweep);
    rungs(document.getElementById('sweep-rungs'), sweep);
  }

  return { render };
})();
