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

  // A failed score's reason as the pages show it (the server: scoring_ui.failure_reason).
  function reasonShown(reason) {
    if (!reason) return catalog.no_reason;
    const limit = catalog.reason_chars;
    return reason.length > limit ? reason.slice(0, limit - 1) + "…" : reason;
  }

  function badgeFor(status, totalScore, reason) {
    if (status === null) return catalog.not_scored;
    if (status === "pending" || status === "in_progress") return catalog.scoring;
    if (status === "failed") {
      if (!reason) return catalog.failed;
      const title = catalog.failed_with_reason.replace("{reason}", reasonShown(reason));
      return { css: catalog.failed.css, text: catalog.failed.text, title };
    }
    const band = catalog.bands.find((b) => b.low <= totalScore && totalScore <= b.high);
    return {
      css: "badge-" + band.key,
      text: totalScore + " · " + band.label,
      title: "Score " + totalScore + "/100: " + band.meaning + " (" + band.low + "-" + band.high + ")",
    };
  }

  function showBadge(sessionId, status, totalScore, reason) {
    const shown = badgeFor(status, totalScore, reason);
    document.querySelectorAll('[data-score-badge="' + sessionId + '"]').forEach((holder) => {
      const span = document.createElement("span");
      span.className = "badge " + shown.css;
      span.title = shown.title;
      span.textContent = shown.text;
      holder.replaceChildren(span);
    });
  }

  // --- The list's rows: a failed scoring's reason and its Retry ---

  function hideRowActions(sessionId) {
    const buttons = '[data-score-button][data-session-id="' + sessionId + '"]';
    const reasons = '[data-score-error="' + sessionId + '"]';
    document.querySelectorAll(buttons + ", " + reasons).forEach((element) => { element.hidden = true; });
  }

  function showRowFailure(sessionId, reason) {
    const row = document.querySelector('[data-session-row="' + sessionId + '"]');
    if (!row) return;
    let shown = row.querySelector("[data-score-error]");
    if (!shown) {
      shown = document.createElement("p");
      shown.className = "score-error";
      shown.dataset.scoreError = sessionId;
      row.querySelector(".score-line").after(shown);
    }
    shown.textContent = reasonShown(reason);
    shown.hidden = false;
    let retry = row.querySelector("[data-score-button][data-force]");
    if (!retry) {
      retry = document.createElement("button");
      retry.type = "button";
      retry.className = "small";
      retry.dataset.scoreButton = "";
      retry.dataset.force = "";
      retry.dataset.sessionId = sessionId;
      retry.textContent = "Retry";
      row.querySelector(".score-line").append(retry);
    }
    retry.disabled = false;
    retry.hidden = false;
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

  // A forced scoring (Re-score, Retry) sends the whole investigation to the judge
  // again, which a paid model charges for: ask first, with the estimated tokens
  // (rendered with the page, see scoring_ui.scoring_tokens).
  function confirmScoring(button) {
    const holder = button.closest("[data-estimated-tokens]");
    const tokens = Number(holder ? holder.dataset.estimatedTokens : 0);
    return askToConfirm(
      "Score this session again?",
      "Score this session again? The judge will read about " + tokens.toLocaleString("en") +
        " input tokens (the investigation twice: turn 2 resends turn 1), which a paid model charges for.",
      button.textContent.trim(),
    );
  }

  // A used-up spending budget refuses a scoring (409 with over_budget) until the user confirms.
  function confirmOverBudget(detail) {
    return askToConfirm(
      "Score past the spending budget?",
      "The server says: " + detail + ". Score this session all the same? Its cost is added to the spend.",
      "Score past the budget",
    );
  }

  function askToConfirm(label, text, confirmLabel) {
    const dialog = document.createElement("dialog");
    dialog.className = "confirm-scoring";
    dialog.setAttribute("aria-label", label);
    const question = document.createElement("p");
    question.textContent = text;
    const confirm = document.createElement("button");
    confirm.type = "button";
    confirm.textContent = confirmLabel;
    confirm.addEventListener("click", () => dialog.close("confirm"));
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "secondary";
    cancel.textContent = "Cancel";
    cancel.addEventListener("click", () => dialog.close("cancel"));
    const actions = document.createElement("div");
    actions.className = "dialog-actions";
    actions.append(confirm, cancel);
    dialog.append(question, actions);
    document.body.append(dialog);
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        dialog.remove();
        resolve(dialog.returnValue === "confirm");
      });
      dialog.showModal();
      cancel.focus();
    });
  }

  async function requestScoring(button, overBudgetConfirmed) {
    const sessionId = button.dataset.sessionId;
    const force = button.hasAttribute("data-force");
    if (force && !overBudgetConfirmed && !(await confirmScoring(button))) return;
    button.disabled = true;
    let response;
    let answer = {};
    try {
      response = await fetch("/api/v1/scoring/sessions/" + sessionId + "/score", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify({ force_rescore: force, confirm_over_budget: Boolean(overBudgetConfirmed) }),
      });
      answer = await response.json().catch(() => ({}));
    } catch (error) {
      say("Could not reach the server: " + error.message);
      button.disabled = false;
      return;
    }
    if (response.status === 409 && answer.over_budget) {
      button.disabled = false;
      if (await confirmOverBudget(answer.detail)) await requestScoring(button, true);
      else say("Scoring not started: " + answer.detail + ".");
      return;
    }
    if (response.status === 202) {
      say("Scoring requested: waiting for a judge worker…");
      showBadge(sessionId, answer.status, null);
      if (!onSessionPage()) hideRowActions(sessionId);
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
      if (event.phase === "waiting_for_quota") say("Waiting for the judge's quota: " + event.waiting_reason);
      else if (event.phase === "waiting_for_budget") say("Waiting for the scoring budget: " + event.waiting_reason);
      else say(PHASES[event.phase] || "The judge is working (" + event.phase + ")…");
    } else if (event.type === "scoring.completed") {
      showBadge(event.session_id, "completed", event.total_score);
      if (onSessionPage()) {
        say("Scoring completed: " + event.total_score + "/100.");
        refreshPanel();
      }
    } else if (event.type === "scoring.failed") {
      showBadge(event.session_id, "failed", null, event.error_message);
      if (onSessionPage()) {
        say("Scoring failed: " + event.error_message);
        refreshPanel();
      }
    }
    if (!onSessionPage()) {
      hideRowActions(event.session_id);
      if (event.type === "scoring.failed") showRowFailure(event.session_id, event.error_message);
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
