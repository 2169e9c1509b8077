// lockstep dashboard — drawing, apart from the page's state (app.js):
// DOM and SVG helpers, number formats, per-step columns, the line chart and
// the phase chart. Vanilla JS, no libraries; loaded before app.js, which takes
// what it needs from LockstepCharts. Every drawn chart's container carries
// data-series-count and data-point-count (the phase chart data-ranks).
'use strict';
const LockstepCharts = (function () {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const PHASES = [
    ['data_wait_ms', 'data wait', '#9aa1a9'],
    ['forward_ms', 'forward', '#1f77b4'],
    ['backward_ms', 'backward', '#ff7f0e'],
    ['comm_wait_ms', 'comm wait', '#d62728'],
    ['optimizer_ms', 'optimizer', '#2ca02c'],
  ];

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

  return { SVG_NS, PHASES, el, svg, isNum, fmtNum, fmtBytes, fmtDuration, fmtDate, column, laterLinesWin, byStep, niceTicks, placeholder, lineChart, linePath, nearestIndex, phaseChart };
})();
