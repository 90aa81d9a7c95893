// The dashboard's own script: the throughput chart (uPlot) and the JSON editors'
// validation. No inline script anywhere: the pages' Content-Security-Policy allows only
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

  function wire(root) {
    drawChart(root);
    root.querySelectorAll("[data-json]").forEach(function (field) {
      if (field.dataset.wired) return;
      field.dataset.wired = "1";
      field.addEventListener("input", function () { checkJson(field); });
      checkJson(field);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { wire(document); });
  document.addEventListener("htmx:load", function (event) { wire(event.target); });
  document.addEventListener("submit", function (event) {
    var fields = event.target.querySelectorAll ? event.target.querySelectorAll("[data-json]") : [];
    for (var i = 0; i < fields.length; i++) {
      if (!checkJson(fields[i])) { event.preventDefault(); fields[i].reportValidity(); return; }
    }
  }, true);
})();
