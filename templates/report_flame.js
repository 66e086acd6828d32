/* The HTML report's flame graphs (after report.js): on-CPU, off-CPU and goroutines.
 *
 * The stacks are embedded per time bucket and thread (analyzers/stacks/ranges.py); a selected
 * range and the filter merge the entries they keep. One orientation: the root on top, callees
 * below. Views: the graph; inverted (the functions that ran, each with its callers below it);
 * sandwich (one function's callers and its callees, every occurrence merged); and, when a second
 * range is picked, the difference of the two (widths: the selected range; red: a larger share
 * there than in the compared range, blue: a smaller one). Search takes a regular expression;
 * hovering a frame shows a tooltip; a click zooms; a double-click opens its sandwich.
 */
(function () {
  "use strict";
  var R = window.profilerReport, el = R.el, h = R.h, state = R.state;

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
  function diffColour(d, scale) {
    if (!scale || !d) return "rgb(245,245,245)";
    var r = Math.min(1, Math.abs(d) / scale), v = Math.round(245 - 190 * r);
    return d > 0 ? "rgb(245," + v + "," + v + ")" : "rgb(" + v + "," + v + ",245)";
  }
  function unitFmt(unit, v) {
    if (unit === "us") return R.fmtUs(v);
    var n = Math.abs(v) < 1e4 ? Math.round(v).toString() : R.fmtNum(v);  // counts: "57 samples", not "57.0"
    if (unit === "goroutines") return n + " " + (v === 1 ? "goroutine" : "goroutines");
    return n + " " + (v === 1 ? "sample" : "samples");
  }
  function esc(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

  // a tree to draw: parent (-1 for the root), names, totals and self values per node
  function Tree(parent, names, total, self) {
    this.parent = parent; this.names = names; this.total = total; this.self = self;
    var n = parent.length;
    this.kids = [];
    this.depth = new Int32Array(n);
    for (var i = 0; i < n; i++) this.kids.push([]);
    for (i = 1; i < n; i++) { this.kids[parent[i]].push(i); this.depth[i] = this.depth[parent[i]] + 1; }
  }
  // a tree built from paths: add(path of names from the top, value) merges identical prefixes
  function Builder(rootName) { this.parent = [-1]; this.names = [rootName]; this.total = [0]; this.self = [0]; this.index = {}; }
  Builder.prototype.add = function (path, v) {
    var node = 0;
    this.total[0] += v;
    for (var i = 0; i < path.length; i++) {
      var key = node + "\u0000" + path[i], c = this.index[key];
      if (c === undefined) {
        c = this.index[key] = this.parent.length;
        this.parent.push(node); this.names.push(path[i]); this.total.push(0); this.self.push(0);
      }
      this.total[c] += v;
      node = c;
    }
    this.self[node] += v;
  };
  Builder.prototype.tree = function () {
    return new Tree(this.parent, this.names, Float64Array.from(this.total), Float64Array.from(this.self));
  };

  function Flame(holder, G, key) {
    this.G = G; this.key = key;
    var n = G.parent.length;
    this.names = [];
    for (var i = 0; i < n; i++) this.names.push(i === 0 ? "all" : G.frames[G.frame[i]]);
    this.base = new Tree(G.parent, this.names, new Float64Array(n), new Float64Array(n));
    this.selfB = new Float64Array(n); this.totB = new Float64Array(n);
    this.zoom = 0; this.re = null;
    this.mode = R.urlParams[key + ".view"] || "graph";
    this.fn = R.urlParams[key + ".fn"] || null;
    this.snapshot = !!G.snap_t;
    this.scope = this.snapshot ? "the snapshot" : "this range";
    var box = this.box = h("div", "flame", holder);
    box.dataset.graph = key;
    var bar = h("div", "flame-bar", box);
    this.info = h("span", "flame-info", bar);
    var modes = h("span", "flame-modes", bar), self = this;
    this.modeBtns = {};
    [["graph", "graph"], ["inverted", "inverted"], ["sandwich", "callers / callees"]].forEach(function (m) {
      var b = h("button", "mode", modes, m[1]); b.type = "button"; b.dataset.mode = m[0];
      b.addEventListener("click", function () { self.setMode(m[0]); });
      self.modeBtns[m[0]] = b;
    });
    var search = this.search = h("input", "flame-search", bar);
    search.type = "search"; search.placeholder = "search (regex)";
    this.match = h("span", "flame-match muted", bar);
    var reset = h("button", "flame-reset", bar, "reset zoom"); reset.type = "button";
    this.legend = h("div", "flame-legend muted", box);
    var body = h("div", "flame-body", box);
    this.svgBox = h("div", "flame-graph", body);
    var side = h("div", "flame-top", body);
    this.topTitle = h("div", "flame-top-title", side, "Top functions (" + this.scope + ")");
    this.table = h("table", null, side);
    this.detail = h("div", "flame-detail muted", box, "Hover a frame for its share; click to zoom into it; double-click: its callers and callees.");
    this.tip = h("div", "tip flame-tip", box);
    search.addEventListener("input", function () { self.setSearch(search.value); });
    reset.addEventListener("click", function () { self.zoom = 0; self.draw(); });
    R.onResize(function () { self.draw(); });
    var q = R.urlParams[key + ".q"];
    if (q) { search.value = q; this.setSearch(q, true); }
  }
  Flame.prototype.setSearch = function (q, quiet) {
    try { this.re = q ? new RegExp(q) : null; this.search.classList.remove("bad"); }
    catch (e) { this.re = null; this.search.classList.add("bad"); }
    if (!quiet) { R.setParam(this.key + ".q", q); this.draw(); }
  };
  Flame.prototype.setMode = function (m, fn) {
    this.mode = m;
    if (fn !== undefined) this.fn = fn;
    if (m === "sandwich" && !this.fn) this.fn = this.topName;
    this.zoom = 0;
    R.setParam(this.key + ".view", m === "graph" ? "" : m);
    R.setParam(this.key + ".fn", m === "sandwich" ? this.fn : "");
    this.draw();
  };
  // merge the entries a range and the filter keep into self values (per node of the prefix tree)
  Flame.prototype.merge = function (r, selfArr) {
    var G = this.G, i;
    selfArr.fill(0);
    var keep = null, b0 = 0, b1 = G.nbuckets;
    if (this.snapshot) {
      // each process's snapshot nearest the middle of the range (the middle one without a range)
      keep = {};
      var pids = R.filterPids(), best = {}, mid = r ? (r[0] + r[1]) / 2 : null;
      G.snap_t.forEach(function (t, k) {
        var pid = G.snap_pid[k];
        if (pids && !pids[pid]) return;
        (best[pid] = best[pid] || []).push(k);
      });
      Object.keys(best).forEach(function (pid) {
        var ks = best[pid], pick = ks[Math.floor(ks.length / 2)];
        if (mid !== null) ks.forEach(function (k) { if (Math.abs(G.snap_t[k] - mid) < Math.abs(G.snap_t[pick] - mid)) pick = k; });
        keep[pick] = true;
      });
      this.picked = Object.keys(keep).map(function (k) { return G.snap_t[+k]; });
    } else if (r && G.timed && G.bucket > 0) {
      b0 = Math.floor((r[0] - G.t0) / G.bucket);
      b1 = Math.ceil((r[1] - G.t0) / G.bucket);
    }
    var th = G.th, mask = R.mask && th ? R.mask : null;
    for (i = 0; i < G.b.length; i++) {
      var b = G.b[i];
      if (keep ? !keep[b] : (b < b0 || b >= b1)) continue;
      if (mask && (th[i] < 0 || !mask[th[i]])) continue;
      selfArr[G.n[i]] += G.c[i];
    }
  };
  Flame.prototype.update = function () {
    var G = this.G, t = this.base, n = G.parent.length, i;
    this.merge(state.range, t.self);
    t.total.set(t.self);
    for (i = n - 1; i > 0; i--) t.total[G.parent[i]] += t.total[i];
    this.diff = !!state.compare && !this.snapshot && G.timed;
    if (this.diff) {
      this.merge(state.compare, this.selfB);
      this.totB.set(this.selfB);
      for (i = n - 1; i > 0; i--) this.totB[G.parent[i]] += this.totB[i];
    }
    if (this.zoom && !(this.view && this.view.total[this.zoom] > 0)) this.zoom = 0;
    this.draw();
    this.top();
  };
  // the tree the current view draws
  Flame.prototype.build = function () {
    var t = this.base, names = this.names, n = names.length, i, j;
    if (this.mode === "inverted") {
      var bi = new Builder("all");
      for (i = 1; i < n; i++) {
        if (!(t.self[i] > 0)) continue;
        var path = [];
        for (j = i; j > 0; j = t.parent[j]) path.push(names[j]);
        bi.add(path, t.self[i]);
      }
      return {tree: bi.tree(), title: "inverted: the functions that ran (their own time), each with its callers below"};
    }
    if (this.mode === "sandwich" && this.fn) {
      var fn = this.fn, callers = new Builder(fn), callees = new Builder(fn);
      for (i = 1; i < n; i++) {
        if (names[i] !== fn || !(t.total[i] > 0)) continue;
        var outer = false;
        for (j = t.parent[i]; j > 0; j = t.parent[j]) if (names[j] === fn) { outer = true; break; }
        if (outer) continue;  // a recursive call: counted at its outermost frame
        var up = [];
        for (j = t.parent[i]; j > 0; j = t.parent[j]) up.push(names[j]);
        callers.add(up, t.total[i]);
        var stack = [[i, []]];
        while (stack.length) {
          var it = stack.pop(), id = it[0], p = it[1];
          if (t.self[id] > 0) callees.add(p, t.self[id]);
          t.kids[id].forEach(function (c) { if (t.total[c] > 0) stack.push([c, p.concat([names[c]])]); });
        }
      }
      return {tree: callees.tree(), callers: callers.tree(), title: fn};
    }
    return {tree: t, title: ""};
  };
  Flame.prototype.draw = function () {
    var v = this.view = this.build(), self = this;
    Object.keys(this.modeBtns).forEach(function (m) { self.modeBtns[m].classList.toggle("on", m === self.mode); });
    this.svgBox.textContent = "";
    this.legend.textContent = "";
    var all = this.base.total[0];
    if (this.mode === "sandwich") {
      if (!this.fn) { h("div", "muted", this.svgBox, "Pick a function: double-click a frame, or \u21c5 in the table."); }
      else {
        h("div", "sandwich-head", this.svgBox, "Callers of " + this.fn + " (it on top, who calls it below)");
        this.drawTree(v.callers, false, all);
        h("div", "sandwich-head", this.svgBox, "Callees of " + this.fn + " (every call of it merged)");
        this.drawTree(v.tree, false, all);
      }
    } else {
      if (v.title) h("div", "sandwich-head", this.svgBox, v.title);
      this.drawTree(v.tree, this.diff && this.mode === "graph", all);
    }
    if (this.diff && this.mode === "graph") {
      this.legend.textContent = "Widths: the selected range. Red: a larger share of it than of the compared range (" +
        R.fmtSec(state.compare[0]) + " to " + R.fmtSec(state.compare[1]) + ", " + unitFmt(this.G.unit, this.totB[0]) + "); blue: a smaller share.";
    } else if (this.diff) {
      this.legend.textContent = "The difference of the two ranges is drawn in the graph view.";
    }
    this.drawInfo(all);
  };
  Flame.prototype.drawInfo = function (all) {
    var G = this.G, r = state.range, txt = unitFmt(G.unit, all);
    if (this.snapshot) {
      txt += " (snapshot" + (this.picked && this.picked.length ? " at " + this.picked.map(function (t) { return R.fmtSec(t); }).join(", ") : "") +
        (r ? ": the nearest to the range's middle)" : ": the middle of the window)");
    } else if (!G.timed) {
      txt += " (totals of the whole capture: no times)";
    } else if (r) {
      txt += " in the range";
    }
    if (R.mask) txt += G.th ? ", threads of " + R.filterName() : (this.snapshot ? "" : " (not narrowed: these stacks do not say their thread)");
    var cov = this.key === "offcpu" && G.timed ? R.coverageText("offcpu", r, "off-CPU stacks were") : null;
    if (cov) txt += " \u2014 " + cov;
    if (!all && r && G.timed && !cov) txt += ": none here";
    this.info.textContent = txt;
  };
  Flame.prototype.drawTree = function (t, diff, all) {
    var names = t.names, tot = t.total, kids = t.kids, zoom = this.mode === "sandwich" ? 0 : this.zoom, self = this;
    if (zoom >= tot.length) zoom = 0;
    var width = Math.max(300, this.svgBox.clientWidth || 900);
    var RH = 17, maxDepth = 0, base = t.depth[zoom], rects = [], re = this.re, matched = 0;
    var anc = [], a = zoom;
    while (a > 0) { a = t.parent[a]; anc.unshift(a); }
    anc.forEach(function (id, d) { rects.push([id, d, 0, width, true]); });
    var off = anc.length, stack = [[zoom, 0, width]];
    while (stack.length) {
      var top = stack.pop(), id = top[0], x0 = top[1], w = top[2];
      var d = t.depth[id] - base + off;
      if (d > maxDepth) maxDepth = d;
      rects.push([id, d, x0, w, false]);
      var cx = x0, ks = kids[id].slice().sort(function (p, q) { return tot[q] - tot[p]; });
      for (var k = 0; k < ks.length; k++) {
        var c = ks[k];
        if (!(tot[c] > 0)) continue;
        var cw = w * tot[c] / tot[id];
        if (cw >= 0.5) stack.push([c, cx, cw]);
        cx += cw;
      }
    }
    if (re) {
      var walk = [[0, false]];
      while (walk.length) {
        var it = walk.pop(), nid = it[0], under = it[1];
        var m = nid > 0 && re.test(names[nid]);
        if (m && !under) matched += tot[nid];
        kids[nid].forEach(function (c) { if (tot[c] > 0) walk.push([c, under || m]); });
      }
      this.match.textContent = "matched " + (tot[0] ? (100 * matched / tot[0]).toFixed(1) : "0") + "%";
    } else {
      this.match.textContent = "";
    }
    var scale = 0, allB = this.totB[0] || 0;
    function delta(id) { return (all ? tot[id] / all : 0) - (allB ? self.totB[id] / allB : 0); }
    if (diff) rects.forEach(function (r) { scale = Math.max(scale, Math.abs(delta(r[0]))); });
    var H = (maxDepth + 1) * RH + 4;
    var svg = el("svg", {width: width, height: H, "class": "flame-svg"}, this.svgBox);
    rects.forEach(function (r) {
      var id = r[0], d = r[1], x0 = r[2], w = r[3], ghost = r[4];
      var g = el("g", {"class": "fr" + (ghost ? " ghost" : ""), "data-node": id}, svg);
      var name = names[id];
      var fill = id === 0 ? "#dfe5ec" : diff ? diffColour(delta(id), scale) : frameColour(name, t.depth[id]);
      if (re && id > 0 && re.test(name)) fill = "#e040fb";
      el("rect", {x: x0.toFixed(2), y: d * RH, width: Math.max(0.5, w - 0.5).toFixed(2), height: RH - 1, fill: fill, rx: 1.5}, g);
      if (w > 28) {
        var chars = Math.floor((w - 6) / 6.6);
        var label = id === 0 ? names[0] + " (" + unitFmt(self.G.unit, tot[0]) + ")" : name;
        if (label.length > chars) label = label.slice(0, Math.max(0, chars - 2)) + "..";
        el("text", {x: (x0 + 3).toFixed(1), y: d * RH + 12}, g).textContent = label;
      }
      g.addEventListener("mousemove", function (evt) { self.showTip(evt, t, id, diff ? delta(id) : null); });
      g.addEventListener("mouseleave", function () { self.tip.style.display = "none"; });
      g.addEventListener("click", function () {
        if (self.mode !== "sandwich") { self.zoom = id; self.draw(); }
      });
      g.addEventListener("dblclick", function () { if (id > 0) self.setMode("sandwich", name); });
    });
  };
  Flame.prototype.showTip = function (evt, t, id, d) {
    var all = t.total[0], name = id === 0 ? t.names[0] : t.names[id], tip = this.tip, G = this.G;
    var text = name + ": " + unitFmt(G.unit, t.total[id]) + " (" + (all ? (100 * t.total[id] / all).toFixed(1) : "0") + "% of " + this.scope +
      "), self " + unitFmt(G.unit, t.self[id]);
    this.detail.textContent = text;
    tip.textContent = "";
    h("div", "tip-t", tip, name);
    h("div", null, tip, unitFmt(G.unit, t.total[id]) + ", " + (all ? (100 * t.total[id] / all).toFixed(1) : "0") + "% of " +
      (this.mode === "sandwich" ? "this function's" : this.scope));
    h("div", null, tip, "self " + unitFmt(G.unit, t.self[id]));
    if (d !== null) h("div", null, tip, "share " + (d >= 0 ? "+" : "") + (100 * d).toFixed(2) + " points against the compared range (" +
      unitFmt(G.unit, this.totB[id] || 0) + " there)");
    var r = this.box.getBoundingClientRect();
    tip.style.left = Math.max(0, Math.min(evt.clientX - r.left + 14, r.width - 300)) + "px";
    tip.style.top = (evt.clientY - r.top + 16) + "px";
    tip.style.display = "block";
  };
  Flame.prototype.top = function () {
    // self and total per function name; total counts a frame once even when it recurses
    var t = this.base, names = this.names, tot = t.total, selfc = t.self, kids = t.kids;
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
    this.topName = rows[0] || null;
    var tb = this.table, all = tot[0] || 1, me = this;
    tb.textContent = "";
    var hr = h("tr", null, tb);
    h("th", null, hr, "function"); h("th", "num", hr, "self"); h("th", "num", hr, "total"); h("th", null, hr, "");
    rows.forEach(function (n) {
      var tr = h("tr", null, tb);
      var td = h("td", "fn", tr, n); td.title = n + " (click: search for it)";
      h("td", "num", tr, (100 * selfBy[n] / all).toFixed(1) + "%");
      h("td", "num", tr, (100 * totBy[n] / all).toFixed(1) + "%");
      var sw = h("td", "sw", tr, "\u21c5"); sw.title = "its callers and callees";
      td.addEventListener("click", function () { me.search.value = esc(n); me.setSearch(me.search.value); });
      sw.addEventListener("click", function () { me.setMode("sandwich", n); });
    });
    if (!rows.length) h("td", "muted", h("tr", null, tb), "no samples in this range");
  };
  R.flames = {};
  R.inits.push(function () {
    var graphs = {};
    Object.keys(R.PAGE.flames || {}).forEach(function (k) { graphs[k] = R.PAGE.flames[k]; });
    if (R.EX.goroutines) graphs.goroutine = R.EX.goroutines;
    Object.keys(graphs).forEach(function (key) {
      var holder = document.getElementById("flame-" + key);
      if (!holder || !graphs[key]) return;
      var f = R.flames[key] = new Flame(holder, graphs[key], key);
      R.on("range", function () { f.update(); });
      R.on("filter", function () { f.update(); });
      f.update();
    });
    R.summaries.push(function () {
      var c = R.flames.cpu;
      return c ? ["cpu-flame-section", "on-CPU " + unitFmt(c.G.unit, c.base.total[0])] : null;
    });
    R.summaries.push(function () {
      var f = R.flames.offcpu;
      if (!f) return null;
      var cov = f.G.timed ? R.coverage("offcpu", state.range) : null;
      var txt = "off-CPU " + unitFmt(f.G.unit, f.base.total[0]);
      if (cov && cov.windows) txt += cov.measured > 0 ? " (measured " + R.fmtSec(cov.measured) + " of " + R.fmtSec(cov.span) + ")" : " (not measured here)";
      return ["offcpu-flame-section", txt];
    });
    R.summaries.push(function () {
      var g = R.flames.goroutine;
      return g ? ["goroutine-flame-section", "goroutines " + Math.round(g.base.total[0]) + (g.picked && g.picked.length ? " at " + R.fmtSec(g.picked[0]) : "")] : null;
    });
  });
})();
