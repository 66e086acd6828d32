/* The HTML report's interactive parts (inlined into report.html; no network, no library).
 *
 * - Timeline: every panel of the analysis's timeline (data.timeline.panels) is drawn as a chart,
 *   whatever its key: a new Panel in analyzers/series/timeline.py appears here without markup.
 *   Hover shows every series' value at that time and one cursor runs across all charts; drag
 *   selects a time range (on any chart, or on the CPU sub-second heatmap); double-click or
 *   "whole capture" clears it.
 * - Range flame graphs: the on-CPU and off-CPU stacks are embedded per time bucket
 *   (analyzers/stacks/ranges.py); a selected range merges its buckets and redraws both graphs,
 *   rooted at the top, with search and a top-functions table (self and total).
 * Names of frames, threads and series are untrusted: they only ever reach the page as text
 * (textContent, SVG text nodes), never as markup.
 */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
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
  var DATA = readJSON("profiler-analysis") || {};
  var PAGE = readJSON("profiler-page") || {};
  var PALETTE = ["#2f6fb0", "#d9822b", "#3a9a5b", "#b8434e", "#7b5ea7", "#8c6d3f", "#c75fa0", "#6b7a8f", "#b3a11a", "#17a2b8"];
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
  function niceMax(v) {
    if (!(v > 0) || !isFinite(v)) return 1;
    var e = Math.pow(10, Math.floor(Math.log10(v)));
    var ms = [1, 2, 4, 6, 8, 10];
    for (var i = 0; i < ms.length; i++) if (ms[i] * e >= v) return ms[i] * e;
    return 10 * e;
  }

  // ------------------------------------------------------------------ shared state
  var TL = DATA.timeline || {t: [], step: 1, panels: {}};
  var T = TL.t || [];
  var STEP = TL.step || 1;
  var T_END = T.length ? T[T.length - 1] + STEP : (PAGE.t_end || 1);
  var state = {range: null, cursor: null};
  var rangeListeners = [], cursorListeners = [];
  function setRange(r) {
    if (r) {
      var a = Math.max(0, Math.min(r[0], r[1])), b = Math.min(T_END, Math.max(r[0], r[1]));
      r = b - a > 1e-6 ? [a, b] : null;
    }
    state.range = r;
    rangeListeners.forEach(function (f) { f(r); });
  }
  function setCursor(t) {
    state.cursor = t;
    cursorListeners.forEach(function (f) { f(t); });
  }
  window.profilerReport = {setRange: setRange, state: state};

  // ------------------------------------------------------------------ the range bar
  function rangeBars() {
    var bars = document.querySelectorAll(".range-bar");
    function show(r) {
      bars.forEach(function (bar) {
        bar.textContent = "";
        h("b", null, bar, r ? "Selected " + fmtSec(r[0]) + " to " + fmtSec(r[1]) + " (" + fmtSec(r[1] - r[0]) + ")"
                            : "Whole capture (0 to " + fmtSec(T_END) + ")");
        h("span", "muted", bar, r ? "  the flame graphs below show this range" : "  drag across a chart or the CPU heatmap to pick a range");
        if (r) {
          var btn = h("button", "clear-range", bar, "whole capture");
          btn.type = "button";
          btn.addEventListener("click", function () { setRange(null); });
        }
      });
    }
    rangeListeners.push(show);
    show(null);
  }

  // ------------------------------------------------------------------ timeline charts
  var W = 1040, PL = 56, PR = 12, PT = 8, PB = 22;
  function panelOrder(keys) {
    var pref = PAGE.panel_order || [];
    return keys.slice().sort(function (a, b) {
      var ia = pref.indexOf(a), ib = pref.indexOf(b);
      if (ia < 0) ia = 1000; if (ib < 0) ib = 1000;
      return ia - ib || (a < b ? -1 : a > b ? 1 : 0);
    });
  }
  function chart(holder, key, p) {
    var names = Object.keys(p.series || {});
    if (!names.length || !T.length) return;
    var box = h("div", "panel", holder);
    box.dataset.panel = key;
    var head = h("h4", null, box, p.title);
    h("span", "muted", head, " (" + p.unit + ")");
    var wrap = h("div", "chart-wrap", box);
    var H = p.stacked ? 170 : 140;
    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, "class": "chart", role: "img"}, wrap);
    var pw = W - PL - PR, ph = H - PT - PB;
    var colours = {};
    names.forEach(function (n, i) { colours[n] = STATE_COLOURS[n] || PALETTE[i % PALETTE.length]; });
    var top = 0, acc = T.map(function () { return 0; }), layers = [];
    names.forEach(function (n) {
      var s = p.series[n];
      if (p.stacked) {
        var lo = acc.slice();
        acc = acc.map(function (a, i) { return a + (s[i] || 0); });
        layers.push([lo, acc.slice()]);
      } else {
        s.forEach(function (v) { if (v !== null && isFinite(v) && v > top) top = v; });
      }
    });
    if (p.stacked) acc.forEach(function (v) { if (v > top) top = v; });
    var ymax = niceMax(top);
    function x(t) { return PL + pw * t / T_END; }
    function y(v) { return PT + ph - ph * Math.min(v, ymax) / ymax; }
    for (var g = 0; g <= 4; g++) {
      var gv = ymax * g / 4;
      el("line", {x1: PL, x2: PL + pw, y1: y(gv), y2: y(gv), "class": "grid"}, svg);
      el("text", {x: PL - 6, y: y(gv) + 4, "class": "tick", "text-anchor": "end"}, svg).textContent = fmtNum(gv);
    }
    var ticks = [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
    var tick = 3600;
    for (var ti = 0; ti < ticks.length; ti++) if (T_END / ticks[ti] <= 10) { tick = ticks[ti]; break; }
    for (var k = 0; k * tick <= T_END + 1e-9; k++) {
      el("text", {x: x(k * tick), y: H - 6, "class": "tick", "text-anchor": "middle"}, svg).textContent = fmtNum(k * tick) + "s";
    }
    // ranges the analysis marks on every panel: a load's warm-up, its throughput dips (docs/load.md)
    (TL.marks || []).forEach(function (m) {
      var x0 = x(Math.max(0, m.start)), x1 = x(Math.min(T_END, m.end));
      if (x1 <= x0) return;
      var r = el("rect", {x: x0, y: PT, width: x1 - x0, height: ph, "class": "mark mark-" + m.kind,
                          fill: m.kind === "dip" ? "#d9822b" : "#8c99a6", "fill-opacity": "0.14"}, svg);
      el("title", {}, r).textContent = m.label;
    });
    var mid = T.map(function (t) { return t + STEP / 2; });
    names.forEach(function (n, i) {
      var c = colours[n];
      if (p.stacked) {
        var lo = layers[i][0], hi = layers[i][1], pts = [];
        mid.forEach(function (t, j) { pts.push(x(t).toFixed(1) + "," + y(hi[j]).toFixed(1)); });
        for (var j = mid.length - 1; j >= 0; j--) pts.push(x(mid[j]).toFixed(1) + "," + y(lo[j]).toFixed(1));
        el("polygon", {points: pts.join(" "), fill: c, "fill-opacity": "0.85"}, svg);
      } else {
        var seg = [];
        var flush = function () {
          if (seg.length === 1) { var xy = seg[0].split(","); el("circle", {cx: xy[0], cy: xy[1], r: 2, fill: c}, svg); }
          else if (seg.length) el("polyline", {points: seg.join(" "), fill: "none", stroke: c, "stroke-width": 1.8}, svg);
          seg = [];
        };
        p.series[n].forEach(function (v, j) {
          if (v === null || !isFinite(v)) { flush(); return; }
          seg.push(x(mid[j]).toFixed(1) + "," + y(v).toFixed(1));
        });
        flush();
      }
    });
    var sel = el("rect", {x: 0, y: PT, width: 0, height: ph, "class": "sel", visibility: "hidden"}, svg);
    var cur = el("line", {x1: 0, x2: 0, y1: PT, y2: PT + ph, "class": "cursor", visibility: "hidden"}, svg);
    var hit = el("rect", {x: PL, y: PT, width: pw, height: ph, "class": "hit"}, svg);
    var legend = h("div", "legend", box);
    var vals = {};
    names.forEach(function (n) {
      var item = h("span", "item", legend);
      var sw = h("i", null, item);
      sw.style.background = colours[n];
      h("span", "name", item, n);
      vals[n] = h("span", "val", item, "");
    });
    var tip = h("div", "tip", wrap);
    function tAt(evt) {
      var r = svg.getBoundingClientRect();
      var sx = (evt.clientX - r.left) * W / r.width;
      return Math.max(0, Math.min(T_END, (sx - PL) / pw * T_END));
    }
    function showCursor(t) {
      if (t === null) {
        cur.setAttribute("visibility", "hidden");
        tip.style.display = "none";
        names.forEach(function (n) { vals[n].textContent = ""; });
        return;
      }
      cur.setAttribute("x1", x(t)); cur.setAttribute("x2", x(t)); cur.setAttribute("visibility", "visible");
      var j = Math.min(T.length - 1, Math.max(0, Math.floor(t / STEP)));
      names.forEach(function (n) {
        var v = p.series[n][j];
        vals[n].textContent = " " + fmtNum(v);
      });
    }
    function showTip(t, evt) {
      var j = Math.min(T.length - 1, Math.max(0, Math.floor(t / STEP)));
      tip.textContent = "";
      h("div", "tip-t", tip, fmtSec(T[j]) + " to " + fmtSec(T[j] + STEP));
      names.forEach(function (n) {
        var row = h("div", null, tip);
        var sw = h("i", null, row); sw.style.background = colours[n];
        h("span", null, row, n + ": " + fmtNum(p.series[n][j]) + " " + p.unit);
      });
      var r = wrap.getBoundingClientRect();
      var left = evt.clientX - r.left + 14;
      if (left > r.width - 240) left = evt.clientX - r.left - 250;
      tip.style.left = left + "px";
      tip.style.top = "4px";
      tip.style.display = "block";
    }
    function showRange(rg) {
      if (!rg) { sel.setAttribute("visibility", "hidden"); return; }
      sel.setAttribute("x", x(rg[0])); sel.setAttribute("width", Math.max(1, x(rg[1]) - x(rg[0])));
      sel.setAttribute("visibility", "visible");
    }
    cursorListeners.push(showCursor);
    rangeListeners.push(showRange);
    var drag = null;
    hit.addEventListener("mousedown", function (evt) { evt.preventDefault(); drag = {a: tAt(evt), x: evt.clientX}; });
    hit.addEventListener("mousemove", function (evt) {
      var t = tAt(evt);
      setCursor(t);
      showTip(t, evt);
      if (drag) showRange([drag.a, t]);
    });
    hit.addEventListener("mouseleave", function () { setCursor(null); tip.style.display = "none"; });
    window.addEventListener("mouseup", function (evt) {
      if (!drag) return;
      var d = drag; drag = null;
      if (Math.abs(evt.clientX - d.x) >= 4) setRange([d.a, tAt(evt)]);
      else showRange(state.range);
    });
    hit.addEventListener("dblclick", function () { setRange(null); });
  }
  function timeline() {
    var holder = document.getElementById("charts");
    if (!holder) return;
    var panels = TL.panels || {};
    panelOrder(Object.keys(panels)).forEach(function (k) { chart(holder, k, panels[k]); });
  }

  // ------------------------------------------------------------------ flame graphs
  function hue(name) {
    var x = 0;
    for (var i = 0; i < name.length; i++) x = (x * 31 + name.charCodeAt(i)) >>> 0;
    return x;
  }
  function frameColour(name, depth) {
    if (depth === 1) return "#c9d3df";
    if (name.indexOf("[unknown]") === 0) return "#b9bfc6";
    var v = hue(name);
    if (/_\[k\]$/.test(name) || /^(entry_|do_syscall|__x64_sys|__do_sys|ksys_|schedule|__schedule|futex_|do_futex)/.test(name)) {
      return "rgb(" + (200 + v % 40) + "," + (130 + (v >> 8) % 60) + ",40)";
    }
    return "rgb(" + (215 + v % 40) + "," + (80 + (v >> 8) % 120) + "," + (40 + (v >> 16) % 40) + ")";
  }
  function unitFmt(unit, v) {
    if (unit === "us") {
      if (v >= 1e6) return (v / 1e6).toFixed(2) + " s";
      if (v >= 1e3) return (v / 1e3).toFixed(1) + " ms";
      return v.toFixed(0) + " us";
    }
    var n = Math.abs(v) < 1e4 ? Math.round(v).toString() : fmtNum(v);  // counts: "57 samples", not "57.0"
    if (unit === "goroutines") return n + " " + (v === 1 ? "goroutine" : "goroutines");
    return n + " " + (v === 1 ? "sample" : "samples");
  }

  function Flame(holder, G, title) {
    this.G = G;
    var n = G.parent.length;
    this.kids = [];
    for (var i = 0; i < n; i++) this.kids.push([]);
    for (i = 1; i < n; i++) this.kids[G.parent[i]].push(i);
    this.depth = new Int32Array(n);
    for (i = 1; i < n; i++) this.depth[i] = this.depth[G.parent[i]] + 1;
    this.names = [];
    for (i = 0; i < n; i++) this.names.push(i === 0 ? "all" : G.frames[G.frame[i]]);
    this.self = new Float64Array(n);
    this.total = new Float64Array(n);
    this.zoom = 0;
    this.re = null;
    // a goroutine snapshot has no times: the range picked on the timeline does not apply to it
    this.snapshot = G.unit === "goroutines";
    this.scope = this.snapshot ? "the snapshot" : "this range";
    var box = h("div", "flame", holder);
    box.dataset.graph = title;
    var bar = h("div", "flame-bar", box);
    this.info = h("span", "flame-info", bar);
    var search = h("input", "flame-search", bar);
    search.type = "search"; search.placeholder = "search (regex)";
    this.match = h("span", "flame-match muted", bar);
    var reset = h("button", "flame-reset", bar, "reset zoom"); reset.type = "button";
    var body = h("div", "flame-body", box);
    this.svgBox = h("div", "flame-graph", body);
    var side = h("div", "flame-top", body);
    h("div", "flame-top-title", side, "Top functions (" + this.scope + ")");
    this.table = h("table", null, side);
    this.detail = h("div", "flame-detail muted", box, "Hover a frame for its share; click to zoom into it.");
    var self = this;
    search.addEventListener("input", function () {
      var q = search.value;
      try { self.re = q ? new RegExp(q) : null; search.classList.remove("bad"); }
      catch (e) { self.re = null; search.classList.add("bad"); }
      self.draw();
    });
    this.search = search;
    reset.addEventListener("click", function () { self.zoom = 0; self.draw(); });
    window.addEventListener("resize", function () { self.draw(); });
  }
  Flame.prototype.setRange = function (r) {
    var G = this.G, self = this.self, i;
    self.fill(0);
    var b0 = 0, b1 = G.nbuckets;
    if (r && G.timed && G.bucket > 0) {
      b0 = Math.floor((r[0] - G.t0) / G.bucket);
      b1 = Math.ceil((r[1] - G.t0) / G.bucket);
    }
    for (i = 0; i < G.b.length; i++) {
      if (G.b[i] >= b0 && G.b[i] < b1) self[G.n[i]] += G.c[i];
    }
    var tot = this.total;
    tot.set(self);
    for (i = tot.length - 1; i > 0; i--) tot[G.parent[i]] += tot[i];
    this.range = r;
    if (this.zoom && !(tot[this.zoom] > 0)) this.zoom = 0;
    this.draw();
    this.top();
  };
  Flame.prototype.draw = function () {
    var G = this.G, tot = this.total, kids = this.kids, names = this.names, zoom = this.zoom;
    var width = Math.max(300, this.svgBox.clientWidth || 900);
    var RH = 17, maxDepth = 0;
    var base = this.depth[zoom];
    var rects = [];
    var re = this.re, matched = 0, all = tot[0];
    var stack = [[zoom, 0, width]];
    // the zoomed frame's ancestors, full width, so the way back is visible
    var anc = [], a = zoom;
    while (a > 0) { a = G.parent[a]; anc.unshift(a); }
    anc.forEach(function (id, d) { rects.push([id, d, 0, width, true]); });
    var off = anc.length;
    while (stack.length) {
      var top = stack.pop(), id = top[0], x0 = top[1], w = top[2];
      var d = this.depth[id] - base + off;
      if (d > maxDepth) maxDepth = d;
      rects.push([id, d, x0, w, false]);
      var cx = x0;
      var ks = kids[id].slice().sort(function (p, q) { return tot[q] - tot[p]; });
      for (var k = 0; k < ks.length; k++) {
        var c = ks[k];
        if (!(tot[c] > 0)) continue;
        var cw = w * tot[c] / tot[id];
        if (cw >= 0.5) stack.push([c, cx, cw]);
        cx += cw;
      }
    }
    if (re) {
      // matched share: the widest matches, not counted again below a match
      var walk = [[0, false]];
      while (walk.length) {
        var it = walk.pop(), nid = it[0], under = it[1];
        var m = nid > 0 && re.test(names[nid]);
        if (m && !under) matched += tot[nid];
        kids[nid].forEach(function (c) { if (tot[c] > 0) walk.push([c, under || m]); });
      }
      this.match.textContent = "matched " + (all ? (100 * matched / all).toFixed(1) : "0") + "%";
    } else {
      this.match.textContent = "";
    }
    var H = (maxDepth + 1) * RH + 4;
    this.svgBox.textContent = "";
    var svg = el("svg", {width: width, height: H, "class": "flame-svg"}, this.svgBox);
    var self = this;
    rects.forEach(function (r) {
      var id = r[0], d = r[1], x0 = r[2], w = r[3], ghost = r[4];
      var g = el("g", {"class": "fr" + (ghost ? " ghost" : ""), "data-node": id}, svg);
      var name = names[id];
      var fill = id === 0 ? "#dfe5ec" : frameColour(name, self.depth[id]);
      if (re && id > 0 && re.test(name)) fill = "#e040fb";
      el("rect", {x: x0.toFixed(2), y: d * RH, width: Math.max(0.5, w - 0.5).toFixed(2), height: RH - 1, fill: fill, rx: 1.5}, g);
      if (w > 28) {
        var chars = Math.floor((w - 6) / 6.6);
        var label = id === 0 ? "all (" + unitFmt(G.unit, tot[0]) + ")" : name;
        if (label.length > chars) label = label.slice(0, Math.max(0, chars - 2)) + "..";
        el("text", {x: (x0 + 3).toFixed(1), y: d * RH + 12}, g).textContent = label;
      }
      g.addEventListener("mouseenter", function () {
        var share = all ? 100 * tot[id] / all : 0;
        self.detail.textContent = (id === 0 ? "all" : name) + ": " + unitFmt(G.unit, tot[id]) + " (" + share.toFixed(1) +
          "% of " + self.scope + "), self " + unitFmt(G.unit, self.self[id]);
      });
      g.addEventListener("click", function () { self.zoom = id; self.draw(); });
    });
    this.info.textContent = unitFmt(G.unit, all) + (this.range && G.timed ? " in the range" : "") +
      (this.snapshot ? " (one snapshot, the middle of the window: not tied to the range)"
        : !G.timed ? " (totals of the whole capture: no times)" : "");
    if (!all && this.range && G.timed) {
      this.info.textContent += ": none here. This graph's stacks were traced in these windows only: " +
        this.windows() + " (off-CPU and syscall traces run 1 s in 10 unless captured with --collector offcpu-trace)";
    }
  };
  Flame.prototype.windows = function () {
    // the time spans whose buckets hold stacks, merged: "0.0-1.0 s, 10.0-11.0 s"
    var G = this.G, seen = {}, i, out = [];
    for (i = 0; i < G.b.length; i++) seen[G.b[i]] = true;
    var bs = Object.keys(seen).map(Number).sort(function (a, b) { return a - b; });
    var start = null, prev = null;
    function flush() {
      if (start !== null) out.push((G.t0 + start * G.bucket).toFixed(1) + "-" + (G.t0 + (prev + 1) * G.bucket).toFixed(1) + " s");
    }
    bs.forEach(function (b) {
      if (prev === null || b !== prev + 1) { flush(); start = b; }
      prev = b;
    });
    flush();
    return out.slice(0, 12).join(", ") + (out.length > 12 ? ", ..." : "");
  };
  Flame.prototype.top = function () {
    // self and total per function name; total counts a frame once even when it recurses
    var G = this.G, names = this.names, tot = this.total, selfc = this.self, kids = this.kids;
    var selfBy = {}, totBy = {};
    var walk = [[0, {}]];
    while (walk.length) {
      var it = walk.pop(), id = it[0], seen = it[1];
      if (id > 0) {
        var nm = names[id];
        selfBy[nm] = (selfBy[nm] || 0) + selfc[id];
        if (!seen[nm]) { totBy[nm] = (totBy[nm] || 0) + tot[id]; seen = Object.assign({}, seen); seen[nm] = true; }
      }
      for (var k = 0; k < kids[id].length; k++) if (tot[kids[id][k]] > 0) walk.push([kids[id][k], seen]);
    }
    var rows = Object.keys(selfBy).filter(function (n) { return selfBy[n] > 0; })
      .sort(function (a, b) { return selfBy[b] - selfBy[a]; }).slice(0, 25);
    var t = this.table, all = tot[0] || 1, me = this;
    t.textContent = "";
    var hr = h("tr", null, t);
    h("th", null, hr, "function"); h("th", "num", hr, "self"); h("th", "num", hr, "total");
    rows.forEach(function (n) {
      var tr = h("tr", null, t);
      var td = h("td", "fn", tr, n); td.title = n;
      h("td", "num", tr, (100 * selfBy[n] / all).toFixed(1) + "%");
      h("td", "num", tr, (100 * totBy[n] / all).toFixed(1) + "%");
      tr.addEventListener("click", function () {
        me.search.value = n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
        me.re = new RegExp(me.search.value); me.draw();
      });
    });
    if (!rows.length) h("td", "muted", h("tr", null, t), "no samples in this range");
  };
  function flames() {
    var graphs = PAGE.flames || {};
    Object.keys(graphs).forEach(function (key) {
      var holder = document.getElementById("flame-" + key);
      if (!holder || !graphs[key]) return;
      var f = new Flame(holder, graphs[key], key);
      if (!f.snapshot) rangeListeners.push(function (r) { f.setRange(r); });
      f.setRange(null);
    });
  }

  // ------------------------------------------------------------------ CPU sub-second heatmap
  function cpuHeatmap() {
    var hm = PAGE.cpu_heatmap, holder = document.getElementById("cpu-heatmap");
    if (!hm || !holder) return;
    var cols = hm.counts.length, rows = hm.rows, cw = Math.max(4, Math.min(36, Math.floor(1000 / Math.max(1, cols)))), ch = 6;
    var max = 0;
    hm.counts.forEach(function (c) { c.forEach(function (v) { if (v > max) max = v; }); });
    var Wd = cols * cw + 62, Hd = rows * ch + 24;
    var svg = el("svg", {viewBox: "0 0 " + Wd + " " + Hd, width: Wd, height: Hd, "class": "cpu-heatmap"}, holder);
    var g = el("g", {transform: "translate(56,4)"}, svg);
    for (var c = 0; c < cols; c++) {
      for (var r = 0; r < rows; r++) {
        var v = hm.counts[c][r];
        var f = v ? Math.sqrt(v / max) : 0;
        var fill = v ? "rgb(" + Math.round(255 - 60 * f) + "," + Math.round(235 - 190 * f) + "," + Math.round(200 - 180 * f) + ")" : "#f3f5f7";
        el("rect", {x: c * cw, y: r * ch, width: cw - 0.5, height: ch - 0.5, fill: fill, "data-c": c, "data-r": r}, g);
      }
    }
    for (r = 0; r <= rows; r += rows / 5) {
      el("text", {x: -4, y: r * ch + 4, "class": "tick", "text-anchor": "end"}, g).textContent = (r / rows * 1000).toFixed(0) + "ms";
    }
    for (c = 0; c < cols; c += Math.max(1, Math.ceil(cols / 12))) {
      el("text", {x: c * cw + cw / 2, y: rows * ch + 14, "class": "tick", "text-anchor": "middle"}, g).textContent = c + "s";
    }
    var sel = el("rect", {"class": "hm-sel", visibility: "hidden"}, g);
    function cellTime(evt) {
      var t = evt.target;
      if (!t.dataset || t.dataset.c === undefined) return null;
      return hm.offset + (+t.dataset.c) + (+t.dataset.r) / rows;
    }
    var start = null;
    g.addEventListener("mousedown", function (evt) { var t = cellTime(evt); if (t !== null) { evt.preventDefault(); start = t; } });
    g.addEventListener("mousemove", function (evt) {
      var t = cellTime(evt);
      if (t === null) return;
      var c = +evt.target.dataset.c, r = +evt.target.dataset.r;
      holder.querySelector(".hm-info").textContent = c + " s + " + (r / rows * 1000).toFixed(0) + " ms: " + hm.counts[c][r] + " samples";
    });
    g.addEventListener("mouseup", function (evt) {
      var t = cellTime(evt);
      if (start === null || t === null) { start = null; return; }
      var a = Math.min(start, t), b = Math.max(start, t) + 1 / rows;
      start = null;
      setRange([a, b]);
    });
    h("div", "hm-info muted", holder, "Each column is one second, each row a " + (1000 / rows).toFixed(0) +
      " ms slice of it. Press on a cell and release on another to see that range's flame graphs.");
    rangeListeners.push(function (rg) {
      if (!rg) { sel.setAttribute("visibility", "hidden"); return; }
      var a = rg[0] - hm.offset, b = rg[1] - hm.offset;
      var c0 = Math.floor(a), c1 = Math.floor(Math.max(a, b - 1e-9));
      sel.setAttribute("x", c0 * cw); sel.setAttribute("y", 0);
      sel.setAttribute("width", (c1 - c0 + 1) * cw); sel.setAttribute("height", rows * ch);
      sel.setAttribute("visibility", "visible");
    });
  }

  function start() {
    rangeBars();
    timeline();
    flames();
    cpuHeatmap();
    document.documentElement.classList.add("js");
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
