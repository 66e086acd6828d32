/* The HTML report's other range views (after report.js): the CPU sub-second heatmap, the IO
 * latency heatmap and the block IO statistics of the range, the syscalls of the range, and the
 * server metrics' values in the range. Each follows the range and the filter, says what it covers
 * of the range, and selects a range itself where it has a time axis.
 */
(function () {
  "use strict";
  var R = window.profilerReport, el = R.el, h = R.h, state = R.state, EX = R.EX;

  function heat(f) {  // 0..1 -> a pale yellow to dark red ramp
    return "rgb(" + Math.round(255 - 60 * f) + "," + Math.round(235 - 190 * f) + "," + Math.round(200 - 180 * f) + ")";
  }

  // ------------------------------------------------------------------ CPU sub-second heatmap
  function cpuHeatmap() {
    var hm = EX.cpu_cells, holder = document.getElementById("cpu-heatmap");
    if (!hm || !holder) return;
    var rows = hm.rows, cols = hm.columns, threaded = hm.th.some(function (x) { return x >= 0; });
    var info, svg, g, cw, ch = 6, sel = [];
    function counts() {
      var m = [];
      for (var c = 0; c < cols; c++) m.push(new Float64Array(rows));
      for (var i = 0; i < hm.c.length; i++) if (!threaded || R.passes(hm.th[i])) m[hm.col[i]][hm.row[i]] += hm.c[i];
      return m;
    }
    function tOf(c, r) { return hm.offset + c + r / rows; }
    function cellOf(t) { var a = t - hm.offset, c = Math.floor(a); return [c, Math.min(rows - 1, Math.max(0, Math.floor((a - c) * rows)))]; }
    function draw() {
      holder.textContent = "";
      var avail = Math.max(300, (holder.clientWidth || 900) - 70);
      cw = Math.max(3, Math.min(36, Math.floor(avail / Math.max(1, cols))));
      var m = counts(), max = 0;
      m.forEach(function (col) { col.forEach(function (v) { if (v > max) max = v; }); });
      var Wd = cols * cw + 62, Hd = rows * ch + 24;
      svg = el("svg", {viewBox: "0 0 " + Wd + " " + Hd, width: Wd, height: Hd, "class": "cpu-heatmap"}, holder);
      g = el("g", {transform: "translate(56,4)"}, svg);
      for (var c = 0; c < cols; c++) {
        for (var r = 0; r < rows; r++) {
          var v = m[c][r];
          el("rect", {x: c * cw, y: r * ch, width: cw - 0.5, height: ch - 0.5, fill: v ? heat(Math.sqrt(v / max)) : "#f3f5f7",
            "data-c": c, "data-r": r, "data-n": v}, g);
        }
      }
      for (r = 0; r <= rows; r += rows / 5) {
        el("text", {x: -4, y: r * ch + 4, "class": "tick", "text-anchor": "end"}, g).textContent = (r / rows * 1000).toFixed(0) + "ms";
      }
      var every = Math.max(1, Math.ceil(cols * 40 / (cols * cw)));
      for (c = 0; c < cols; c += every) {
        el("text", {x: c * cw + cw / 2, y: rows * ch + 14, "class": "tick", "text-anchor": "middle"}, g).textContent = Math.max(0, Math.round(hm.offset + c)) + "s";
      }
      sel = [0, 1, 2].map(function () { return el("rect", {"class": "hm-sel", visibility: "hidden"}, g); });
      info = h("div", "hm-info muted", holder, "Each column is one second, each row a " + (1000 / rows).toFixed(0) +
        " ms slice of it" + (R.mask && !threaded ? " (every thread: " + (hm.cut || "no thread per sample") + ")" : R.mask ? ", threads of " + R.filterName() : "") +
        ". Press on a cell and release on another to select that range.");
      showRange();
    }
    function place(rect, c0, c1, r0, r1) {
      if (c1 < c0 || r1 < r0) { rect.setAttribute("visibility", "hidden"); return; }
      rect.setAttribute("x", c0 * cw); rect.setAttribute("y", r0 * ch);
      rect.setAttribute("width", (c1 - c0 + 1) * cw); rect.setAttribute("height", (r1 - r0 + 1) * ch);
      rect.setAttribute("visibility", "visible");
    }
    // the exact cells of the range: the first column from its row down, whole columns, the last up to its row
    function showRange() {
      var rg = state.range;
      if (!rg) { sel.forEach(function (s) { s.setAttribute("visibility", "hidden"); }); return; }
      var a = cellOf(rg[0]), b = cellOf(rg[1] - 1e-9);
      if (a[0] === b[0]) { place(sel[0], a[0], a[0], a[1], b[1]); place(sel[1], 1, 0, 0, 0); place(sel[2], 1, 0, 0, 0); return; }
      place(sel[0], a[0], a[0], a[1], rows - 1);
      place(sel[1], a[0] + 1, b[0] - 1, 0, rows - 1);
      place(sel[2], b[0], b[0], 0, b[1]);
    }
    var start = null;
    holder.addEventListener("mousedown", function (evt) {
      var t = evt.target;
      if (t.dataset && t.dataset.c !== undefined) { evt.preventDefault(); start = [+t.dataset.c, +t.dataset.r]; }
    });
    holder.addEventListener("mousemove", function (evt) {
      var t = evt.target;
      if (!t.dataset || t.dataset.c === undefined || !info) return;
      var c = +t.dataset.c, r = +t.dataset.r;
      info.textContent = R.fmtSec(tOf(c, r)) + ": " + t.dataset.n + " samples in this " + (1000 / rows).toFixed(0) + " ms";
    });
    holder.addEventListener("mouseup", function (evt) {
      var t = evt.target;
      if (start === null || !t.dataset || t.dataset.c === undefined) { start = null; return; }
      var a = start, e = [+t.dataset.c, +t.dataset.r];
      start = null;
      var lo = Math.min(tOf(a[0], a[1]), tOf(e[0], e[1])), hi = Math.max(tOf(a[0], a[1]), tOf(e[0], e[1]));
      R.setRange([lo, hi + 1 / rows]);
    });
    R.on("range", showRange);
    R.on("filter", draw);
    R.onResize(draw);
    draw();
  }

  // ------------------------------------------------------------------ IO latency heatmap and statistics
  function ioViews() {
    var io = EX.io, holder = document.getElementById("io-heatmap"), stats = document.getElementById("io-stats");
    if (!io || !holder) return;
    var threaded = io.th.some(function (x) { return x >= 0; });
    var scaleBox = document.querySelector("#io_heatmap .io-scale");
    var scale = R.urlParams.io === "linear" ? "linear" : "log";
    if (scaleBox) {
      ["log", "linear"].forEach(function (s) {
        var b = h("button", "mode", scaleBox, s + " latency axis"); b.type = "button"; b.dataset.scale = s;
        b.addEventListener("click", function () { scale = s; R.setParam("io", s === "log" ? "" : s); draw(); });
      });
    }
    function edge(r) { return io.lo * Math.pow(10, r / io.per_decade); }
    function fmtLat(s) { return s >= 1 ? s.toFixed(2) + " s" : s >= 1e-3 ? (s * 1e3).toPrecision(3) + " ms" : (s * 1e6).toPrecision(3) + " us"; }
    function keep(i) { return !R.mask || (threaded && R.passes(io.th[i])); }
    var svg, W, H, PL = 64, PR = 14, PT = 6, PB = 22, x, sel;
    function draw() {
      if (scaleBox) scaleBox.querySelectorAll("button").forEach(function (b) { b.classList.toggle("on", b.dataset.scale === scale); });
      holder.textContent = "";
      W = Math.max(320, Math.round(holder.clientWidth || 900)); H = 230;
      var v = state.view, pw = W - PL - PR, ph = H - PT - PB;
      x = function (t) { return PL + pw * (t - v[0]) / (v[1] - v[0]); };
      var rmin = io.rows, rmax = -1, i;
      for (i = 0; i < io.c.length; i++) if (keep(i)) { rmin = Math.min(rmin, io.row[i]); rmax = Math.max(rmax, io.row[i]); }
      var wrap = h("div", "io-wrap", holder);
      if (rmax < 0) {
        h("div", "placeholder", wrap, R.mask && !threaded ? "No IO: these histograms are per device, not per thread" : "No IO issued by " + R.filterName());
        sel = null;
        stat();
        return;
      }
      rmin = Math.max(0, rmin - 1); rmax = Math.min(io.rows - 1, rmax + 1);
      var nbins = scale === "log" ? rmax - rmin + 1 : 60, top = edge(rmax + 1);
      function bin(r) {
        if (scale === "log") return r - rmin;
        return Math.min(nbins - 1, Math.floor(Math.sqrt(edge(r) * edge(r + 1)) / top * nbins));
      }
      var cells = {}, max = 0;
      for (i = 0; i < io.c.length; i++) {
        if (!keep(i)) continue;
        var k = io.col[i] * 1000 + bin(io.row[i]);
        cells[k] = (cells[k] || 0) + io.c[i];
        if (cells[k] > max) max = cells[k];
      }
      var canvas = h("canvas", "io-canvas", wrap);
      canvas.width = W; canvas.height = H;
      var ctx = canvas.getContext("2d"), bh = ph / nbins;
      ctx.fillStyle = "#f6f8fa"; ctx.fillRect(PL, PT, pw, ph);
      Object.keys(cells).forEach(function (key) {
        var c = Math.floor(key / 1000), b = key % 1000, t = io.t0 + c * io.column;
        var x0 = x(t), x1 = x(t + io.column);
        if (x1 < PL || x0 > W - PR) return;
        ctx.fillStyle = heat(Math.log1p(cells[key]) / Math.log1p(max));
        ctx.fillRect(Math.max(PL, x0), PT + ph - (b + 1) * bh, Math.max(1, Math.min(W - PR, x1) - Math.max(PL, x0)), Math.max(1, bh));
      });
      // p50 (solid) and p99 (dashed) of each column, from its rows
      var percol = {};
      for (i = 0; i < io.c.length; i++) {
        if (!keep(i)) continue;
        (percol[io.col[i]] = percol[io.col[i]] || {})[io.row[i]] = (percol[io.col[i]][io.row[i]] || 0) + io.c[i];
      }
      function yOf(r) { var b = bin(r) + 0.5; return PT + ph - b * bh; }
      [[0.5, []], [0.99, [5, 4]]].forEach(function (q) {
        ctx.beginPath(); ctx.setLineDash(q[1]); ctx.strokeStyle = "#1d2630"; ctx.lineWidth = 1.2;
        var started = false;
        Object.keys(percol).map(Number).sort(function (a, b) { return a - b; }).forEach(function (c) {
          var rows = percol[c], rs = Object.keys(rows).map(Number).sort(function (a, b) { return a - b; }), n = 0, acc = 0, k;
          rs.forEach(function (r) { n += rows[r]; });
          if (n < (q[0] > 0.9 ? 20 : 3)) { started = false; return; }
          for (k = 0; k < rs.length; k++) { acc += rows[rs[k]]; if (acc >= n * q[0]) break; }
          var xm = x(io.t0 + (c + 0.5) * io.column), ym = yOf(rs[Math.min(k, rs.length - 1)]);
          if (xm < PL || xm > W - PR) { started = false; return; }
          if (started) ctx.lineTo(xm, ym); else ctx.moveTo(xm, ym);
          started = true;
        });
        ctx.stroke();
      });
      ctx.setLineDash([]);
      svg = el("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H, "class": "io-axes"}, wrap);
      var labels = scale === "log" ? [] : [0, 0.25, 0.5, 0.75, 1].map(function (f) { return [f * top, PT + ph - f * ph]; });
      if (scale === "log") for (var r = rmin; r <= rmax + 1; r++) if (r % io.per_decade === 0 || (rmax - rmin < 8 && r % 2 === 0)) labels.push([edge(r), PT + ph - (r - rmin) * bh]);
      labels.forEach(function (l) {
        el("line", {x1: PL - 3, x2: PL, y1: l[1], y2: l[1], stroke: "#9aa5b1"}, svg);
        el("text", {x: PL - 6, y: l[1] + 4, "class": "tick", "text-anchor": "end"}, svg).textContent = fmtLat(l[0]);
      });
      R.xTicks(svg, x, v, W, H);
      sel = el("rect", {y: PT, height: ph, "class": "sel", visibility: "hidden"}, svg);
      var hit = el("rect", {x: PL, y: PT, width: pw, height: ph, "class": "hit"}, svg);
      function tAt(evt) {
        var rr = svg.getBoundingClientRect(), sx = (evt.clientX - rr.left) * W / rr.width;
        return Math.max(0, Math.min(R.T_END, v[0] + (sx - PL) / pw * (v[1] - v[0])));
      }
      R.dragSelect(hit, tAt, function (rg) { place(rg || state.range); });
      place(state.range);
      h("div", "muted small", holder, (scale === "log" ? "Latency on a log axis" : "Latency on a linear axis") + ", time across (the timeline's zoom); " +
        "colour: IOs per cell (log); lines: each column's p50 (solid) and p99 (dashed). Drag across it to select a range." + (io.notes.length ? " " + io.notes.join("; ") + "." : ""));
      stat();
    }
    function place(rg) {
      if (!sel) return;
      if (!rg) { sel.setAttribute("visibility", "hidden"); return; }
      var a = Math.max(PL, x(Math.min(rg[0], rg[1]))), b = Math.min(W - PR, x(Math.max(rg[0], rg[1])));
      if (b <= a) { sel.setAttribute("visibility", "hidden"); return; }
      sel.setAttribute("x", a); sel.setAttribute("width", b - a); sel.setAttribute("visibility", "visible");
    }
    var summary = null;
    function stat() {
      if (!stats) return;
      var r = state.range, c0 = 0, c1 = io.ncolumns;
      if (r) { c0 = Math.floor((r[0] - io.t0) / io.column); c1 = Math.ceil((r[1] - io.t0) / io.column); }
      var span = (c1 - c0) * io.column, by = {};
      for (var i = 0; i < io.c.length; i++) {
        if (io.col[i] < c0 || io.col[i] >= c1 || !keep(i)) continue;
        var g = by[io.g[i]] = by[io.g[i]] || {n: 0, rows: {}};
        g.n += io.c[i];
        g.rows[io.row[i]] = (g.rows[io.row[i]] || 0) + io.c[i];
      }
      function pct(g, p) {
        var want = g.n * p / 100, acc = 0, rs = Object.keys(g.rows).map(Number).sort(function (a, b) { return a - b; });
        for (var k = 0; k < rs.length; k++) { acc += g.rows[rs[k]]; if (acc >= want) return Math.sqrt(edge(rs[k]) * edge(rs[k] + 1)); }
        return null;
      }
      stats.textContent = "";
      var groups = Object.keys(by).map(Number).sort(function (a, b) { return by[b].n - by[a].n; });
      var total = 0;
      groups.forEach(function (gi) { total += by[gi].n; });
      h("div", "muted small", stats, (r ? "The range (widened to whole " + io.column + " s columns: " + R.fmtSec(Math.max(0, io.t0 + c0 * io.column)) + " to " +
        R.fmtSec(io.t0 + c1 * io.column) + ")" : "The whole capture") + (R.mask ? ", IOs issued by " + R.filterName() : "") +
        ": the " + (io.source === "histograms" ? "in-kernel histograms cover" : "block trace covers") + " it whole. Percentiles are known to a latency row (\u00b126%).");
      var wide = h("div", "wide", stats), tb = h("table", "small", wide), hr = h("tr", null, tb);
      ["device, op", "IOs", "IO/s", "p50", "p99", "largest"].forEach(function (t, k) { h("th", k ? "num" : null, hr, t); });
      groups.forEach(function (gi) {
        var g = by[gi], tr = h("tr", null, tb), rs = Object.keys(g.rows).map(Number);
        h("td", null, tr, io.groups[gi]);
        h("td", "num", tr, g.n.toLocaleString());
        h("td", "num", tr, R.fmtNum(g.n / Math.max(span, 1e-9)));
        h("td", "num", tr, "\u2248" + fmtLat(pct(g, 50)));
        h("td", "num", tr, "\u2248" + fmtLat(pct(g, 99)));
        h("td", "num", tr, "\u2264" + fmtLat(Math.min(edge(Math.max.apply(null, rs) + 1), io.max[gi] || Infinity)));
      });
      if (!groups.length) h("td", "muted", h("tr", null, tb), "no IO in this range");
      summary = total;
    }
    R.on("range", function () { place(state.range); stat(); });
    R.on("filter", draw);
    R.on("view", draw);
    R.onResize(draw);
    draw();
    R.summaries.push(function () { return summary === null ? null : ["io_heatmap", summary.toLocaleString() + " IOs"]; });
  }

  // ------------------------------------------------------------------ syscalls of the range
  function syscalls() {
    var sc = EX.syscalls, holder = document.getElementById("syscall-stats");
    if (!sc || !holder) return;
    var STEP = (R.DATA.timeline || {}).step || 1, summary = null;
    function draw() {
      var r = state.range, w = STEP * sc.step, b0 = 0, b1 = Infinity;
      if (r) { b0 = Math.floor(r[0] / w); b1 = Math.ceil(r[1] / w); }
      var by = {}, calls = 0;
      for (var i = 0; i < sc.b.length; i++) {
        if (sc.b[i] < b0 || sc.b[i] >= b1 || !R.passes(sc.th[i])) continue;
        var s = by[sc.s[i]] = by[sc.s[i]] || {n: 0, us: 0};
        s.n += sc.n[i]; s.us += sc.us[i]; calls += sc.n[i];
      }
      holder.textContent = "";
      var wr = r ? [Math.max(0, b0 * w), Math.min(R.T_END, b1 * w)] : null;
      var cov = R.coverage("syscalls", wr), note = R.coverageText("syscalls", wr, "syscalls were");
      h("div", note ? "warn small" : "muted small", holder, (wr ? "The range, widened to whole " + w + " s buckets (" + R.fmtSec(wr[0]) + " to " + R.fmtSec(wr[1]) + ")" : "The whole capture") +
        (R.mask ? ", threads of " + R.filterName() : "") + ": " + (note || "measured throughout") + ".");
      if (cov.measured <= 1e-9) { summary = "syscalls not measured"; return; }
      var names = Object.keys(by).map(Number).sort(function (a, b) { return by[b].us - by[a].us; }).slice(0, 20);
      var wide = h("div", "wide", holder), tb = h("table", "small", wide), hr = h("tr", null, tb);
      ["syscall", "calls", "per measured s", "time in it", "per call"].forEach(function (t, k) { h("th", k ? "num" : null, hr, t); });
      names.forEach(function (k) {
        var s = by[k], tr = h("tr", null, tb);
        h("td", null, tr).appendChild(document.createElement("code")).textContent = sc.names[k];
        h("td", "num", tr, Math.round(s.n).toLocaleString());
        h("td", "num", tr, R.fmtNum(s.n / cov.measured));
        h("td", "num", tr, R.fmtUs(s.us));
        h("td", "num", tr, s.n ? R.fmtUs(s.us / s.n) : "n/a");
      });
      if (!names.length) h("td", "muted", h("tr", null, tb), "no syscalls here");
      summary = Math.round(calls).toLocaleString() + " syscalls" + (cov.windows && cov.measured < cov.span - 1e-6 ? " (measured " + R.fmtSec(cov.measured) + ")" : "");
    }
    R.on("range", draw); R.on("filter", draw);
    draw();
    R.summaries.push(function () { return summary ? ["syscalls", summary] : null; });
  }

  // ------------------------------------------------------------------ server metrics in the range
  function serverMetrics() {
    var cells = document.querySelectorAll("td.range-val[data-panel]");
    if (!cells.length) return;
    var TL = R.DATA.timeline || {}, STEP = TL.step || 1;
    function draw() {
      var r = state.range, pids = R.filterPids();
      cells.forEach(function (td) {
        var p = (TL.panels || {})[td.getAttribute("data-panel")], pid = +(/_(\d+)$/.exec(td.getAttribute("data-panel")) || [0, 0])[1];
        if (!p) { td.textContent = "not on the timeline"; td.className = "range-val muted"; return; }
        if (pids && !pids[pid]) { td.textContent = "another process"; td.className = "range-val muted"; return; }
        if (!r) { td.textContent = "select a range"; td.className = "range-val muted"; return; }
        var b0 = Math.floor(r[0] / STEP), b1 = Math.ceil(r[1] / STEP), parts = [], measured = 0;
        Object.keys(p.series).forEach(function (name) {
          var s = p.series[name], sum = 0, n = 0;
          for (var j = b0; j < b1 && j < s.length; j++) if (s[j] !== null && isFinite(s[j])) { sum += s[j]; n++; }
          measured = Math.max(measured, n);
          if (n) parts.push([name, sum / n]);
        });
        parts.sort(function (a, b) { return b[1] - a[1]; });
        td.className = "range-val num";
        td.textContent = parts.length ? parts.slice(0, 3).map(function (x) { return (parts.length > 1 ? x[0] + ": " : "") + R.fmtNum(x[1]) + " " + p.unit; }).join(", ") +
          " (" + R.fmtNum(measured * STEP) + "/" + R.fmtNum((b1 - b0) * STEP) + " s scraped)" : "no scrape in the range";
      });
    }
    R.on("range", draw); R.on("filter", draw);
    draw();
  }

  R.inits.push(cpuHeatmap, ioViews, syscalls, serverMetrics);
})();
