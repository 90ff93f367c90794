// agentsite — live updates for the trace inspector and the chat.
//
// The server announces every persisted change of a trace with the trace's event number `seq`
// and the HTML of the changed fragment (rendered from the page's own partials). This script
// puts each fragment in place (replace by id, or append), keeps the highest `seq` it has
// applied, and re-syncs from the database when it sees a gap, after a reconnect, or when the
// page was rendered while the trace was already running. Token deltas are appended to the
// answer being written, as text; they are never the only copy (the final answer replaces them
// with the rendered markdown). The chat part also keeps an outbox: a message is sent over HTTP
// with an id of its own, kept in localStorage until the server took it, and sent again when the
// socket comes back, so nothing typed is lost and nothing is sent twice.
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
    var open = existing && existing.querySelector(":scope > details[open]");
    if (open && incoming.querySelector(":scope > details > summary")) {
      return patchOpen(existing, open, incoming);
    }
    if (existing) {
      existing.replaceWith(incoming);
    } else if (container) {
      var before = container.querySelector(":scope > .more:not(.earlier), :scope > .pending");
      container.insertBefore(incoming, before);
    } else {
      return null;
    }
    if (window.htmx) { window.htmx.process(incoming); }
    return incoming;
  }

  // A row the reader has open is patched, never replaced: its attributes, its summary line and
  // what follows its details (an approval's buttons) come from the new row; the open body stays
  // where the reader is, and is read again only when the step's status moved.
  function patchOpen(existing, open, incoming) {
    var moved = existing.className !== incoming.className;
    Array.prototype.slice.call(incoming.attributes).forEach(function (attr) {
      existing.setAttribute(attr.name, attr.value);
    });
    var summary = incoming.querySelector(":scope > details > summary");
    open.replaceChild(summary, open.querySelector(":scope > summary"));
    while (open.nextSibling) { existing.removeChild(open.nextSibling); }
    var after = incoming.querySelector(":scope > details").nextSibling;
    while (after) {
      var next = after.nextSibling;
      existing.appendChild(after);
      if (window.htmx && after.nodeType === 1) { window.htmx.process(after); }
      after = next;
    }
    var body = open.querySelector(".step-body");
    if (moved && body && window.htmx && open.getAttribute("hx-get")) {
      window.htmx.ajax("GET", open.getAttribute("hx-get"), { target: body, swap: "innerHTML" });
    }
    return existing;
  }

  // -- streamed text that joins what the page already shows -----------------------------------
  // A frame says where its text starts in the step's text (``offset``). The page may have
  // loaded the text so far (a reload, a late reader): what it already has is skipped; a frame
  // past its end means frames were missed, and the text so far is fetched from the server
  // (saved by the worker every couple of seconds) before the held frames are applied.
  // The box's text is kept as a string (``_raw``, its length in data-chars) and painted: as
  // markdown in the chat's answers (stream-md.js), as plain text elsewhere.
  // Bidirectional controls written out, as the server does (agents.runtime.sanitize.bidi_visible):
  // in streamed text they would reorder what is shown around them ("safe\u202etxt.exe").
  var bidi = /[\u202a-\u202e\u2066-\u2069]/g;
  window.agentsiteBidiVisible = function (text) {
    return text.replace(bidi, function (c) { return "[U+" + c.charCodeAt(0).toString(16).toUpperCase() + "]"; });
  };
  var STREAM_KEY = "agentsite-stream:";
  function streamKey(box) {
    var answer = box.closest(".answer");
    return (answer ? answer.getAttribute("data-trace") : "") + ":" + box.getAttribute("data-step");
  }
  function keptStream(box, text) {
    var answer = box.closest(".answer");
    if (!answer) { return text; }
    try {
      var key = STREAM_KEY + answer.getAttribute("data-trace");
      var kept = JSON.parse(sessionStorage.getItem(key) || "null");
      sessionStorage.removeItem(key);
      if (kept && kept.step === box.getAttribute("data-step") && typeof kept.text === "string"
          && kept.text.length > text.length && kept.text.indexOf(text) === 0) { return kept.text; }
    } catch (e) { /* nothing kept */ }
    return text;
  }
  function rawOf(box) {
    if (box._raw === undefined) { box._raw = box.textContent; }
    return box._raw;
  }
  function setRaw(box, text) {
    box._raw = text;
    box.setAttribute("data-chars", String(text.length));
    if (box.classList.contains("stream-text") && window.agentsiteStreamRender) { window.agentsiteStreamRender(box); }
    else { box.textContent = window.agentsiteBidiVisible(text); }
  }
  function joinText(box, offset, text, partialUrl, step) {
    var have = rawOf(box).length;
    if (offset > have) {
      var held = box._held || (box._held = []);
      if (held.length < 2000) { held.push([offset, text]); }
      fillGap(box, partialUrl, step, 0);
      return;
    }
    if (offset + text.length <= have) { return; }
    setRaw(box, box._raw + text.slice(have - offset));
  }
  function applyHeld(box) {
    var held = (box._held || []).sort(function (a, b) { return a[0] - b[0]; });
    box._held = [];
    var text = rawOf(box);
    held.forEach(function (h) {
      if (h[0] > text.length) { box._held.push(h); return; }
      if (h[0] + h[1].length > text.length) { text = text + h[1].slice(text.length - h[0]); }
    });
    setRaw(box, text);
  }
  function fillGap(box, partialUrl, step, attempt) {
    if (!partialUrl || box._filling) { return; }
    box._filling = true;
    fetch(partialUrl + "?step=" + encodeURIComponent(step), { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (data) {
        if (typeof data.text === "string" && data.text.length > rawOf(box).length) {
          box._raw = data.text;
        }
        applyHeld(box);
      })
      .catch(function () { /* the final answer replaces the text in any case */ })
      .then(function () {
        box._filling = false;
        // the worker saves every couple of seconds: ask again while a gap remains
        if (box._held && box._held.length && attempt < 8 && box.isConnected) {
          setTimeout(function () { fillGap(box, partialUrl, step, attempt + 1); }, 1000);
        }
      });
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

  // The header's step count follows the timeline between the header's own refreshes.
  function countSteps() {
    var stat = root.querySelector("[data-stat='steps']");
    if (!stat) { return; }
    var shown = root.querySelectorAll("#steps > li.step").length;
    if (shown > (parseInt(stat.textContent, 10) || 0)) { stat.textContent = String(shown); }
  }

  function applyTraceEvent(payload) {
    if (payload.event === "delta") { return showDelta(payload); }
    if (payload.event === "step") {
      place(payload, document.getElementById("steps"));
      var empty = root.querySelector(".empty-steps");
      if (empty) { empty.remove(); }
      rescaleBars();
      countSteps();
      if (payload.status !== "running") { hideLiveText(payload.step); }
      // A streamed answer that broke off starts over: the text shown so far is void.
      if (payload.restarted_step && payload.restarted_step === live.step) {
        var box = document.getElementById("live-text");
        if (box) { box._held = []; setRaw(box, ""); }
      }
    } else if (payload.event === "state") {
      var none = root.querySelector(".empty-states");
      if (none) { none.remove(); }
      place(payload, document.getElementById("states"));
    } else if (payload.event === "trace") {
      place(payload, null);
      countSteps();
      var tree = document.getElementById("turn-tree");
      if (tree && tree.open && window.htmx) { window.htmx.trigger(tree, "refresh"); }
      if (payload.status && ["queued", "running"].indexOf(payload.status) === -1) { hideLiveText(); }
    }
  }

  var live = { step: null, el: null };
  var opened = document.getElementById("live-text");
  if (opened && opened.getAttribute("data-step")) { live.step = parseInt(opened.getAttribute("data-step"), 10); }
  function showDelta(payload) {
    var box = document.getElementById("live-text");
    if (!box) { return; }
    var step = String(payload.step);
    if (box.getAttribute("data-step") !== step) {
      box.setAttribute("data-step", step);
      box._held = [];
      setRaw(box, "");
    }
    live.step = payload.step;
    box.hidden = false;
    joinText(box, payload.offset || 0, payload.text, box.getAttribute("data-partial-url"), step);
  }
  function hideLiveText(step) {
    var box = document.getElementById("live-text");
    if (box && (step === undefined || String(step) === box.getAttribute("data-step"))) {
      box.hidden = true; live.step = null;
      box.removeAttribute("data-step"); box._held = []; setRaw(box, "");
    }
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
  var chat = {
    messages: document.getElementById("messages"),
    composer: document.getElementById("composer"),
    socketOpen: false,
    opened: false,
    usage: {},          // "trace:step" -> {tokens, cost} of model requests since the meter was drawn
    statuses: {},       // trace -> status, for answers whose fragment has not arrived yet
    finished: {},       // trace -> its final event, likewise
    early: [],          // deltas that came before any pending answer was on screen
    sending: false,
    retryTimer: null,
    conversation: root.getAttribute("data-conversation") || "",
    seqs: {},           // trace -> the highest event number applied (gaps mean missed frames)
    heardAt: Date.now(),// when the socket last brought anything
    resyncTimer: null,
    maxChars: parseInt(root.getAttribute("data-max-chars") || "32000", 10)
  };

  function csrfHeaders() {
    var headers = { "HX-Request": "true" };
    try {
      var extra = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
      Object.keys(extra).forEach(function (k) { headers[k] = extra[k]; });
    } catch (e) { /* no token: the server answers 403 and says so */ }
    return headers;
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 160;
  }
  function toBottom() { window.scrollTo(0, document.body.scrollHeight); }
  function keepScrolled(wasNear) {
    if (wasNear === undefined ? nearBottom() : wasNear) { toBottom(); } else { showJump(true); }
  }
  var jump = null;
  function showJump(on) {
    if (!jump) {
      jump = document.createElement("button");
      jump.type = "button";
      jump.className = "btn btn-small jump-latest";
      jump.textContent = "↓ Latest";
      jump.addEventListener("click", function () { toBottom(); showJump(false); });
      root.appendChild(jump);
    }
    jump.hidden = !on;
  }
  window.addEventListener("scroll", function () { if (jump && nearBottom()) { showJump(false); } }, { passive: true });

  function leaf() { return chat.messages ? chat.messages.getAttribute("data-leaf") || "" : ""; }
  function setLeaf(hex) { if (chat.messages && hex) { chat.messages.setAttribute("data-leaf", hex); } }

  var codeBlocks = 0;
  function enhance(node) {
    if (!node || !node.querySelectorAll) { return; }
    if (window.htmx) { window.htmx.process(node); }
    node.querySelectorAll(".md pre").forEach(function (pre) {
      if (pre.querySelector(".copy-code")) { return; }
      // copied by app.js's data-copy, which also copies where the clipboard API is missing
      var code = pre.querySelector("code") || pre;
      if (!code.id) { codeBlocks += 1; code.id = "code-block-" + codeBlocks; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "copy-code";
      button.textContent = "Copy";
      button.setAttribute("data-copy", "#" + code.id);
      pre.appendChild(button);
    });
    startCountdowns(node);
  }

  // Put fragments from a response or an event in place: elements marked hx-swap-oob replace
  // the element with their id; the rest go at the end of the messages unless already there.
  function insertFragments(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    var near = nearBottom();
    var placed = [];
    Array.prototype.slice.call(template.content.children).forEach(function (node) {
      if (node.hasAttribute("hx-swap-oob")) {
        node.removeAttribute("hx-swap-oob");
        var old = node.id && document.getElementById(node.id);
        if (old) { old.replaceWith(node); enhance(node); }
        return;
      }
      if (node.id && document.getElementById(node.id)) { return; }
      var empty = chat.messages.querySelector(".empty-chat");
      if (empty) { empty.remove(); }
      chat.messages.appendChild(node);
      enhance(node);
      placed.push(node);
    });
    placed.forEach(function (node) {
      if (node.classList.contains("answer") && node.getAttribute("data-trace")) {
        var trace = node.getAttribute("data-trace");
        setLeaf(trace);
        if (chat.statuses[trace] && node.classList.contains("pending")) { node.setAttribute("data-status", chat.statuses[trace]); }
        if (chat.finished[trace] && node.classList.contains("pending")) {
          var done = chat.finished[trace];
          delete chat.finished[trace];
          onTrace(done);
        }
      }
    });
    if (chat.early.length && runningAnswer()) {
      var early = chat.early;
      chat.early = [];
      early.forEach(function (d) { onDelta(d[0], d[1], d[2]); });
    }
    keepScrolled(near);
    return placed;
  }

  function replaceById(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    var node = template.content.firstElementChild;
    var old = node && node.id && document.getElementById(node.id);
    if (old) { old.replaceWith(node); enhance(node); }
  }

  // -- the answer being written --
  // Turns of a conversation run one at a time, in order: the running one is the first pending
  // answer on screen (its "running" event may have come before its fragment did).
  function runningAnswer() {
    if (!chat.messages) { return null; }
    return chat.messages.querySelector("li.answer.pending[data-status='running']")
      || chat.messages.querySelector("li.answer.pending");
  }

  function placeBySeq(body, node) {
    var seq = parseInt(node.getAttribute("data-seq") || "0", 10);
    var after = null;
    Array.prototype.forEach.call(body.children, function (child) {
      var s = parseInt(child.getAttribute("data-seq") || "0", 10);
      if (s <= seq) { after = child; }
    });
    if (after) { after.after(node); } else { body.insertBefore(node, body.firstChild); }
  }

  function onDelta(step, offset, text) {
    var answer = runningAnswer();
    if (!answer) {
      // The first words can beat the fragment of the message they answer: hold them briefly.
      if (chat.early.length < 200) { chat.early.push([step, offset, text]); }
      return;
    }
    var body = answer.querySelector(".answer-body");
    var segment = body.querySelector(".stream-text[data-step='" + step + "']");
    var near = nearBottom();
    if (!segment) {
      segment = document.createElement("div");
      segment.className = "stream-text";
      segment.setAttribute("data-step", step);
      segment.setAttribute("data-seq", step);
      segment._raw = "";
      segment.setAttribute("data-chars", "0");
      placeBySeq(body, segment);
    }
    joinText(segment, offset, text, answer.getAttribute("data-partial-url"), step);
    answer.classList.add("streaming");
    setStatus(answer, "Writing…");
    keepScrolled(near);
  }

  function setStatus(answer, text) {
    var line = answer && answer.querySelector(".pending-status");
    if (line && line.textContent !== text) { line.textContent = text; }
  }

  // A streamed answer broke off and starts over: clear its text and say why, above it.
  function restartAnswer(payload) {
    var answer = document.getElementById("answer-" + payload.trace);
    if (!answer) { return; }
    var body = answer.querySelector(".answer-body");
    var step = String(payload.restarted_step);
    var segment = body.querySelector(".stream-text[data-step='" + step + "']");
    if (segment) { segment._held = []; setRaw(segment, ""); }
    var note = body.querySelector(".restart-notice[data-step='" + step + "']");
    if (!note) {
      note = document.createElement("p");
      note.className = "restart-notice small muted";
      note.setAttribute("data-step", step);
      note.setAttribute("data-seq", step);
      if (segment) { segment.before(note); } else { placeBySeq(body, note); }
    }
    note.textContent = payload.notice || "The answer restarted.";
  }

  function onStep(payload) {
    if (payload.kind === "llm") {
      chat.usage[payload.trace + ":" + payload.step] = { tokens: payload.tokens || 0, cost: parseFloat(payload.cost || "0") || 0, estimated: !!payload.estimated };
      drawMeter();
    }
    if (payload.restarted_step) { restartAnswer(payload); }
    var answer = document.getElementById("answer-" + payload.trace);
    if (!answer) { return; }
    if (payload.kind === "llm" && payload.status === "running") { setStatus(answer, "Thinking…"); }
    if (!payload.card) { return; }
    var template = document.createElement("template");
    template.innerHTML = payload.card.trim();
    var card = template.content.firstElementChild;
    if (!card) { return; }
    var near = nearBottom();
    var old = document.getElementById(payload.card_id);
    if (old) {
      // a card the reader opened stays open (a card carries its whole content)
      if (old.open) { card.open = true; }
      old.replaceWith(card);
    } else {
      placeBySeq(answer.querySelector(".answer-body"), card);
    }
    enhance(card);
    var name = card.querySelector(".tool-name");
    if (card.classList.contains("state-waiting")) { setStatus(answer, "Waiting for approval…"); }
    else if (card.classList.contains("state-running") && name) { setStatus(answer, "Running " + name.textContent + "…"); }
    keepScrolled(near);
  }

  function onTrace(payload) {
    var answer = document.getElementById("answer-" + payload.trace);
    if (payload.answer) {
      if (answer) {
        var template = document.createElement("template");
        template.innerHTML = payload.answer.trim();
        var done = template.content.firstElementChild;
        var near = nearBottom();
        answer.replaceWith(done);
        enhance(done);
        keepScrolled(near);
        if (payload.meter) {
          Object.keys(chat.usage).forEach(function (key) {
            if (key.indexOf(payload.trace + ":") === 0) { delete chat.usage[key]; }
          });
          replaceById(payload.meter);
          drawMeter();
        }
        if (payload.model) { replaceById(payload.model); }
        if (payload.banner) { replaceById(payload.banner); }
      } else {
        chat.finished[payload.trace] = payload;
      }
      return;
    }
    if (!answer) { chat.statuses[payload.trace] = payload.status; return; }
    answer.setAttribute("data-status", payload.status);
    answer.classList.remove("answer-queued");
    answer.classList.add("answer-" + payload.status);
    if (payload.status === "running") { setStatus(answer, "Working…"); }
  }

  function onMessage(payload) {
    if (payload.role !== "user" || !payload.html) { return; }
    if (document.getElementById(payload.id)) { return; }
    if ((payload.parent || "") !== leaf()) { return; } // another branch: not on screen
    insertFragments(payload.html);
  }

  // -- the meter: what the page was drawn with, plus the model requests finished since --
  function formatTokens(n) {
    if (n < 1000) { return String(n); }
    if (n < 1000000) { return (n / 1000).toFixed(1).replace(/\.0$/, "") + "k"; }
    return (n / 1000000).toFixed(1).replace(/\.0$/, "") + "M";
  }
  function formatUsd(amount) {
    if (!amount) { return "$0"; }
    if (Math.abs(amount) < 0.01) { return "$" + amount.toFixed(6).replace(/0+$/, ""); }
    return "$" + amount.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
  }
  function drawMeter() {
    var meter = document.getElementById("meter");
    if (!meter) { return; }
    var tokens = parseInt(meter.getAttribute("data-tokens") || "0", 10);
    var cost = parseFloat(meter.getAttribute("data-cost") || "0") || 0;
    var estimated = parseInt(meter.getAttribute("data-estimated") || "0", 10) > 0;
    Object.keys(chat.usage).forEach(function (key) {
      tokens += chat.usage[key].tokens; cost += chat.usage[key].cost;
      estimated = estimated || chat.usage[key].estimated;
    });
    var t = meter.querySelector("[data-meter='tokens']");
    var c = meter.querySelector("[data-meter='cost']");
    if (t) { t.textContent = formatTokens(tokens); }
    if (c) { c.textContent = formatUsd(cost); }
    // Tokens a server did not report are estimates: the meter says so, never a silent figure.
    meter.querySelectorAll("[data-meter='approx'], [data-meter='estimated']").forEach(function (el) { el.hidden = !estimated; });
  }

  // -- approvals: a countdown to the agent's timeout --
  function startCountdowns(node) {
    node.querySelectorAll(".countdown").forEach(function (el) {
      if (!el.hasAttribute("data-until")) {
        var left = parseInt((el.textContent.match(/\d+/) || ["0"])[0], 10);
        el.setAttribute("data-until", String(Date.now() + left * 1000));
      }
    });
  }
  setInterval(function () {
    document.querySelectorAll(".countdown[data-until]").forEach(function (el) {
      var left = Math.ceil((parseInt(el.getAttribute("data-until"), 10) - Date.now()) / 1000);
      el.textContent = left > 0 ? left + " s left" : "time is up";
    });
  }, 1000);
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.closest && form.closest(".approval-actions")) {
      form.closest(".approval-actions").querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    }
  });
  document.addEventListener("htmx:responseError", function (event) {
    var card = event.target && event.target.closest && event.target.closest(".tool-card");
    if (!card) { return; }
    var note = document.createElement("p");
    note.className = "error small";
    note.textContent = (event.detail.xhr && event.detail.xhr.responseText) || "The decision was not accepted.";
    card.querySelector(".tool-body").appendChild(note);
    card.querySelectorAll(".approval-actions button").forEach(function (b) { b.disabled = false; });
  });

  // -- frames that were missed while the socket stayed open --
  // Every event of a trace carries the trace's event number. The page starts from the number a
  // pending answer was rendered at (data-event-seq); a frame more than one ahead means frames
  // were lost (a hung Redis drops announcements rather than holding the turn), and the branch
  // is read again. A lost last frame has no successor to reveal it: a pending answer that has
  // heard nothing for a while is read again too.
  var QUIET_RESYNC_MS = 20000;
  function noteSeq(payload) {
    chat.heardAt = Date.now();
    if (payload.event === "delta" || typeof payload.seq !== "number" || !payload.trace) { return; }
    var last = chat.seqs[payload.trace];
    if (last === undefined) {
      var answer = document.getElementById("answer-" + payload.trace);
      var rendered = answer && answer.getAttribute("data-event-seq");
      last = rendered ? parseInt(rendered, 10) : undefined;
    }
    if (last !== undefined && payload.seq > last + 1) { scheduleResync(); }
    chat.seqs[payload.trace] = Math.max(last === undefined ? 0 : last, payload.seq);
  }
  function scheduleResync() {
    if (chat.resyncTimer) { return; }
    chat.resyncTimer = setTimeout(function () {
      chat.resyncTimer = null;
      chat.seqs = {};  // the re-read answers carry their numbers again
      resyncConversation();
    }, 300);
  }
  if (mode === "conversation") {
    setInterval(function () {
      if (!chat.socketOpen || Date.now() - chat.heardAt < QUIET_RESYNC_MS) { return; }
      if (!root.querySelector("li.answer.pending")) { return; }
      chat.heardAt = Date.now();
      scheduleResync();
    }, 5000);
  }

  // A re-read branch keeps the answers the page already shows as they are on the server — an
  // ended one, a pending one with nothing newer (its event number) — so that what the reader is
  // reading, has open or is clicking (an approval's buttons) is not replaced under them. Rows
  // that changed, or that the page lacks, come from the server.
  // The re-read can also be older than frames that came meanwhile (rendered before a turn
  // ended whose end the socket brought first): an ended answer is never replaced by a pending
  // one, and a pending one only by a render past the event number the page applied.
  function keepOld(old, fresh) {
    if (!old || old.tagName !== fresh.tagName) { return false; }
    if (!fresh.classList.contains("answer")) { return false; }  // messages: their versions may have moved
    if (!old.classList.contains("pending")) { return true; }  // ended: final
    if (!fresh.classList.contains("pending")) { return false; }  // it ended since
    var trace = fresh.getAttribute("data-trace");
    var applied = chat.seqs[trace] !== undefined ? chat.seqs[trace] : parseInt(old.getAttribute("data-event-seq") || "-1", 10);
    return parseInt(fresh.getAttribute("data-event-seq") || "0", 10) <= applied;
  }
  function keepUnchanged(oldList, freshList) {
    Array.prototype.slice.call(freshList.children).forEach(function (fresh) {
      var old = fresh.id && oldList.querySelector(":scope > #" + CSS.escape(fresh.id));
      if (old && keepOld(old, fresh)) { freshList.replaceChild(old, fresh); }
    });
  }

  // -- re-sync the branch on screen after a reconnect --
  function resyncConversation(then, since) {
    var url = root.getAttribute("data-messages-url");
    if (!url) { if (then) { then(); } return; }
    var at = leaf();
    fetch(url + (at ? "&at=" + at : "") + (since ? "&since=" + encodeURIComponent(since) : ""),
          { credentials: "same-origin", headers: csrfHeaders() })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.status === 204 ? null : r.text(); })
      .then(function (html) {
        if (html === null) { return; }  // nothing happened since the page was rendered
        // the text of an answer being written, as shown now: the worker's last save, which the
        // fragments carry, may be behind it, and the text must not shrink
        var shown = {};
        root.querySelectorAll(".answer.pending .stream-text").forEach(function (box) {
          shown[streamKey(box)] = rawOf(box);
        });
        var template = document.createElement("template");
        template.innerHTML = html.trim();
        Array.prototype.slice.call(template.content.children).forEach(function (node) {
          var old = node.id && document.getElementById(node.id);
          if (!old) { return; }
          node.removeAttribute("hx-swap-oob");
          if (node.id === "messages") { keepUnchanged(old, node); }
          old.replaceWith(node);
          if (node.id === "messages") { chat.messages = node; }
          enhance(node);
        });
        root.querySelectorAll(".answer.pending .stream-text").forEach(function (box) {
          var had = shown[streamKey(box)];
          var now = rawOf(box);
          if (had && had.length > now.length && had.indexOf(now) === 0) { setRaw(box, had); }
        });
        chat.usage = {};
        drawMeter();
        keepScrolled();
      })
      .catch(function () { /* the next reconnect tries again */ })
      .then(function () { if (then) { then(); } });
  }
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "messages") {
      chat.messages = event.target;
      enhance(event.target);
    }
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    var swapped = document.getElementById("messages");
    if (swapped && swapped !== chat.messages) { chat.messages = swapped; enhance(swapped); }
  });

  // -- the composer and its outbox --
  var outbox = {
    key: "agentsite:outbox:" + chat.conversation,
    items: [],
    list: document.getElementById("outbox")
  };
  function outboxLoad() {
    try { outbox.items = JSON.parse(window.localStorage.getItem(outbox.key) || "[]") || []; } catch (e) { outbox.items = []; }
  }
  function outboxSave() {
    try {
      if (outbox.items.length) { window.localStorage.setItem(outbox.key, JSON.stringify(outbox.items)); }
      else { window.localStorage.removeItem(outbox.key); }
    } catch (e) { /* private mode: the outbox lives as long as the page */ }
  }
  function newId() {
    if (window.crypto && window.crypto.randomUUID) { return window.crypto.randomUUID(); }
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
  }
  function outboxDraw() {
    if (!outbox.list) { return; }
    outbox.list.textContent = "";
    outbox.items.forEach(function (item, index) {
      var li = document.createElement("li");
      li.className = "message role-user queued";
      var bubble = document.createElement("div");
      bubble.className = "bubble";
      bubble.textContent = item.text;
      var note = document.createElement("div");
      note.className = "small muted outbox-note";
      note.textContent = (chat.socketOpen && !item.failed) ? (index === 0 && chat.sending ? "Sending…" : "Waiting to send…")
        : "Not sent yet: will send when back online.";
      li.appendChild(bubble);
      li.appendChild(note);
      outbox.list.appendChild(li);
    });
  }
  function composerError(text) {
    var error = document.getElementById("composer-error");
    if (error) { error.textContent = text || ""; }
  }
  function statusLine(text) {
    var line = document.getElementById("composer-status");
    if (line) { line.textContent = text || ""; }
  }

  function flushOutbox() {
    if (chat.sending || !outbox.items.length || !chat.composer) { outboxDraw(); return; }
    // Sent over HTTP whether or not the socket is up: the server may be back before the socket's
    // backoff retries, and a reconnect re-reads the branch, answer included. A failed attempt
    // is retried every few seconds; the client id makes a repeat a no-op on the server.
    var item = outbox.items[0];
    chat.sending = true;
    outboxDraw();
    var body = new FormData();
    body.append("text", item.text);
    (item.attachments || []).forEach(function (id) { body.append("attachments", id); });
    (item.resources || []).forEach(function (value) { body.append("resources", value); });
    body.append("client_id", item.id);
    body.append("parent", leaf());
    fetch(chat.composer.getAttribute("action"), { method: "POST", body: body, credentials: "same-origin", headers: csrfHeaders() })
      .then(function (response) {
        return response.text().then(function (text) { return { response: response, text: text }; });
      })
      .then(function (result) {
        var response = result.response;
        chat.sending = false;
        if (response.ok) {
          outbox.items.shift();
          outboxSave();
          var redirect = response.headers.get("HX-Redirect");
          if (redirect) { window.location.href = redirect; return; }
          if (result.text) { insertFragments(result.text); }
          composerError("");
          toBottom();
        } else if (response.status >= 500 || response.status === 429) {
          item.failed = true;
          scheduleRetry();
        } else {
          // Refused (422: empty or too long; 403: not allowed): say why, give the text back.
          outbox.items.shift();
          outboxSave();
          var message = result.text.replace(/<[^>]*>/g, "").trim() || "The message was refused (" + response.status + ").";
          composerError(message);
          var area = chat.composer.querySelector("textarea");
          if (area && !area.value) { area.value = item.text; autosize(area); }
        }
        outboxDraw();
        flushOutbox();
      })
      .catch(function () {
        chat.sending = false;
        item.failed = true;
        outboxDraw();
        scheduleRetry();
      });
  }
  function scheduleRetry() {
    if (chat.retryTimer) { return; }
    chat.retryTimer = setTimeout(function () {
      chat.retryTimer = null;
      if (outbox.items.length) { outbox.items[0].failed = false; }
      flushOutbox();
    }, 3000);
  }

  function autosize(area) {
    area.style.height = "auto";
    area.style.height = Math.min(area.scrollHeight + 2, window.innerHeight * 0.4) + "px";
  }

  if (mode === "conversation" && chat.composer) {
    var area = chat.composer.querySelector("textarea");
    area.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
        event.preventDefault();
        chat.composer.requestSubmit();
      }
    });
    area.addEventListener("input", function () {
      autosize(area);
      var over = area.value.length - chat.maxChars;
      statusLine(over > 0 ? area.value.length.toLocaleString() + " / " + chat.maxChars.toLocaleString() + " characters: " + over.toLocaleString() + " too many." : "");
    });
    chat.composer.addEventListener("submit", function (event) {
      event.preventDefault();
      var text = area.value;
      // images attached in the tray (chat.js) go with the message
      var attached = Array.prototype.map.call(chat.composer.querySelectorAll("input[name=attachments]"),
        function (input) { return input.value; });
      // resources of the agent's MCP servers ticked in the "+" menu go with it too
      var resources = Array.prototype.map.call(chat.composer.querySelectorAll("input[name=resources]:checked"),
        function (input) { return input.value; });
      // and the URIs typed into a template's box (left at its fixed start, it attaches nothing)
      chat.composer.querySelectorAll("input[name=template_uri]").forEach(function (input) {
        if (input.value.trim() && input.value !== input.defaultValue) { resources.push(input.dataset.server + " " + input.value.trim()); }
      });
      if (!text.trim() && !attached.length) { composerError("Write a message before sending it."); area.focus(); return; }
      if (text.length > chat.maxChars) {
        composerError("Your message is " + text.length.toLocaleString() + " characters long; the limit is " + chat.maxChars.toLocaleString() + ". Shorten it or send it in parts.");
        area.focus();
        return;
      }
      composerError("");
      statusLine("");
      outbox.items.push({ id: newId(), text: text, attachments: attached, resources: resources });
      outboxSave();
      area.value = "";
      chat.composer.querySelectorAll("input[name=resources]:checked").forEach(function (box) { box.checked = false; });
      chat.composer.querySelectorAll("input[name=template_uri]").forEach(function (input) { input.value = input.defaultValue; });
      var menu = chat.composer.querySelector("details.attach-menu");
      if (menu) { menu.open = false; }
      var tray = document.getElementById("attachment-tray");
      if (tray) { tray.textContent = ""; }
      autosize(area);
      area.focus();
      flushOutbox();
      toBottom();
    });
    outboxLoad();
    outboxDraw();
  }
  window.addEventListener("online", function () { flushOutbox(); });

  // -- wiring ---------------------------------------------------------------------------------
  document.addEventListener("htmx:wsOpen", function () {
    chat.socketOpen = true;
    // First open: the page may have been rendered while the trace was running, or another tab
    // may have sent a message since; later opens are reconnects after a drop. Either way, ask
    // the database what we missed: a page rendered with nothing in flight sends the
    // conversation's version, and an unchanged conversation answers 204.
    if (mode === "trace") { resyncTrace(); }
    else {
      statusLine("");
      // messages typed while offline go out once the page shows the branch as it is (sent
      // during the re-sync, the fragment of the new turn could be replaced by the older page)
      if (chat.opened || (chat.messages && chat.messages.querySelector("li.answer.pending"))) {
        resyncConversation(flushOutbox);
      } else {
        resyncConversation(flushOutbox, root.getAttribute("data-version"));
      }
    }
    chat.opened = true;
    root.classList.remove("offline");
  });
  document.addEventListener("htmx:wsClose", function () {
    chat.socketOpen = false;
    root.classList.add("offline");
    if (mode === "conversation") {
      statusLine("Connection lost, reconnecting… What you send now goes out when it is back.");
      outboxDraw();
    }
  });

  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var message = event.detail && event.detail.message;
    if (typeof message !== "string") { return; }
    if (message.charAt(0) === "~" && mode === "conversation") {
      event.preventDefault();
      // ~<step>|<offset>|<text>
      var bar = message.indexOf("|");
      var bar2 = bar > 0 ? message.indexOf("|", bar + 1) : -1;
      chat.heardAt = Date.now();
      if (bar2 > 0) { onDelta(message.slice(1, bar), parseInt(message.slice(bar + 1, bar2), 10) || 0, message.slice(bar2 + 1)); }
      return;
    }
    if (message.charAt(0) !== "{") { return; }
    var payload;
    try { payload = JSON.parse(message); } catch (e) { return; }
    if (!payload || typeof payload.event !== "string") { return; }
    event.preventDefault();
    if (mode === "trace") { onTraceMessage(payload); return; }
    noteSeq(payload);
    if (payload.event === "step") { onStep(payload); }
    else if (payload.event === "trace") { onTrace(payload); }
    else if (payload.event === "message") { onMessage(payload); }
  });

  if (mode === "conversation") {
    enhance(root);
    drawMeter();
    // an answer being written when the page loaded: its text so far, laid out like the rest;
    // after a reload, what this tab had already shown of it when the worker's last save (every
    // couple of seconds) is behind, so that the text does not shrink and then catch up
    root.querySelectorAll(".answer.pending .stream-text").forEach(function (box) {
      setRaw(box, keptStream(box, rawOf(box)));
    });
    window.addEventListener("pagehide", function () {
      root.querySelectorAll(".answer.pending .stream-text").forEach(function (box) {
        var answer = box.closest(".answer");
        try {
          sessionStorage.setItem(STREAM_KEY + answer.getAttribute("data-trace"),
            JSON.stringify({ step: box.getAttribute("data-step"), text: rawOf(box) }));
        } catch (e) { /* storage full or off: the page catches up from the server */ }
      });
    });
  }
  if (mode === "trace") { rescaleBars(); }
  window.scrollTo(0, mode === "conversation" ? document.body.scrollHeight : 0);
})();
