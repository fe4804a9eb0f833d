// Dashboard pages: request scorings through the REST API and follow them live
// on the WebSocket (/api/v1/ws, see docs/websocket.md).
//
// The page names its channel in <body data-channel> ("sessions" on the list,
// "session:<id>" on a session page) and the newest event id stored when it was
// rendered (data-last-event-id). After every (re)connect the script subscribes
// and catches up from the last event it handled, so nothing between the page
// render and the socket, or during a disconnect, is missed. A subscribe also
// replays the channel's newest events: those up to the rendered id are already
// on the page and are skipped. While the socket is down a banner says so; after
// the reconnect and its catchup it says the page has caught up.
"use strict";

(function () {
  const body = document.body;
  const catalog = JSON.parse(document.getElementById("badge-catalog").textContent);
  const PHASES = {
    analyzing_methodology: "Step 1 of 2: the judge is analysing the investigation's methodology…",
    identifying_missing_tools: "Step 2 of 2: the judge is identifying missing tools…",
  };
  const RECONNECT_MAX_MS = 15000;
  const CAUGHT_UP_SHOWN_MS = 8000;

  // --- Badges (same catalogue as the server's, see scoring_ui.badge_catalog) ---

  function badgeFor(status, totalScore) {
    if (status === null) return catalog.not_scored;
    if (status === "pending" || status === "in_progress") return catalog.scoring;
    if (status === "failed") return catalog.failed;
    const band = catalog.bands.find((b) => b.low <= totalScore && totalScore <= b.high);
    return {
      css: "badge-" + band.key,
      text: totalScore + " · " + band.label,
      title: "Score " + totalScore + "/100: " + band.meaning + " (" + band.low + "-" + band.high + ")",
    };
  }

  function showBadge(sessionId, status, totalScore) {
    const shown = badgeFor(status, totalScore);
    document.querySelectorAll('[data-score-badge="' + sessionId + '"]').forEach((holder) => {
      const span = document.createElement("span");
      span.className = "badge " + shown.css;
      span.title = shown.title;
      span.textContent = shown.text;
      holder.replaceChildren(span);
    });
  }

  function say(message) {
    document.querySelectorAll("[data-live-status]").forEach((el) => {
      el.textContent = message;
    });
  }

  // --- Requesting a scoring ---

  function csrfToken() {
    return document.querySelector('meta[name="csrf-token"]').content;
  }

  async function requestScoring(button) {
    const sessionId = button.dataset.sessionId;
    const force = button.hasAttribute("data-force");
    button.disabled = true;
    let response;
    let answer = {};
    try {
      response = await fetch("/api/v1/scoring/sessions/" + sessionId + "/score", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify({ force_rescore: force }),
      });
      answer = await response.json().catch(() => ({}));
    } catch (error) {
      say("Could not reach the server: " + error.message);
      button.disabled = false;
      return;
    }
    if (response.status === 202) {
      say("Scoring requested: waiting for a judge worker…");
      showBadge(sessionId, answer.status, null);
      button.hidden = !onSessionPage();
    } else if (response.ok) {
      say("This session already has a " + answer.status + " score.");
    } else {
      say("Scoring not started: " + (answer.detail || "error " + response.status));
      button.disabled = false;
    }
    if (onSessionPage()) await refreshPanel();
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-score-button]");
    if (button) requestScoring(button);
  });

  // --- The session page's score view ---

  function onSessionPage() {
    return Boolean(body.dataset.scorePanelUrl);
  }

  // Only the newest refresh may write: an older answer can arrive last and
  // would show a state the score has already left.
  let panelRequests = 0;

  async function refreshPanel() {
    const request = ++panelRequests;
    let html = null;
    try {
      const response = await fetch(body.dataset.scorePanelUrl, { credentials: "same-origin" });
      if (response.ok) html = await response.text();
    } catch {
      return; // the server is out of reach: the reconnect refreshes the panel once caught up
    }
    if (html !== null && request === panelRequests) {
      document.querySelector("[data-score-panel]").innerHTML = html;
    }
  }

  // --- Events ---

  const finishedScores = new Set();

  function handle(event) {
    const finished = event.type === "scoring.completed" || event.type === "scoring.failed";
    // A catchup can replay a score's earlier events after its live end.
    if (finishedScores.has(event.score_id)) return;
    if (finished) finishedScores.add(event.score_id);
    if (event.type === "scoring.started") {
      showBadge(event.session_id, "in_progress", null);
      if (onSessionPage()) {
        say("The judge has started scoring this session…");
        refreshPanel();
      }
    } else if (event.type === "scoring.progress") {
      say(PHASES[event.phase] || "The judge is working (" + event.phase + ")…");
    } else if (event.type === "scoring.completed") {
      showBadge(event.session_id, "completed", event.total_score);
      if (onSessionPage()) {
        say("Scoring completed: " + event.total_score + "/100.");
        refreshPanel();
      }
    } else if (event.type === "scoring.failed") {
      showBadge(event.session_id, "failed", null);
      if (onSessionPage()) {
        say("Scoring failed: " + event.error_message);
        refreshPanel();
      }
    }
    if (!onSessionPage()) {
      document
        .querySelectorAll('[data-score-button][data-session-id="' + event.session_id + '"]')
        .forEach((button) => { button.hidden = true; });
    }
  }

  // --- Connection state ---

  let bannerTimer = null;

  function showConnection(message, lost) {
    const banner = document.querySelector("[data-connection]");
    clearTimeout(bannerTimer);
    banner.className = "connection " + (lost ? "connection-lost" : "connection-restored");
    banner.textContent = message;
    banner.hidden = false;
    if (!lost) bannerTimer = setTimeout(() => { banner.hidden = true; }, CAUGHT_UP_SHOWN_MS);
  }

  function follow(channel) {
    const renderedUpTo = Number(body.dataset.lastEventId || 0);
    let lastEventId = renderedUpTo;
    let retryMs = 500;
    const seen = new Set();
    // After a lost connection: the events the catchup (and the replay) brought.
    let dropped = false;
    let missed = 0;

    function connect() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const socket = new WebSocket(scheme + location.host + "/api/v1/ws");
      socket.addEventListener("message", (message) => {
        const data = JSON.parse(message.data);
        if (data.type === "connection.established") {
          retryMs = 500;
          body.dataset.live = "connected";
          socket.send(JSON.stringify({ action: "subscribe", channel }));
          socket.send(JSON.stringify({ action: "catchup", channel, last_event_id: lastEventId }));
          if (dropped) showConnection("Reconnected: catching up…", true);
        } else if (data.type === "catchup.complete" && data.has_more) {
          socket.send(JSON.stringify({ action: "catchup", channel, last_event_id: data.last_event_id }));
        } else if (data.type === "catchup.complete" && dropped) {
          dropped = false;
          if (onSessionPage()) refreshPanel();
          showConnection(
            "Reconnected and caught up: " +
              (missed ? missed + " missed update" + (missed === 1 ? "" : "s") + " applied." : "nothing was missed."),
            false,
          );
        } else if (data.type && data.type.startsWith("scoring.") && data.id > renderedUpTo && !seen.has(data.id)) {
          seen.add(data.id);
          lastEventId = Math.max(lastEventId, data.id);
          if (dropped) missed += 1;
          handle(data);
        }
      });
      // Also after a refused handshake (HTTP 403, not logged in): the back-off
      // grows until a connection is established.
      socket.addEventListener("close", () => {
        body.dataset.live = "reconnecting";
        if (!dropped) missed = 0;
        dropped = true;
        showConnection(
          "Live updates lost: reconnecting (next try in " + Math.ceil(retryMs / 1000) + " s)… " +
            "This page may be out of date until then.",
          true,
        );
        setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, RECONNECT_MAX_MS);
      });
    }

    connect();
  }

  if (body.dataset.channel) follow(body.dataset.channel);
})();
