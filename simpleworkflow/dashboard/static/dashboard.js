// The dashboard's own script: the throughput chart (uPlot), the JSON editors'
// validation, refreshes that wait while a part of the page is in use, and a run's streams
// followed live. No inline script anywhere: the pages' Content-Security-Policy allows only
// files served from here.
(function () {
  "use strict";

  function drawChart(root) {
    var holder = root.querySelector("#throughput");
    var data = root.querySelector("#throughput-data");
    if (!holder || !data || typeof uPlot === "undefined") return;
    var series = JSON.parse(data.textContent);
    holder.textContent = "";
    var bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined;
    var width = Math.max(holder.clientWidth || 600, 300);
    new uPlot({
      width: width,
      height: 200,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
      axes: [{}, { label: "runs / minute" }],
      series: [
        {},
        { label: "succeeded", stroke: "#2e7d32", fill: "rgba(46,125,50,0.35)", paths: bars },
        { label: "failed", stroke: "#c62828", fill: "rgba(198,40,40,0.45)", paths: bars },
        { label: "retried", stroke: "#ef6c00", width: 2, points: { show: false } }
      ]
    }, [series.x, series.succeeded, series.failed, series.retried], holder);
  }

  // A JSON field: invalid text marks the field, says why, and keeps its form from
  // being sent. The server checks again (a script can be switched off).
  function checkJson(field) {
    var text = field.value.trim();
    var message = "";
    if (text !== "") {
      try { JSON.parse(text); } catch (error) { message = "Not JSON: " + error.message; }
    }
    field.setCustomValidity(message);
    field.classList.toggle("invalid", message !== "");
    var form = field.form;
    var state = form && form.querySelector(".json-state");
    if (state) state.textContent = message;
    return message === "";
  }

  // A stream of a run still running ([data-live] on its row) follows its items as they
  // are written, through the dashboard's Server-Sent Events for the stream: each item is
  // added to the row (the last SHOWN kept), the count follows, and the row says "ended"
  // once the stream is closed or the run has ended. After a cut, EventSource connects
  // again by itself and sends the last id it got (Last-Event-ID): the server goes on
  // after that item. The row is kept across the page's refreshes (hx-preserve).
  var SHOWN = 200;

  function showItem(items, data) {
    var item = document.createElement("span");
    item.className = "item";
    item.textContent = data.length > 80 ? data.slice(0, 79) + "\u2026" : data;
    items.appendChild(item);
    items.appendChild(document.createTextNode(" "));
    while (items.querySelectorAll(".item").length > SHOWN) {
      var first = items.querySelector(".item");
      if (first.nextSibling) items.removeChild(first.nextSibling);
      items.removeChild(first);
    }
  }

  function follow(row) {
    if (row.liveSource || typeof EventSource === "undefined") return;
    var items = row.querySelector(".stream-items");
    var count = row.querySelector(".stream-count");
    var state = row.querySelector(".stream-state");
    var more = row.querySelector(".stream-more");
    if (more) more.parentNode.removeChild(more); // the items come now, in order
    var source = new EventSource(row.getAttribute("data-live"));
    row.liveSource = source;
    state.textContent = "live";
    source.onmessage = function (event) {
      if (!row.isConnected) { source.close(); return; }
      showItem(items, event.data);
      count.textContent = String(Number(event.lastEventId) + 1);
    };
    source.addEventListener("end", function () {
      source.close();
      state.textContent = "ended";
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) state.textContent = "not live: reload the page";
      else state.textContent = "reconnecting";
    };
    source.onopen = function () { state.textContent = "live"; };
  }

  // A row a navigation or a refresh removed stops following its stream.
  document.addEventListener("htmx:beforeCleanupElement", function (event) {
    var source = event.target && event.target.liveSource;
    if (source) source.close();
  });

  function wire(root) {
    drawChart(root);
    if (root.matches && root.matches("[data-live]")) follow(root);
    root.querySelectorAll("[data-live]").forEach(follow);
    root.querySelectorAll("[data-json]").forEach(function (field) {
      if (field.dataset.wired) return;
      field.dataset.wired = "1";
      field.addEventListener("input", function () { checkJson(field); });
      checkJson(field);
    });
  }

  // A part of a page that refreshes itself ([data-refresh]) skips a refresh while the
  // user is using it: a field of its forms has the focus or holds text, or one of its
  // <details> is open. The refresh would replace what they type or read. (htmx's own
  // trigger conditions need eval, which the pages' htmx config and CSP forbid.)
  function inUse(part) {
    if (part.querySelector("details[open]")) return true;
    var fields = part.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var field = fields[i];
      if (field.type === "hidden" || field.type === "submit" || field.type === "button") continue;
      if (field === document.activeElement || field.value !== "") return true;
    }
    return false;
  }

  function refreshing(event) {
    var part = event.target;
    return part && part.hasAttribute && part.hasAttribute("data-refresh") ? part : null;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var part = refreshing(event);
    if (part && inUse(part)) event.preventDefault();
  });
  // A refresh asked for before the user began: its answer is dropped, not swapped in.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var part = refreshing(event);
    if (part && inUse(part)) event.detail.shouldSwap = false;
  });

  document.addEventListener("DOMContentLoaded", function () { wire(document); });
  document.addEventListener("htmx:load", function (event) { wire(event.target); });
  document.addEventListener("submit", function (event) {
    var fields = event.target.querySelectorAll ? event.target.querySelectorAll("[data-json]") : [];
    for (var i = 0; i < fields.length; i++) {
      if (!checkJson(fields[i])) { event.preventDefault(); fields[i].reportValidity(); return; }
    }
  }, true);
})();
