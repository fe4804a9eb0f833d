// The insights page (/insights/): its charts, drawn by Chart.js (static/vendor/chart.js,
// see docs/dashboard.md) from the figures the page carries as JSON (json_script), and
// the button that asks the reports API for a new MCP prioritization report.
"use strict";

(function () {
  const REPORT_POLL_MS = 3000;
  const REPORT_POLL_MAX = 200; // ten minutes: then the page says to come back later
  const BAND_COLOURS = { poor: "#d9534f", weak: "#e8b931", good: "#3f9e5a" };
  const SERIES_COLOURS = ["#1d4a91", "#c8553d", "#3f9e5a", "#8e5ea2", "#e8b931", "#2a9d8f", "#6c757d", "#d17a22"];
  const MEAN_COLOUR = "#1f2a37";
  const MOST_SERIES = SERIES_COLOURS.length;

  function data(id) {
    const element = document.getElementById(id);
    return element ? JSON.parse(element.textContent) : null;
  }

  function share(row, band) {
    return row.sessions ? (100 * (row.bands[band] || 0)) / row.sessions : 0;
  }

  function one(value, digits) {
    return value === null || value === undefined ? "—" : Number(value).toFixed(digits);
  }

  // What every chart shares: no animation (the figures are static), a legend on top.
  function chart(canvasId, config) {
    const canvas = document.getElementById(canvasId);
    if (!canvas) return;
    config.options = Object.assign(
      { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { position: "top" } } },
      config.options,
    );
    new window.Chart(canvas, config);
  }

  function bandDatasets(rows, bands) {
    return bands.map((band) => ({
      type: "bar",
      label: band.label + " (% of sessions)",
      data: rows.map((row) => share(row, band.key)),
      backgroundColor: BAND_COLOURS[band.key],
      stack: "bands",
    }));
  }

  function trendChart(weeks, bands) {
    chart("trend-chart", {
      type: "bar",
      data: {
        labels: weeks.map((row) => String(row.key)),
        datasets: [
          {
            type: "line",
            label: "Mean score",
            data: weeks.map((row) => (row.mean_score === null ? null : Number(row.mean_score))),
            borderColor: MEAN_COLOUR,
            backgroundColor: MEAN_COLOUR,
            stack: "mean",
            order: 0,
          },
          ...bandDatasets(weeks, bands).map((dataset) => Object.assign(dataset, { order: 1 })),
        ],
      },
      options: {
        scales: {
          x: { stacked: true, title: { display: true, text: "Week the sessions started" } },
          y: { stacked: true, min: 0, max: 100, title: { display: true, text: "Score / % of sessions" } },
        },
        plugins: {
          tooltip: {
            callbacks: {
              footer: (items) => "Sessions: " + weeks[items[0].dataIndex].sessions,
            },
          },
        },
      },
    });
  }

  // One grouping (alert type, chain): each group's band shares, its mean and size in its label.
  function groupChart(canvasId, rows, bands) {
    chart(canvasId, {
      type: "bar",
      data: {
        // Two lines, so that a long name still fits beside the bars on a phone.
        labels: rows.map((row) => [String(row.key), "mean " + one(row.mean_score, 1) + " · " + row.sessions + " sessions"]),
        datasets: bandDatasets(rows, bands),
      },
      options: {
        indexAxis: "y",
        scales: {
          x: { stacked: true, min: 0, max: 100, title: { display: true, text: "% of sessions" } },
          y: { stacked: true },
        },
      },
    });
  }

  // The four criteria's means, one series per alert type (the largest ones first).
  function dimensionsChart(rows, dimensions) {
    const withDimensions = rows.filter((row) =>
      Object.values(row.dimension_means || {}).some((value) => value !== null),
    );
    const shown = withDimensions.slice().sort((a, b) => b.sessions - a.sessions).slice(0, MOST_SERIES);
    chart("dimensions-chart", {
      type: "bar",
      data: {
        labels: dimensions.map((dimension) => dimension.label),
        datasets: shown.map((row, index) => ({
          label: String(row.key),
          data: dimensions.map((dimension) => {
            const mean = row.dimension_means[dimension.key];
            return mean === null || mean === undefined ? null : Number(mean);
          }),
          backgroundColor: SERIES_COLOURS[index],
        })),
      },
      options: { scales: { y: { min: 0, max: 25, title: { display: true, text: "Mean points (of 25)" } } } },
    });
  }

  const bands = data("insights-bands");
  if (bands && window.Chart) {
    const alertTypes = data("insights-alert-types");
    trendChart(data("insights-weeks"), bands);
    groupChart("alert-type-chart", alertTypes, bands);
    groupChart("chain-chart", data("insights-chains"), bands);
    dimensionsChart(alertTypes, data("insights-dimensions"));
  }

  // --- A new MCP prioritization report ---

  function say(message) {
    document.querySelector("[data-report-status]").textContent = message;
  }

  function csrfToken() {
    return document.querySelector('meta[name="csrf-token"]').content;
  }

  async function fetchJson(url, options) {
    const response = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
    return { response, answer: await response.json().catch(() => ({})) };
  }

  // The job runs on a worker: follow it until it ends, then show the new report.
  async function follow(reportId, polls) {
    let reply;
    try {
      reply = await fetchJson("/api/v1/scoring/reports/" + reportId);
    } catch (error) {
      say("Could not reach the server: " + error.message + ". Reload the page later to see the report.");
      return;
    }
    if (!reply.response.ok) {  // signed out, or the report is gone: polling would not change that
      say("Could not read the report: " + (reply.answer.detail || "error " + reply.response.status));
      return;
    }
    const status = reply.answer.status;
    if (status === "completed") {
      say("Report written: showing it…");
      location.reload();
    } else if (status === "failed") {
      say("The report failed: " + (reply.answer.error_message || reply.answer.detail || "no reason was recorded"));
      document.querySelector("[data-report-button]").disabled = false;
    } else if (polls >= REPORT_POLL_MAX) {
      say("The report is still being written: reload the page later to read it.");
    } else {
      setTimeout(() => follow(reportId, polls + 1), REPORT_POLL_MS);
    }
  }

  async function requestReport(button) {
    button.disabled = true;
    let reply;
    try {
      reply = await fetchJson("/api/v1/scoring/reports/", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(data("insights-filters") || {}),
      });
    } catch (error) {
      say("Could not reach the server: " + error.message);
      button.disabled = false;
      return;
    }
    if (reply.response.status === 202) {
      say("Report requested: the judge model is writing it (this can take a few minutes)…");
      follow(reply.answer.report_id, 0);
    } else {
      say("Report not started: " + (reply.answer.detail || "error " + reply.response.status));
      button.disabled = false;
    }
  }

  const reportButton = document.querySelector("[data-report-button]");
  if (reportButton) reportButton.addEventListener("click", () => requestReport(reportButton));
  // A report still being written when the page was rendered: show it once it is done.
  const running = document.querySelector("[data-report-running]");
  if (running) follow(running.dataset.reportRunning, 0);
})();
