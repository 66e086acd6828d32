// Flame graph interactivity (inlined into the SVG at render time; no network).
// Click a frame to zoom, "Reset Zoom" to go back, "Search" (or Ctrl-F) for a regex: matches turn
// purple and the share of all samples they cover is shown. URL parameters: ?s=REGEX searches,
// ?f=N zooms to the frame with data-i=N (used by tests and for sharing links).
"use strict";
var svg, frames, details, unzoombtn, searchbtn, matchedtxt, W, PAD, FONT, FONTW, INVERTED;
var currentSearch = null;

function init(evt) {
  // The SVG's own root: the document itself when opened as a file, the inline <svg> when a
  // report embeds it in an HTML document (there documentElement is <html>).
  svg = (evt && evt.target && evt.target.tagName === "svg") ? evt.target
      : (document.documentElement.tagName === "svg" ? document.documentElement : document.querySelector("svg"));
  frames = document.getElementById("frames");
  details = document.getElementById("details").firstChild;
  unzoombtn = document.getElementById("unzoom");
  searchbtn = document.getElementById("search");
  matchedtxt = document.getElementById("matched");
  W = parseFloat(svg.getAttribute("data-width"));
  PAD = parseFloat(svg.getAttribute("data-pad"));
  FONT = parseFloat(svg.getAttribute("data-font"));
  FONTW = 0.59;
  INVERTED = svg.getAttribute("data-inverted") === "1";
  var gs = frames.children;
  for (var i = 0; i < gs.length; i++) {
    var r = gs[i].querySelector("rect");
    gs[i].setAttribute("data-x", r.getAttribute("x"));
    gs[i].setAttribute("data-w", r.getAttribute("width"));
    fitText(gs[i]);
  }
  var params = new URLSearchParams(document.location.search);
  if (params.get("f") !== null) {
    var g = frames.querySelector('g[data-i="' + params.get("f") + '"]');
    if (g) zoom(g);
  }
  if (params.get("s")) search(params.get("s"));
}

window.addEventListener("click", function (e) {
  var g = findGroup(e.target);
  if (g) {
    if (g.classList.contains("hide")) return;
    zoom(g);
  } else if (e.target.id === "unzoom" || e.target.parentNode.id === "unzoom") {
    unzoom();
  } else if (e.target.id === "search" || e.target.parentNode.id === "search") {
    searchPrompt();
  }
}, false);

window.addEventListener("mouseover", function (e) {
  var g = findGroup(e.target);
  if (g) details.nodeValue = g.querySelector("title").textContent;
}, false);

window.addEventListener("mouseout", function (e) {
  if (findGroup(e.target)) details.nodeValue = " ";
}, false);

window.addEventListener("keydown", function (e) {
  if (e.keyCode === 114 || ((e.ctrlKey || e.metaKey) && e.keyCode === 70)) {
    e.preventDefault();
    searchPrompt();
  } else if (e.keyCode === 27) {
    unzoom();
    resetSearch();
  }
}, false);

function findGroup(node) {
  while (node && node.parentNode) {
    if (node.parentNode.id === "frames") return node;
    node = node.parentNode;
  }
  return null;
}

// The tooltip is "name (amount, percent)": the name is everything before the last " (".
function frameName(g) {
  var t = g.querySelector("title").textContent;
  var i = t.lastIndexOf(" (");
  return i < 0 ? t : t.substring(0, i);
}

function fitText(g) {
  var t = g.querySelector("text");
  var r = g.querySelector("rect");
  var w = parseFloat(r.getAttribute("width"));
  var name = frameName(g);
  t.setAttribute("x", parseFloat(r.getAttribute("x")) + 3);
  var fit = Math.floor((w - 6) / (FONT * FONTW));
  if (fit < 3) { t.textContent = ""; return; }
  t.textContent = name.length <= fit ? name : name.substring(0, fit - 2) + "..";
}

function zoom(g) {
  var x0 = parseFloat(g.getAttribute("data-x"));
  var w0 = parseFloat(g.getAttribute("data-w"));
  var y0 = parseFloat(g.querySelector("rect").getAttribute("y"));
  var ratio = (W - 2 * PAD) / w0;
  unzoombtn.classList.remove("hide");
  var gs = frames.children;
  for (var i = 0; i < gs.length; i++) {
    var e = gs[i];
    var r = e.querySelector("rect");
    var x = parseFloat(e.getAttribute("data-x"));
    var w = parseFloat(e.getAttribute("data-w"));
    var y = parseFloat(r.getAttribute("y"));
    var below = INVERTED ? y <= y0 : y >= y0;  // the frame itself and its ancestors
    var inside = x >= x0 - 1e-6 && x + w <= x0 + w0 + 1e-6;
    if (below && x <= x0 + 1e-6 && x + w >= x0 + w0 - 1e-6) {
      e.classList.remove("hide");
      if (e === g) e.classList.remove("parent"); else e.classList.add("parent");
      r.setAttribute("x", PAD);
      r.setAttribute("width", W - 2 * PAD);
    } else if (inside && !below) {
      e.classList.remove("hide", "parent");
      r.setAttribute("x", PAD + (x - x0) * ratio);
      r.setAttribute("width", w * ratio);
    } else {
      e.classList.add("hide");
    }
    fitText(e);
  }
  if (currentSearch) search(currentSearch);
}

function unzoom() {
  unzoombtn.classList.add("hide");
  var gs = frames.children;
  for (var i = 0; i < gs.length; i++) {
    var e = gs[i];
    var r = e.querySelector("rect");
    e.classList.remove("hide", "parent");
    r.setAttribute("x", e.getAttribute("data-x"));
    r.setAttribute("width", e.getAttribute("data-w"));
    fitText(e);
  }
  if (currentSearch) search(currentSearch);
}

function searchPrompt() {
  if (currentSearch) { resetSearch(); return; }
  var term = prompt("Search for (regular expression):", "");
  if (term) search(term);
}

function resetSearch() {
  currentSearch = null;
  var gs = frames.children;
  for (var i = 0; i < gs.length; i++) {
    var r = gs[i].querySelector("rect");
    if (r.hasAttribute("data-fill")) {
      r.setAttribute("fill", r.getAttribute("data-fill"));
      r.removeAttribute("data-fill");
    }
  }
  searchbtn.classList.remove("active");
  searchbtn.firstChild.nodeValue = "Search";
  matchedtxt.classList.add("hide");
}

function search(term) {
  var re;
  try { re = new RegExp(term); } catch (err) { alert("Not a regular expression: " + err.message); return; }
  resetSearch();
  currentSearch = term;
  var total = parseFloat(svg.getAttribute("data-total"));
  var spans = [];
  var gs = frames.children;
  for (var i = 0; i < gs.length; i++) {
    var e = gs[i];
    var name = frameName(e);
    if (!re.test(name)) continue;
    var r = e.querySelector("rect");
    r.setAttribute("data-fill", r.getAttribute("fill"));
    r.setAttribute("fill", "rgb(230,0,230)");
    // the share uses the frames' full-graph extent, so zooming does not change it
    spans.push([parseFloat(e.getAttribute("data-x")), parseFloat(e.getAttribute("data-w"))]);
  }
  searchbtn.classList.add("active");
  searchbtn.firstChild.nodeValue = "Reset Search";
  // union of the matched x ranges: nested matches (recursion) count once
  spans.sort(function (a, b) { return a[0] - b[0]; });
  var covered = 0, end = -1;
  for (var j = 0; j < spans.length; j++) {
    var s = spans[j][0], t = s + spans[j][1];
    if (t <= end) continue;
    covered += t - Math.max(s, end);
    end = t;
  }
  var pct = total > 0 ? (100 * covered / (W - 2 * PAD)) : 0;
  matchedtxt.classList.remove("hide");
  matchedtxt.firstChild.nodeValue = "Matched: " + pct.toFixed(2) + "% (" + spans.length + " frames)";
}
