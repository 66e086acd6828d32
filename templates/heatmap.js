// Hover and range picking for profiler's heatmap SVGs: the body of function (D, KIND, svg), where
// D is the data the template embeds, KIND "latency" or "subsecond", svg this drawing's root (also
// when the SVG is inlined in an HTML report next to others: everything is looked up inside it).
  "use strict";
  var details = svg.querySelector(".details");
  var hl = svg.querySelector(".hlbox");
  var selection = svg.querySelector(".selection");
  var NS = "http://www.w3.org/2000/svg";

  function fmtLat(s) {
    if (s === null || s === undefined) return "-";
    var a = Math.abs(s);
    if (a >= 1) return s.toPrecision(3) + "s";
    if (a >= 1e-3) return (s * 1e3).toPrecision(3) + "ms";
    if (a >= 1e-6) return (s * 1e6).toPrecision(3) + "us";
    return (s * 1e9).toPrecision(3) + "ns";
  }
  function fmtSec(s) {
    return (Math.round(s * 1000) / 1000).toString() + "s";
  }
  function point(evt) {
    var p = svg.createSVGPoint();
    p.x = evt.clientX;
    p.y = evt.clientY;
    var m = svg.getScreenCTM();
    return m ? p.matrixTransform(m.inverse()) : p;
  }
  function say(text) {
    details.textContent = text;
  }
  function box(x, y, w, h) {
    hl.setAttribute("x", x);
    hl.setAttribute("y", y);
    hl.setAttribute("width", w);
    hl.setAttribute("height", h);
    hl.setAttribute("visibility", "visible");
  }

  function latencyHover(evt) {
    var pi = +evt.target.getAttribute("data-panel");
    var P = D.panels[pi];
    var q = point(evt);
    var c = Math.floor((q.x - D.left) / D.cw);
    var r = D.nrows - 1 - Math.floor((q.y - P.y) / D.ch);
    if (c < 0 || c >= D.ncols || r < 0 || r >= D.nrows) return;
    var n = P.counts[c][r];
    var tot = P.colTotals[c];
    var t1 = c * D.step, t2 = (c + 1) * D.step;
    var pct = tot ? (100 * n / tot).toFixed(1) : "0";
    box(D.left + c * D.cw, P.y + (D.nrows - 1 - r) * D.ch, D.cw, D.ch);
    say(P.label + ": time " + fmtSec(t1) + "-" + fmtSec(t2) + ", latency " + fmtLat(D.edges[r]) + "-" +
        fmtLat(D.edges[r + 1]) + ": " + n + " IOs (" + pct + "% of " + tot + " in the column; p50 " +
        fmtLat(P.p50[c]) + ", p99 " + fmtLat(P.p99[c]) + ")");
  }

  // sub-second CPU heatmap: cell (c, r) starts at t0 + c * step + r / rows seconds (step is 1 s
  // unless the capture was too long for a column per second)
  var pick = null;
  var S = D.step || 1;
  function cellAt(evt) {
    var q = point(evt);
    var c = Math.floor((q.x - D.left) / D.cw);
    var r = Math.floor((q.y - D.top) / D.ch);
    if (c < 0 || c >= D.ncols || r < 0 || r >= D.rows) return null;
    return {c: c, r: r, t: c * S + r / D.rows};
  }
  function subHover(evt) {
    var k = cellAt(evt);
    if (!k) return;
    box(D.left + k.c * D.cw, D.top + k.r * D.ch, D.cw, D.ch);
    var ms = 1000 / D.rows;
    var text = (S === 1 ? "second " + k.c : "seconds " + k.c * S + "-" + (k.c + 1) * S) + ", offset " + Math.round(k.r * ms) + "-" + Math.round((k.r + 1) * ms) + "ms: " +
        D.counts[k.c][k.r] + " samples";
    if (pick) text += "  (click again to end the range started at " + fmtSec(pick.t) + ")";
    say(text);
  }
  function cell(c, r, h) {
    var e = svg.ownerDocument.createElementNS(NS, "rect");
    e.setAttribute("x", D.left + c * D.cw);
    e.setAttribute("y", D.top + r * D.ch);
    e.setAttribute("width", D.cw);
    e.setAttribute("height", h);
    e.setAttribute("class", "sel");
    selection.appendChild(e);
  }
  function drawRange(a, b) {
    while (selection.firstChild) selection.removeChild(selection.firstChild);
    var per = D.rows;
    if (S !== 1) {  // wide columns: whole columns
      for (var c = Math.floor(a / S); c <= Math.floor((b - 1e-9) / S) && c < D.ncols; c++) cell(c, 0, D.ch * per);
      return;
    }
    for (var i = Math.round(a * per); i < Math.round(b * per); i++) cell(Math.floor(i / per), i % per, D.ch);
  }
  function subClick(evt) {
    var k = cellAt(evt);
    if (!k) return;
    if (!pick) {
      pick = k;
      drawRange(k.t, k.t + 1 / D.rows);
      say("range starts at " + fmtSec(k.t) + ": click the cell where it ends");
      return;
    }
    var a = Math.min(pick.t, k.t), b = Math.max(pick.t, k.t) + 1 / D.rows;
    pick = null;
    drawRange(a, b);
    var cmd = "profiler flamegraph " + D.source + " --from " + fmtSec(a) + " --to " + fmtSec(b);
    say(cmd);
    svg.setAttribute("data-range", fmtSec(a) + " " + fmtSec(b));
    try {
      if (window.parent && window.parent !== window) {
        window.parent.postMessage({type: "profiler-range", from: a, to: b, command: cmd}, "*");
      }
    } catch (e) { /* standalone file: nothing to tell */ }
  }

  var hits = svg.querySelectorAll(".hit");
  for (var i = 0; i < hits.length; i++) {
    if (KIND === "latency") {
      hits[i].addEventListener("mousemove", latencyHover);
    } else {
      hits[i].addEventListener("mousemove", subHover);
      hits[i].addEventListener("click", subClick);
    }
    hits[i].addEventListener("mouseleave", function () {
      hl.setAttribute("visibility", "hidden");
      if (!pick) say(" ");
    });
  }
