// agentsite — live updates for the trace inspector and the chat.
//
// The server announces every persisted change of a trace with the trace's event number `seq`
// and the HTML of the changed fragment (rendered from the page's own partials). This script
// puts each fragment in place (replace by id, or append), keeps the highest `seq` it has
// applied, and re-syncs from the database when it sees a gap, after a reconnect, or when the
// page was rendered while the trace was already running. Token deltas are appended to the
// answer being written; they are never the only copy (the final message replaces them).
(function () {
  "use strict";

  var root = document.querySelector("[data-live]");
  if (!root) { return; }
  var mode = root.getAttribute("data-live");

  function parse(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  function place(payload, container) {
    if (!payload.html || !payload.id) { return null; }
    var incoming = parse(payload.html);
    if (!incoming) { return null; }
    var existing = document.getElementById(payload.id);
    var reopen = existing && existing.querySelector("details[open]");
    if (existing) {
      existing.replaceWith(incoming);
    } else if (container) {
      var before = container.querySelector(":scope > .more:not(.earlier), :scope > .pending");
      container.insertBefore(incoming, before);
    } else {
      return null;
    }
    if (window.htmx) { window.htmx.process(incoming); }
    if (reopen) {
      // A step the reader had open stays open; opening fires its "toggle", which loads the
      // step's new state.
      var details = incoming.querySelector("details");
      if (details) { details.setAttribute("open", ""); }
    }
    return incoming;
  }

  // -- trace inspector ----------------------------------------------------------------------
  var traceState = { seq: parseInt(root.getAttribute("data-seq") || "0", 10), syncing: false, pending: false };

  function rescaleBars() {
    var rows = root.querySelectorAll("#steps > li.step");
    var end = 1;
    rows.forEach(function (row) {
      var offset = parseFloat(row.getAttribute("data-offset-ms") || "0");
      var dur = parseFloat(row.getAttribute("data-duration-ms") || "0") || 0;
      if (offset + dur > end) { end = offset + dur; }
    });
    rows.forEach(function (row) {
      var rect = row.querySelector("svg.bar rect");
      if (!rect) { return; }
      var offset = parseFloat(row.getAttribute("data-offset-ms") || "0");
      var dur = parseFloat(row.getAttribute("data-duration-ms") || "0") || 0;
      var x = Math.min(offset / end * 100, 100);
      var w = Math.max(Math.min(dur / end * 100, 100 - x), 0.4);
      rect.setAttribute("x", x.toFixed(3));
      rect.setAttribute("width", w.toFixed(3));
    });
  }

  function applyTraceEvent(payload) {
    if (payload.event === "delta") { return showDelta(payload); }
    if (payload.event === "step") {
      place(payload, document.getElementById("steps"));
      var empty = root.querySelector(".empty-steps");
      if (empty) { empty.remove(); }
      rescaleBars();
      if (payload.status !== "running") { hideLiveText(payload.step); }
    } else if (payload.event === "state") {
      var none = root.querySelector(".empty-states");
      if (none) { none.remove(); }
      place(payload, document.getElementById("states"));
    } else if (payload.event === "trace") {
      place(payload, null);
      if (payload.status && ["queued", "running"].indexOf(payload.status) === -1) { hideLiveText(); }
    }
  }

  var live = { step: null, el: null };
  function showDelta(payload) {
    var box = mode === "trace" ? document.getElementById("live-text") : null;
    if (mode === "conversation") {
      var bubble = document.getElementById("pending-" + payload.trace);
      if (!bubble) { return; }
      var text = bubble.querySelector(".pending-text");
      if (live.step !== payload.trace + ":" + payload.step) {
        live.step = payload.trace + ":" + payload.step;
        text.textContent = "";
      }
      text.textContent += payload.text;
      bubble.classList.add("streaming");
      keepScrolled();
      return;
    }
    if (!box) { return; }
    if (live.step !== payload.step) {
      live.step = payload.step;
      box.textContent = "";
    }
    box.hidden = false;
    box.textContent += payload.text;
  }
  function hideLiveText(step) {
    var box = document.getElementById("live-text");
    if (box && (step === undefined || step === live.step)) { box.hidden = true; box.textContent = ""; live.step = null; }
  }

  function resyncTrace() {
    if (traceState.syncing) { traceState.pending = true; return; }
    traceState.syncing = true;
    var url = root.getAttribute("data-changes-url") + "?since=" + traceState.seq;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (data) {
        if (data.reload) { window.location.reload(); return; }
        data.events.forEach(applyTraceEvent);
        traceState.seq = Math.max(traceState.seq, data.seq);
      })
      .catch(function () { /* the next event or reconnect tries again */ })
      .then(function () {
        traceState.syncing = false;
        if (traceState.pending) { traceState.pending = false; resyncTrace(); }
      });
  }

  function onTraceMessage(payload) {
    if (payload.event === "delta") {
      if (payload.seq > traceState.seq) { resyncTrace(); }
      return showDelta(payload);
    }
    if (typeof payload.seq !== "number") { return applyTraceEvent(payload); }
    if (payload.seq <= traceState.seq) { return; } // already applied (a replay, or from a re-sync)
    if (payload.seq > traceState.seq + 1) { return resyncTrace(); } // missed something
    applyTraceEvent(payload);
    traceState.seq = payload.seq;
  }

  // -- chat ---------------------------------------------------------------------------------
  var messages = document.getElementById("messages");
  function keepScrolled() {
    var nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 160;
    if (nearBottom) { window.scrollTo(0, document.body.scrollHeight); }
  }

  function onConversationMessage(payload) {
    if (payload.event === "delta") { return showDelta(payload); }
    if (payload.event === "message") {
      if (!document.getElementById(payload.id)) {
        var pending = payload.trace ? document.getElementById("pending-" + payload.trace) : null;
        var node = parse(payload.html);
        if (node) {
          messages.insertBefore(node, pending || null);
          if (window.htmx) { window.htmx.process(node); }
        }
      }
      keepScrolled();
      return;
    }
    if (payload.event === "trace") {
      var bubble = document.getElementById("pending-" + payload.trace);
      if (!bubble) {
        // A turn started elsewhere (another tab, a teammate): show it as the server renders it.
        if (payload.status === "running") { resyncConversation(); }
        return;
      }
      var status = bubble.querySelector(".pending-status");
      if (payload.status === "running") { status.textContent = "Working…"; }
      if (["queued", "running"].indexOf(payload.status) === -1) {
        bubble.remove();
        if (payload.status !== "completed") { resyncConversation(); }
      }
      return;
    }
    if (payload.event === "step") {
      var b = document.getElementById("pending-" + payload.trace);
      if (!b) { return; }
      var line = b.querySelector(".pending-status");
      var row = parse(payload.html);
      var name = row && row.querySelector(".step-name");
      var kind = row && row.querySelector(".step-kind");
      if (line && name && kind) {
        line.textContent = (payload.status === "running" || payload.status === "waiting" ? "" : "Done: ") + kind.textContent + " " + name.textContent + (payload.status === "running" ? "…" : "");
      }
    }
  }

  function resyncConversation() {
    var url = root.getAttribute("data-messages-url");
    if (!url || !window.htmx) { return; }
    window.htmx.ajax("GET", url, { target: "#messages", swap: "outerHTML" }).then(function () {
      messages = document.getElementById("messages");
      keepScrolled();
    });
  }

  // A sent message can arrive twice: in the response to the send and as a live event.
  document.addEventListener("htmx:afterSwap", function (event) {
    if (!event.target || event.target.id !== "messages") { return; }
    messages = event.target;
    var seen = {};
    messages.querySelectorAll(":scope > li[id]").forEach(function (li) {
      if (seen[li.id]) { li.remove(); } else { seen[li.id] = true; }
    });
  });

  // -- wiring ---------------------------------------------------------------------------------
  var opened = false;
  document.addEventListener("htmx:wsOpen", function () {
    // First open: the page may have been rendered while the trace was running; later opens are
    // reconnects after a drop. Either way, ask the database what we missed.
    if (mode === "trace") { resyncTrace(); } else if (opened) { resyncConversation(); }
    opened = true;
  });

  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var message = event.detail && event.detail.message;
    if (typeof message !== "string" || message.charAt(0) !== "{") { return; }
    var payload;
    try { payload = JSON.parse(message); } catch (e) { return; }
    if (!payload || typeof payload.event !== "string") { return; }
    event.preventDefault();
    if (mode === "trace") { onTraceMessage(payload); } else { onConversationMessage(payload); }
  });

  // The composer: Enter sends, Shift+Enter is a new line; cleared after a successful send.
  var composer = document.querySelector("form.composer");
  if (composer) {
    var area = composer.querySelector("textarea");
    area.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        if (area.value.trim()) { composer.requestSubmit(); }
      }
    });
    composer.addEventListener("htmx:afterRequest", function (event) {
      if (event.detail.successful) {
        area.value = "";
        var error = document.getElementById("composer-error");
        if (error) { error.textContent = ""; }
        keepScrolled();
        window.scrollTo(0, document.body.scrollHeight);
      }
    });
    composer.addEventListener("htmx:responseError", function () { /* 422: the error partial is shown */ });
  }

  if (mode === "trace") { rescaleBars(); }
  window.scrollTo(0, mode === "conversation" ? document.body.scrollHeight : 0);
})();
