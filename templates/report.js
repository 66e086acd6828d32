/* The HTML report's interactive parts, core (inlined into report.html; no network, no library).
 *
 * One state for the whole page (profilerReport.state): the selected time range, a second range
 * to compare with, the filter (a target, a pool or a thread), the timeline's zoom window. Every
 * view listens: the timeline charts and the thread tracks (this file), the flame graphs
 * (report_flame.js), the heatmaps, IO and syscall tables, goroutines and server metrics
 * (report_views.js). The state lives in the URL's fragment, so a link restores the view.
 * Every panel of the analysis's timeline (data.timeline.panels) is drawn, whatever its key.
 * Names of frames, threads and series are untrusted: they only ever reach the page as text
 * (textContent, SVG text nodes), never as markup.
 */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var R = window.profilerReport = {};
  function el(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function h(tag, cls, parent, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function readJSON(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }
  R.el = el; R.h = h;
  var DATA = R.DATA = readJSON("profiler-analysis") || {};
  var PAGE = R.PAGE = readJSON("profiler-page") || {};
  var EX = R.EX = PAGE.explore || {};
  R.PALETTE = ["#2f6fb0", "#d9822b", "#3a9a5b", "#b8434e", "#7b5ea7", "#8c6d3f", "#c75fa0", "#6b7a8f", "#b3a11a", "#17a2b8"];
  var STATE_COLOURS = PAGE.state_colours || {};

  function fmtNum(v) {
    if (v === null || v === undefined || !isFinite(v)) return "n/a";
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1) return v.toFixed(2);
    if (a === 0) return "0";
    return v.toPrecision(2);
  }
  function fmtSec(t) {
    if (t >= 100) return t.toFixed(0) + " s";
    return (Math.round(t * 100) / 100).toFixed(t < 10 ? 2 : 1) + " s";
  }
  function fmtUs(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(2) + " s";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + " ms";
    return v.toFixed(0) + " us";
  }
  function niceMax(v, unit) {
    if (!(v > 0) || !isFinite(v)) return 1;
    if (unit === "%" && v <= 100) return v > 50 ? 100 : niceMax(v);
    var e = Math.pow(10, Math.floor(Math.log10(v)));
    var ms = [1, 1.2, 2, 3, 4, 6, 8, 10];  // each divides into round quarters or thirds (the grid lines)
    for (var i = 0; i < ms.length; i++) if (ms[i] * e >= v * 0.999) return ms[i] * e;
    return 10 * e;
  }
  R.fmtTick = function (t, tick) {  // "0.5s", "12s", "2m", "1h30m": as short as the tick step allows
    if (tick < 1) return t.toFixed(1).replace(/\.0$/, "") + "s";
    if (t < 60 || tick < 60) return Math.round(t) + "s";
    if (t < 3600) return Math.floor(t / 60) + "m" + (t % 60 ? Math.round(t % 60) + "s" : "");
    return Math.floor(t / 3600) + "h" + (t % 3600 ? Math.round(t % 3600 / 60) + "m" : "");
  };
  R.fmtNum = fmtNum; R.fmtSec = fmtSec; R.fmtUs = fmtUs; R.niceMax = niceMax;

  // ------------------------------------------------------------------ shared state and events
  var TL = DATA.timeline || {t: [], step: 1, panels: {}};
  var T = TL.t || [];
  var STEP = TL.step || 1;
  var T_END = R.T_END = T.length ? T[T.length - 1] + STEP : (PAGE.t_end || 1);
  var state = R.state = {range: null, compare: null, picking: null, filter: "", view: [0, T_END], cursor: null};
  var listeners = {};
  R.on = function (evt, fn) { (listeners[evt] = listeners[evt] || []).push(fn); };
  R.emit = function (evt) { (listeners[evt] || []).forEach(function (f) { f(state); }); };
  function clampRange(r) {
    if (!r) return null;
    var a = Math.max(0, Math.min(r[0], r[1])), b = Math.min(T_END, Math.max(r[0], r[1]));
    return b - a > 1e-6 ? [a, b] : null;
  }
  R.setRange = function (r) {
    if (state.picking === "compare") {
      state.picking = null;
      state.compare = clampRange(r);
      R.emit("range");
      R.saveURL();
      return;
    }
    state.range = clampRange(r);
    if (!state.range) state.compare = null;
    R.emit("range");
    R.saveURL();
  };
  R.setCompare = function (r) { state.compare = clampRange(r); R.emit("range"); R.saveURL(); };
  R.setCursor = function (t) { state.cursor = t; R.emit("cursor"); };
  R.setView = function (v) {
    var a = v[0], b = v[1], w = Math.max(b - a, Math.min(T_END, STEP * 2, 1));
    if (w >= T_END) { a = 0; b = T_END; } else {
      a = Math.max(0, Math.min(a, T_END - w)); b = a + w;
    }
    state.view = [a, b];
    R.emit("view");
    R.saveURL();
  };

  // ------------------------------------------------------------------ threads and the filter
  var TH = EX.threads || {pid: [], tid: [], comm: [], pool: [], roles: {}};
  var NTH = TH.tid.length;
  R.TH = TH;
  R.targetName = function (pid) { return (EX.targets || {})[pid] || ("pid " + pid); };
  R.mask = null;  // Uint8Array over thread rows (1: shown), null: every thread
  function parseFilter(key) {
    var m;
    if (!key) return null;
    if ((m = /^t:(\d+)$/.exec(key))) return {kind: "target", pid: +m[1]};
    if ((m = /^p:(\d+):(.*)$/.exec(key))) return {kind: "pool", pid: +m[1], pool: m[2]};
    if ((m = /^th:(\d+)$/.exec(key))) return {kind: "thread", tid: +m[1]};
    return null;
  }
  R.filterSpec = function () { return parseFilter(state.filter); };
  R.filterName = function () {
    var f = parseFilter(state.filter);
    if (!f) return "every thread";
    if (f.kind === "target") return R.targetName(f.pid);
    if (f.kind === "pool") return "pool " + f.pool + " of " + R.targetName(f.pid);
    var i = TH.tid.indexOf(f.tid);
    return "thread " + (i >= 0 ? TH.comm[i] + " " : "") + f.tid;
  };
  R.setFilter = function (key) {
    var f = parseFilter(key);
    state.filter = f ? key : "";
    if (!f) { R.mask = null; } else {
      R.mask = new Uint8Array(NTH);
      for (var i = 0; i < NTH; i++) {
        R.mask[i] = (f.kind === "target" && TH.pid[i] === f.pid) || (f.kind === "pool" && TH.pid[i] === f.pid && TH.pool[i] === f.pool) ||
          (f.kind === "thread" && TH.tid[i] === f.tid) ? 1 : 0;
      }
    }
    var sel = document.getElementById("filter");
    if (sel && sel.value !== state.filter) sel.value = state.filter;
    R.emit("filter");
    R.saveURL();
  };
  R.passes = function (th) { return !R.mask || (th >= 0 && R.mask[th] === 1); };
  R.filterPids = function () {  // the processes the filter keeps (null: every one)
    if (!R.mask) return null;
    var out = {};
    for (var i = 0; i < NTH; i++) if (R.mask[i]) out[TH.pid[i]] = true;
    return out;
  };
  function filterOptions() {
    var sel = document.getElementById("filter");
    if (!sel) return;
    var pids = {}, pools = {};
    for (var i = 0; i < NTH; i++) {
      pids[TH.pid[i]] = (pids[TH.pid[i]] || 0) + 1;
      var k = TH.pid[i] + ":" + TH.pool[i];
      pools[k] = pools[k] || {pid: TH.pid[i], pool: TH.pool[i], threads: []};
      pools[k].threads.push(i);
    }
    Object.keys(pids).map(Number).sort(function (a, b) { return a - b; }).forEach(function (pid) {
      var g = h("optgroup", null, sel); g.label = R.targetName(pid);
      var o = h("option", null, g, R.targetName(pid) + " (every thread, " + pids[pid] + ")"); o.value = "t:" + pid;
      Object.keys(pools).filter(function (k) { return pools[k].pid === pid; }).sort().forEach(function (k) {
        var p = pools[k], role = (TH.roles || {})[p.pool];
        var po = h("option", null, g, "\u00a0 pool " + p.pool + " \u00d7" + p.threads.length + (role ? " \u2014 " + role : ""));
        po.value = "p:" + pid + ":" + p.pool;
        if (p.threads.length > 1 || p.pool !== TH.comm[p.threads[0]]) {
          p.threads.slice(0, 64).forEach(function (j) {
            var to = h("option", null, g, "\u00a0\u00a0\u00a0 " + TH.comm[j] + " " + TH.tid[j]); to.value = "th:" + TH.tid[j];
          });
        }
      });
    });
    sel.addEventListener("change", function () { R.setFilter(sel.value); });
  }

  // ------------------------------------------------------------------ coverage of duty-cycled evidence
  // where a collector measured inside [a, b): {measured, span, windows}; no windows: throughout
  R.coverage = function (name, r) {
    var a = r ? r[0] : 0, b = r ? r[1] : T_END, wins = ((TL.coverage || {})[name] || {}).windows;
    if (!wins) return {measured: b - a, span: b - a, windows: null};
    var m = 0;
    wins.forEach(function (w) { m += Math.max(0, Math.min(b, w[1]) - Math.max(a, w[0])); });
    return {measured: m, span: b - a, windows: wins};
  };
  R.windowsText = function (wins) {
    var out = wins.slice(0, 8).map(function (w) { return w[0].toFixed(1) + "-" + w[1].toFixed(1) + " s"; });
    return out.join(", ") + (wins.length > 8 ? ", ..." : "");
  };
  R.coverageText = function (name, r, what) {
    var c = R.coverage(name, r);
    if (!c.windows) return null;
    if (c.measured <= 1e-9) return "not measured in " + (r ? "this range" : "the capture") + ": " + what + " traced only " + R.windowsText(c.windows);
    if (c.measured >= c.span - 1e-6) return null;
    return "measured " + fmtSec(c.measured) + " of " + fmtSec(c.span) + " (" + what + " traced " + R.windowsText(c.windows) + "); the rest is not zero but not measured";
  };

  // ------------------------------------------------------------------ URL state
  var urlTimer = null, restoring = false;
  function num(x) { return (Math.round(x * 1000) / 1000).toString(); }
  R.urlParams = {};  // other views' keys (search, modes): name -> value
  R.setParam = function (k, v) { if (v) R.urlParams[k] = v; else delete R.urlParams[k]; R.saveURL(); };
  R.saveURL = function () {
    if (restoring) return;
    clearTimeout(urlTimer);
    urlTimer = setTimeout(function () {
      var p = [];
      if (state.range) p.push("range=" + num(state.range[0]) + "-" + num(state.range[1]));
      if (state.compare) p.push("compare=" + num(state.compare[0]) + "-" + num(state.compare[1]));
      if (state.filter) p.push("filter=" + encodeURIComponent(state.filter));
      if (state.view[0] > 0 || state.view[1] < T_END) p.push("zoom=" + num(state.view[0]) + "-" + num(state.view[1]));
      Object.keys(R.urlParams).sort().forEach(function (k) { p.push(k + "=" + encodeURIComponent(R.urlParams[k])); });
      var hash = p.length ? "#" + p.join("&") : "";
      if (location.hash !== hash) history.replaceState(null, "", location.pathname + location.search + (hash || "#"));
    }, 60);
  };
  function pair(v) {
    var m = /^(-?[\d.]+)-([\d.]+)$/.exec(v || "");
    return m ? [parseFloat(m[1]), parseFloat(m[2])] : null;
  }
  function readURL() {
    var out = {};
    (location.hash || "").replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      if (i > 0) out[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
    });
    return out;
  }
  R.restored = readURL();

  // ------------------------------------------------------------------ the toolbar
  function toolbar() {
    var bar = document.getElementById("explore-bar");
    if (!bar) return;
    var rangeEl = bar.querySelector(".eb-range"), sum = bar.querySelector(".eb-sum"), cli = bar.querySelector(".cli");
    var cmp = bar.querySelector(".eb-compare");
    function show() {
      rangeEl.textContent = "";
      var r = state.range;
      h("b", null, rangeEl, r ? "Selected " + fmtSec(r[0]) + " to " + fmtSec(r[1]) + " (" + fmtSec(r[1] - r[0]) + ")" : "Whole capture (0 to " + fmtSec(T_END) + ")");
      if (state.compare) h("span", "eb-cmp", rangeEl, " compared with " + fmtSec(state.compare[0]) + " to " + fmtSec(state.compare[1]));
      if (state.picking === "compare") h("span", "eb-cmp", rangeEl, " drag the range to compare with");
      if (r) {
        var btn = h("button", "clear-range", rangeEl, "clear"); btn.type = "button";
        btn.addEventListener("click", function () { state.picking = null; R.setRange(null); });
      }
      cmp.disabled = !r;
      cmp.textContent = state.compare ? "stop comparing" : "compare\u2026";
      cli.textContent = R.command("flamegraph");
      R.summary(sum);
    }
    cmp.addEventListener("click", function () {
      if (state.compare) { R.setCompare(null); return; }
      state.picking = state.picking ? null : "compare";
      show();
    });
    bar.querySelector(".copy-cli").addEventListener("click", function () {
      var t = cli.textContent;
      if (navigator.clipboard) navigator.clipboard.writeText(t).catch(function () {});
    });
    bar.querySelectorAll("[data-zoom]").forEach(function (b) {
      b.addEventListener("click", function () {
        var v = state.view, w = v[1] - v[0], z = b.getAttribute("data-zoom");
        if (z === "sel" && state.range) R.setView([state.range[0] - (state.range[1] - state.range[0]) * 0.1, state.range[1] + (state.range[1] - state.range[0]) * 0.1]);
        else if (z === "out") R.setView([v[0] - w / 2, v[1] + w / 2]);
        else if (z === "left") R.setView([v[0] - w / 3, v[1] - w / 3]);
        else if (z === "right") R.setView([v[0] + w / 3, v[1] + w / 3]);
        else if (z === "reset") R.setView([0, T_END]);
      });
    });
    ["range", "filter"].forEach(function (e) { R.on(e, show); });
    R.showBar = show;
    show();
  }
  // the command line that draws the selection's flame graph from the bundle
  R.command = function (verb, extra) {
    var cl = PAGE.cli || {}, r = state.range, parts = ["profiler", verb, cl.bundle || "BUNDLE"];
    if (r) parts.push("--from", (r[0] + (cl.offset || 0)).toFixed(2) + "s", "--to", (r[1] + (cl.offset || 0)).toFixed(2) + "s");
    var f = R.filterSpec();
    if (f && f.kind === "target") parts.push("--pid", String(f.pid));
    if (f && f.kind === "thread") parts.push("--tid", String(f.tid));
    if (f && f.kind === "pool") {
      var tids = [];
      for (var i = 0; i < NTH; i++) if (R.mask[i]) tids.push(TH.tid[i]);
      tids.slice(0, 16).forEach(function (t) { parts.push("--tid", String(t)); });
    }
    if (extra) parts.push(extra);
    parts.push("-o", "range.svg");
    return parts.join(" ");
  };
  // what each view says about the selection, gathered in the toolbar with a link to each
  R.summaries = [];
  R.summary = function (holder) {
    holder.textContent = "";
    var bits = R.summaries.map(function (f) { return f(); }).filter(Boolean);
    if (!state.range && !state.filter) {
      holder.textContent = "Drag across any chart, track or heatmap to select a time range; every view below follows.";
      return;
    }
    h("span", null, holder, (state.filter ? R.filterName() + ": " : ""));
    bits.forEach(function (b, i) {
      if (i) h("span", null, holder, " \u00b7 ");
      var a = h("a", null, holder, b[1]); a.href = "#" + b[0];
      a.addEventListener("click", function (evt) {
        evt.preventDefault();
        var t = document.getElementById(b[0]);
        if (t) t.scrollIntoView({block: "start"});
      });
    });
  };

  // ------------------------------------------------------------------ timeline charts
  var PL = 56, PR = 14, PT = 8, PB = 22;
  function panelOrder(keys) {
    var pref = PAGE.panel_order || [];
    return keys.slice().sort(function (a, b) {
      var ia = pref.indexOf(a), ib = pref.indexOf(b);
      if (ia < 0) ia = 1000; if (ib < 0) ib = 1000;
      return ia - ib || (a < b ? -1 : a > b ? 1 : 0);
    });
  }
  R.xTicks = function (svg, x, v, W, H, cls) {
    var span = v[1] - v[0], steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
    var room = Math.max(2, Math.floor((W - PL - PR) / 70)), tick = 3600;
    for (var i = 0; i < steps.length; i++) if (span / steps[i] <= room) { tick = steps[i]; break; }
    for (var k = Math.ceil(v[0] / tick - 1e-9); k * tick <= v[1] + 1e-9; k++) {
      var tx = x(k * tick), anchor = "middle";
      if (tx > W - PR - 14) anchor = "end";  // the last label stays inside the chart
      if (tx < PL + 10) anchor = "start";
      el("text", {x: tx, y: H - 6, "class": cls || "tick", "text-anchor": anchor}, svg).textContent = R.fmtTick(k * tick, tick);
    }
  };
  // one drag-to-select behaviour for every time chart: press, move, release ("tAt" maps a mouse
  // event to seconds); one window listener for every chart, however often they are redrawn
  var active = null;
  window.addEventListener("mouseup", function (evt) {
    if (!active) return;
    var d = active; active = null;
    if (Math.abs(evt.clientX - d.x) >= 4) R.setRange([d.a, d.tAt(evt)]);
    else if (d.onMove) d.onMove(null, d);
  });
  R.dragSelect = function (target, tAt, onMove) {
    target.addEventListener("mousedown", function (evt) {
      evt.preventDefault();
      active = {a: tAt(evt), x: evt.clientX, y: evt.clientY, tAt: tAt, onMove: onMove, target: target};
    });
    target.addEventListener("mousemove", function (evt) { if (active && active.target === target && onMove) onMove([active.a, tAt(evt)]); });
  };
  function Chart(holder, key, p) {
    this.key = key; this.p = p;
    var names = this.names = Object.keys(p.series || {});
    var box = this.box = h("div", "panel", holder);
    box.dataset.panel = key;
    var head = h("h4", null, box, p.title);
    h("span", "muted", head, " (" + p.unit + ")");
    this.note = h("span", "panel-note muted", head, "");
    this.wrap = h("div", "chart-wrap", box);
    this.H = p.stacked ? 170 : 140;
    this.colours = {};
    var self = this;
    names.forEach(function (n, i) { self.colours[n] = STATE_COLOURS[n] || R.PALETTE[i % R.PALETTE.length]; });
    this.legend = h("div", "legend", box);
    this.vals = {};
    names.forEach(function (n) {
      var item = h("span", "item", self.legend);
      item.dataset.series = n;
      h("i", null, item).style.background = self.colours[n];
      h("span", "name", item, n);
      self.vals[n] = h("span", "val", item, "");
    });
    this.tip = h("div", "tip", this.wrap);
    var targets = {};
    Object.keys(EX.targets || {}).forEach(function (k) { targets[EX.targets[k]] = +k; });
    this.perTarget = names.length > 0 && names.every(function (n) { return n in targets; });
    this.seriesPid = targets;
    this.draw();
  }
  Chart.prototype.shown = function () {
    // the series the filter keeps (per-target panels), and a series of the filter's own threads
    var pids = R.filterPids(), self = this;
    if (!pids || !this.perTarget) return this.names;
    return this.names.filter(function (n) { return pids[self.seriesPid[n]]; });
  };
  Chart.prototype.draw = function () {
    var p = this.p, v = state.view, self = this;
    var W = Math.max(320, Math.round(this.wrap.clientWidth || 900)), H = this.H;
    this.W = W;
    this.wrap.textContent = "";
    this.wrap.appendChild(this.tip);
    var svg = this.svg = el("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H, "class": "chart", role: "img"}, this.wrap);
    var pw = W - PL - PR, ph = H - PT - PB;
    var shown = this.shown(), extra = R.filterSeries && this.key === "cpu" ? R.filterSeries() : null;
    var series = {};
    shown.forEach(function (n) { series[n] = p.series[n]; });
    if (extra) series[extra.name] = extra.values;
    var names = Object.keys(series);
    this.series = series;
    var i0 = Math.max(0, Math.floor(v[0] / STEP)), i1 = Math.min(T.length, Math.ceil(v[1] / STEP));
    var top = 0, acc = T.map(function () { return 0; }), layers = [];
    names.forEach(function (n) {
      var s = series[n];
      if (p.stacked && n !== (extra && extra.name)) {
        var lo = acc.slice();
        acc = acc.map(function (a, i) { return a + (s[i] || 0); });
        layers.push([lo, acc.slice()]);
      } else {
        layers.push(null);
        for (var j = i0; j < i1; j++) if (s[j] !== null && isFinite(s[j]) && s[j] > top) top = s[j];
      }
    });
    if (p.stacked) for (var j = i0; j < i1; j++) if (acc[j] > top) top = acc[j];
    var ymax = niceMax(top, p.unit);
    var lead = ymax / Math.pow(10, Math.floor(Math.log10(ymax) + 1e-9));
    var div = Math.abs(lead - 3) < 1e-6 || Math.abs(lead - 6) < 1e-6 ? 3 : 4;  // round grid values
    function x(t) { return PL + pw * (t - v[0]) / (v[1] - v[0]); }
    function y(val) { return PT + ph - ph * Math.min(val, ymax) / ymax; }
    this.x = x;
    var clipId = "clip-" + this.key.replace(/[^\w-]/g, "_");
    el("rect", {x: PL, y: 0, width: pw, height: H}, el("clipPath", {id: clipId}, el("defs", {}, svg)));
    for (var g = 0; g <= div; g++) {
      var gv = ymax * g / div;
      el("line", {x1: PL, x2: PL + pw, y1: y(gv), y2: y(gv), "class": "grid"}, svg);
      el("text", {x: PL - 6, y: y(gv) + 4, "class": "tick", "text-anchor": "end"}, svg).textContent = fmtNum(gv);
    }
    R.xTicks(svg, x, v, W, H);
    var plot = el("g", {"clip-path": "url(#" + clipId + ")"}, svg);
    // ranges the analysis marks on every panel: a load's warm-up, its throughput dips (docs/load.md)
    (TL.marks || []).forEach(function (m) {
      var x0 = x(Math.max(0, m.start)), x1 = x(Math.min(T_END, m.end));
      if (x1 <= x0) return;
      var r = el("rect", {x: x0, y: PT, width: x1 - x0, height: ph, "class": "mark mark-" + m.kind,
        fill: m.kind === "dip" ? "#d9822b" : "#8c99a6", "fill-opacity": "0.14"}, plot);
      el("title", {}, r).textContent = m.label;
    });
    // not measured: a duty-cycled collector's panel outside its windows is a gap, not a zero
    var wins = this.key === "syscalls" ? ((TL.coverage || {}).syscalls || {}).windows : null;
    if (wins) {
      var last = 0;
      wins.concat([[T_END, T_END]]).forEach(function (w) {
        if (w[0] > last + 1e-6) el("rect", {x: x(last), y: PT, width: Math.max(0, x(w[0]) - x(last)), height: ph, "class": "unmeasured"}, plot);
        last = Math.max(last, w[1]);
      });
      this.note.textContent = " hatched: not measured (the collector traced " + R.windowsText(wins) + ")";
    }
    var mid = T.map(function (t) { return t + STEP / 2; });
    var lo_i = Math.max(0, i0 - 1), hi_i = Math.min(T.length, i1 + 1);
    names.forEach(function (n, i) {
      var c = self.colours[n] || "#1d2630";
      var s = series[n];
      if (layers[i]) {
        var lo = layers[i][0], hi = layers[i][1], pts = [];
        for (var j = lo_i; j < hi_i; j++) pts.push(x(mid[j]).toFixed(1) + "," + y(hi[j]).toFixed(1));
        for (j = hi_i - 1; j >= lo_i; j--) pts.push(x(mid[j]).toFixed(1) + "," + y(lo[j]).toFixed(1));
        el("polygon", {points: pts.join(" "), fill: c, "fill-opacity": "0.85"}, plot);
      } else {
        var seg = [];
        var flush = function () {
          if (seg.length === 1) { var xy = seg[0].split(","); el("circle", {cx: xy[0], cy: xy[1], r: 2, fill: c}, plot); }
          else if (seg.length) el("polyline", {points: seg.join(" "), fill: "none", stroke: c, "stroke-width": extra && n === extra.name ? 2.4 : 1.8,
            "stroke-dasharray": extra && n === extra.name ? "5 3" : ""}, plot);
          seg = [];
        };
        for (var j2 = lo_i; j2 < hi_i; j2++) {
          var val = s[j2];
          if (val === null || val === undefined || !isFinite(val)) { flush(); continue; }
          seg.push(x(mid[j2]).toFixed(1) + "," + y(val).toFixed(1));
        }
        flush();
      }
    });
    if (extra && !this.colours[extra.name]) this.colours[extra.name] = "#1d2630";
    this.legend.querySelectorAll(".item").forEach(function (it) {
      it.classList.toggle("off", shown.indexOf(it.dataset.series) < 0);
    });
    this.box.classList.toggle("dimmed", !!R.mask && !this.perTarget && this.key !== "cpu");
    if (!wins) this.note.textContent = R.mask && !this.perTarget && this.key !== "cpu" ? " (host-wide or all targets: not narrowed by the filter)" :
      extra ? " (dashed: " + extra.name + ", from its threads' tracks)" : "";
    this.sel = el("rect", {x: 0, y: PT, width: 0, height: ph, "class": "sel", visibility: "hidden"}, svg);
    this.cmp = el("rect", {x: 0, y: PT, width: 0, height: ph, "class": "sel cmp", visibility: "hidden"}, svg);
    this.cur = el("line", {x1: 0, x2: 0, y1: PT, y2: PT + ph, "class": "cursor", visibility: "hidden"}, svg);
    var hit = el("rect", {x: PL, y: PT, width: pw, height: ph, "class": "hit"}, svg);
    function tAt(evt) {
      var r = svg.getBoundingClientRect();
      var sx = (evt.clientX - r.left) * W / r.width;
      return Math.max(0, Math.min(T_END, v[0] + (sx - PL) / pw * (v[1] - v[0])));
    }
    hit.addEventListener("mousemove", function (evt) { var t = tAt(evt); R.setCursor(t); self.showTip(t, evt); });
    hit.addEventListener("mouseleave", function () { R.setCursor(null); self.tip.style.display = "none"; });
    hit.addEventListener("dblclick", function () { R.setRange(null); });
    R.dragSelect(hit, tAt, function (r) { self.showRange(r || state.range, self.sel); });
    this.showRange(state.range, this.sel);
    this.showRange(state.compare, this.cmp);
  };
  Chart.prototype.showRange = function (rg, rect) {
    if (!rg) { rect.setAttribute("visibility", "hidden"); return; }
    var a = Math.min(rg[0], rg[1]), b = Math.max(rg[0], rg[1]);
    var x0 = Math.max(PL, this.x(a)), x1 = Math.min(this.W - PR, this.x(b));
    if (x1 <= x0) { rect.setAttribute("visibility", "hidden"); return; }
    rect.setAttribute("x", x0); rect.setAttribute("width", Math.max(1, x1 - x0));
    rect.setAttribute("visibility", "visible");
  };
  Chart.prototype.showCursor = function (t) {
    var self = this;
    if (t === null || t === undefined || t < state.view[0] || t > state.view[1]) {
      this.cur.setAttribute("visibility", "hidden");
      Object.keys(this.vals).forEach(function (n) { self.vals[n].textContent = ""; });
      return;
    }
    this.cur.setAttribute("x1", this.x(t)); this.cur.setAttribute("x2", this.x(t)); this.cur.setAttribute("visibility", "visible");
    var j = Math.min(T.length - 1, Math.max(0, Math.floor(t / STEP)));
    Object.keys(this.vals).forEach(function (n) { self.vals[n].textContent = n in self.series ? " " + fmtNum(self.series[n][j]) : ""; });
  };
  Chart.prototype.showTip = function (t, evt) {
    var j = Math.min(T.length - 1, Math.max(0, Math.floor(t / STEP))), tip = this.tip, self = this;
    tip.textContent = "";
    h("div", "tip-t", tip, fmtSec(T[j]) + " to " + fmtSec(T[j] + STEP));
    Object.keys(this.series).forEach(function (n) {
      var row = h("div", null, tip);
      h("i", null, row).style.background = self.colours[n] || "#1d2630";
      var val = self.series[n][j];
      h("span", null, row, n + ": " + (val === null || val === undefined ? "not measured" : fmtNum(val) + " " + self.p.unit));
    });
    var r = this.wrap.getBoundingClientRect();
    var left = evt.clientX - r.left + 14;
    if (left > r.width - 250) left = evt.clientX - r.left - 260;
    tip.style.left = Math.max(0, left) + "px";
    tip.style.top = "4px";
    tip.style.display = "block";
  };
  function timeline() {
    var holder = document.getElementById("charts");
    if (!holder) return;
    var panels = TL.panels || {}, charts = [];
    panelOrder(Object.keys(panels)).forEach(function (k) {
      if (Object.keys(panels[k].series || {}).length && T.length) charts.push(new Chart(holder, k, panels[k]));
    });
    R.charts = charts;
    wheelZoom(holder, PL);
    R.on("cursor", function () { charts.forEach(function (c) { c.showCursor(state.cursor); }); });
    R.on("range", function () { charts.forEach(function (c) { c.showRange(state.range, c.sel); c.showRange(state.compare, c.cmp); }); });
    R.on("view", function () { charts.forEach(function (c) { c.draw(); }); });
    R.on("filter", function () { charts.forEach(function (c) { c.draw(); }); });
    R.onResize(function () { charts.forEach(function (c) { c.draw(); }); });
  }
  // Ctrl (or Cmd) + wheel over a chart or the tracks zooms around the pointer; Shift + wheel pans
  function wheelZoom(holder, left) {
    holder.addEventListener("wheel", function (evt) {
      var svg = evt.target.closest && evt.target.closest("svg");
      if (!svg || !(evt.ctrlKey || evt.metaKey || evt.shiftKey)) return;
      evt.preventDefault();
      var r = svg.getBoundingClientRect(), v = state.view, w = v[1] - v[0];
      var f = Math.max(0, Math.min(1, (evt.clientX - r.left - left * r.width / svg.viewBox.baseVal.width) /
        ((r.width) * (1 - (left + PR) / svg.viewBox.baseVal.width))));
      var d = evt.deltaY || evt.deltaX;
      if (evt.shiftKey && !(evt.ctrlKey || evt.metaKey)) { R.setView([v[0] + w * 0.1 * Math.sign(d), v[1] + w * 0.1 * Math.sign(d)]); return; }
      var nw = w * (d > 0 ? 1.25 : 0.8), t = v[0] + f * w;
      R.setView([t - f * nw, t + (1 - f) * nw]);
    }, {passive: false});
  }
  R.wheelZoom = wheelZoom;
  var resizers = [], resizeTimer = null;
  R.onResize = function (f) { resizers.push(f); };
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { resizers.forEach(function (f) { f(); }); }, 120);
  });

  // ------------------------------------------------------------------ thread tracks
  function unrle(s) {
    var out = [], re = /([a-zA-Z-])(\d*)/g, m;
    while ((m = re.exec(s || ""))) for (var k = 0, n = m[2] ? +m[2] : 1; k < n; k++) out.push(m[1]);
    return out;
  }
  var TR = EX.tracks, decoded = {};
  function track(i) {
    if (!TR || !TR.on[i]) return null;
    if (!decoded[i]) {
      decoded[i] = {on: unrle(TR.on[i]).map(function (c) { return (c.charCodeAt(0) - 97) / 25; }),
                    rq: unrle(TR.runq[i]).map(function (c) { return (c.charCodeAt(0) - 97) / 25; }), st: unrle(TR.state[i])};
    }
    return decoded[i];
  }
  R.track = track;
  // the filter's own CPU use per timeline bucket (cores), from its threads' tracks: the CPU panel's dashed line
  R.filterSeries = function () {
    var f = R.filterSpec();
    if (!f || f.kind === "target" || !TR) return null;
    var vals = T.map(function () { return 0; }), any = false;
    for (var i = 0; i < NTH; i++) {
      if (!R.mask[i]) continue;
      var tr = track(i);
      if (!tr) continue;
      any = true;
      for (var j = 0; j < T.length; j++) vals[j] += tr.on[j] || 0;
    }
    return any ? {name: R.filterName(), values: vals.map(function (v) { return Math.round(v * 100) / 100; })} : null;
  };
  var ST_COLOURS = {I: "#d9822b", F: "#b8434e", D: "#c9d3df", S: "#e3e7ec", O: "#9aa5b1", R: "#e3e7ec", "-": "#f3f5f7"};
  var ST_NAMES = {I: "blocked on IO", F: "futex (locks, parked workers)", D: "idle (epoll, recv)", S: "sleep", O: "other", R: "", "-": "no sample"};
  function trackRows() {
    // pools by default; a target's pools; a pool's threads; a thread and its pool
    var f = R.filterSpec(), groups = {}, rows = [];
    for (var i = 0; i < NTH; i++) {
      if (!track(i)) continue;
      var key = TH.pid[i] + ":" + TH.pool[i];
      (groups[key] = groups[key] || {pid: TH.pid[i], pool: TH.pool[i], idx: []}).idx.push(i);
    }
    Object.keys(groups).forEach(function (k) {
      var g = groups[k];
      if (f && f.kind !== "thread" && f.pid !== g.pid) return;
      if (f && f.kind === "thread" && g.idx.every(function (i) { return TH.tid[i] !== f.tid; })) return;
      if ((f && (f.kind === "pool" && f.pool === g.pool || f.kind === "thread")) || g.idx.length === 1) {
        if (g.idx.length > 1) rows.push({label: "pool " + g.pool + " \u00d7" + g.idx.length, idx: g.idx, key: "p:" + g.pid + ":" + g.pool});
        g.idx.forEach(function (i) { rows.push({label: TH.comm[i] + " " + TH.tid[i], idx: [i], key: "th:" + TH.tid[i], thread: true}); });
      } else {
        rows.push({label: "pool " + g.pool + " \u00d7" + g.idx.length + (f ? "" : " \u00b7 " + R.targetName(g.pid)), idx: g.idx, key: "p:" + g.pid + ":" + g.pool});
      }
    });
    rows.forEach(function (r) {
      r.busy = 0;
      r.idx.forEach(function (i) { var t = track(i); t.on.forEach(function (v, j) { r.busy += v + (t.rq[j] || 0); }); });
    });
    rows.sort(function (a, b) { return b.busy - a.busy; });
    return rows;
  }
  function tracks() {
    var holder = document.getElementById("tracks"), box = document.getElementById("tracks-box");
    if (!holder) return;
    if (!TR || !T.length) { if (box) box.style.display = "none"; return; }
    var LW = 190, RH = 16, MAXROWS = 40;
    var tip = h("div", "tip", holder.parentNode);
    var svg, x, W, rowsShown = [];
    function draw() {
      holder.textContent = "";
      var rows = trackRows(), more = rows.length - MAXROWS;
      rowsShown = rows.slice(0, MAXROWS);
      W = Math.max(320, Math.round(holder.clientWidth || 900));
      var v = state.view, pw = W - LW - PR, H = rowsShown.length * RH + 20;
      x = function (t) { return LW + pw * (t - v[0]) / (v[1] - v[0]); };
      svg = el("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H, "class": "tracks"}, holder);
      rowsShown.forEach(function (r, k) {
        var y0 = k * RH, n = r.idx.length;
        var g = el("g", {"class": "track" + (state.filter === r.key ? " picked" : ""), "data-key": r.key}, svg);
        var lab = el("text", {x: LW - 6, y: y0 + 12, "text-anchor": "end", "class": "legend"}, g);
        lab.textContent = r.label.length > 30 ? r.label.slice(0, 29) + "\u2026" : r.label;
        el("title", {}, lab).textContent = r.label + (r.thread ? "" : " (click: show only it)");
        for (var j = Math.max(0, Math.floor(v[0] / STEP)); j < Math.min(T.length, Math.ceil(v[1] / STEP)); j++) {
          var on = 0, rq = 0, counts = {};
          r.idx.forEach(function (i) {
            var t = track(i); on += t.on[j] || 0; rq += t.rq[j] || 0;
            var c = t.st[j] || "-"; counts[c] = (counts[c] || 0) + 1;
          });
          var st = Object.keys(counts).sort(function (a, b) { return counts[b] - counts[a]; })[0];
          var xa = x(T[j]), xb = x(T[j] + STEP), hh = RH - 3, fo = Math.min(1, on / n), fr = Math.min(1 - fo, rq / n);
          el("rect", {x: xa, y: y0 + 1, width: Math.max(0.5, xb - xa - 0.3), height: hh, fill: ST_COLOURS[st] || "#e3e7ec"}, g);
          if (fr > 0.01) el("rect", {x: xa, y: y0 + 1 + hh * (1 - fo - fr), width: Math.max(0.5, xb - xa - 0.3), height: hh * fr, fill: "#9fd4a8"}, g);
          if (fo > 0.01) el("rect", {x: xa, y: y0 + 1 + hh * (1 - fo), width: Math.max(0.5, xb - xa - 0.3), height: hh * fo, fill: "#3a9a5b"}, g);
        }
      });
      R.xTicks(svg, x, v, W, H);
      if (more > 0) h("div", "muted small", holder, more + " more rows (pick a target or a pool above to see them)");
      if (TR.left_out) h("div", "muted small", holder, TR.left_out + " threads idle or nearly so have no track (the size bound)");
      var sel = el("rect", {y: 0, height: rowsShown.length * RH, "class": "sel", visibility: "hidden"}, svg);
      var cmp = el("rect", {y: 0, height: rowsShown.length * RH, "class": "sel cmp", visibility: "hidden"}, svg);
      var cur = el("line", {y1: 0, y2: rowsShown.length * RH, "class": "cursor", visibility: "hidden"}, svg);
      function place(rect, rg) {
        if (!rg) { rect.setAttribute("visibility", "hidden"); return; }
        var a = Math.max(LW, x(Math.min(rg[0], rg[1]))), b = Math.min(W - PR, x(Math.max(rg[0], rg[1])));
        if (b <= a) { rect.setAttribute("visibility", "hidden"); return; }
        rect.setAttribute("x", a); rect.setAttribute("width", b - a); rect.setAttribute("visibility", "visible");
      }
      svg._place = function () { place(sel, state.range); place(cmp, state.compare); };
      svg._cursor = function (t) {
        if (t === null || t < v[0] || t > v[1]) { cur.setAttribute("visibility", "hidden"); return; }
        cur.setAttribute("x1", x(t)); cur.setAttribute("x2", x(t)); cur.setAttribute("visibility", "visible");
      };
      svg._place();
      function tAt(evt) {
        var r = svg.getBoundingClientRect(), sx = (evt.clientX - r.left) * W / r.width;
        return Math.max(0, Math.min(T_END, v[0] + (sx - LW) / pw * (v[1] - v[0])));
      }
      function rowAt(evt) {
        var r = svg.getBoundingClientRect(), sy = (evt.clientY - r.top) * H / r.height;
        return rowsShown[Math.floor(sy / RH)];
      }
      R.dragSelect(svg, tAt, function (rg, click) {
        if (rg) { place(sel, rg); return; }
        place(sel, state.range);
        if (click) {  // a click, not a drag: show only this row's threads (again: every thread)
          var row = rowAt({clientY: click.y});
          if (row) R.setFilter(state.filter === row.key ? "" : row.key);
        }
      });
      svg.addEventListener("mousemove", function (evt) {
        var t = tAt(evt), row = rowAt(evt);
        R.setCursor(t);
        if (!row) { tip.style.display = "none"; return; }
        var j = Math.min(T.length - 1, Math.max(0, Math.floor(t / STEP))), on = 0, rq = 0, st = {};
        row.idx.forEach(function (i) { var tr = track(i); on += tr.on[j] || 0; rq += tr.rq[j] || 0; var c = tr.st[j]; st[c] = (st[c] || 0) + 1; });
        tip.textContent = "";
        h("div", "tip-t", tip, row.label + ", " + fmtSec(T[j]) + " to " + fmtSec(T[j] + STEP));
        h("div", null, tip, "on CPU " + (100 * on / row.idx.length).toFixed(0) + "%, waiting for a CPU " + (100 * rq / row.idx.length).toFixed(0) + "%");
        var off = Object.keys(st).filter(function (c) { return ST_NAMES[c]; }).map(function (c) { return ST_NAMES[c] + (row.idx.length > 1 ? " \u00d7" + st[c] : ""); });
        if (off.length) h("div", null, tip, "off CPU mostly: " + off.join(", "));
        var hr = holder.getBoundingClientRect();
        tip.style.left = Math.max(0, Math.min(evt.clientX - hr.left + 14, hr.width - 260)) + "px";
        tip.style.top = (evt.clientY - hr.top + 30) + "px";
        tip.style.display = "block";
      });
      svg.addEventListener("mouseleave", function () { tip.style.display = "none"; R.setCursor(null); });
    }
    R.on("range", function () { if (svg && svg._place) svg._place(); });
    R.on("cursor", function () { if (svg && svg._cursor) svg._cursor(state.cursor); });
    R.on("view", draw); R.on("filter", draw); R.onResize(draw);
    wheelZoom(holder, LW);
    draw();
  }

  // ------------------------------------------------------------------ start
  R.inits = [];
  R.start = function () {
    restoring = true;
    var u = R.restored;
    filterOptions();
    if (u.filter) R.setFilter(u.filter);
    var z = pair(u.zoom);
    if (z) R.setView(z);
    Object.keys(u).forEach(function (k) { if (["range", "compare", "filter", "zoom"].indexOf(k) < 0) R.urlParams[k] = u[k]; });
    timeline();
    tracks();
    R.inits.forEach(function (f) { f(); });
    toolbar();  // last: its summary reads what the views computed for the range
    document.querySelectorAll(".pick-range").forEach(function (b) {
      b.addEventListener("click", function () {
        // the load's times count from the capture's start, the timeline's from its first sample
        var off = (PAGE.cli || {}).offset || 0;
        R.setRange([+b.getAttribute("data-from") - off, +b.getAttribute("data-to") - off]);
        var t = document.getElementById("explore-bar"); if (t) t.scrollIntoView({block: "start"});
      });
    });
    var r = pair(u.range);
    if (r) state.range = clampRange(r);
    var c = pair(u.compare);
    if (c && state.range) state.compare = clampRange(c);
    restoring = false;
    R.emit("range");
    document.documentElement.classList.add("js");
  };
})();
