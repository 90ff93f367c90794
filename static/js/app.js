// agentsite — small progressive enhancements. Every page works without this file.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // A <select data-autosubmit> submits its form on change (the Save button is hidden with JS on).
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el.matches && el.matches("select[data-autosubmit]") && el.form) {
      if (typeof el.form.requestSubmit === "function") { el.form.requestSubmit(); } else { el.form.submit(); }
    }
  });

  // <form data-confirm="..."> asks before submitting.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  }, true);

  // <button data-copy="#selector"> copies the value or text of the target;
  // <button data-copy-all="selector"> the text of every match, a blank line between them.
  function copyText(text, button, fallbackTarget) {
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    // Without the clipboard API (plain HTTP), or when it refuses (the page not focused, no
    // permission): copy the selected text the older way, and say so when that fails too.
    var bySelection = function () {
      var copied = false;
      if (fallbackTarget && fallbackTarget.select) {
        fallbackTarget.select();
        copied = document.execCommand("copy");
      } else {
        var area = document.createElement("textarea");
        area.value = text;
        area.setAttribute("readonly", "");
        area.className = "visually-hidden";
        document.body.appendChild(area);
        area.select();
        copied = document.execCommand("copy");
        area.remove();
      }
      if (copied) { done(); } else { button.setAttribute("title", "Could not copy: select the text and copy it"); }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, bySelection);
    } else {
      bySelection();
    }
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy], [data-copy-all]");
    if (!button) { return; }
    if (button.hasAttribute("data-copy-all")) {
      var parts = Array.prototype.map.call(document.querySelectorAll(button.getAttribute("data-copy-all")),
        function (el) { return el.innerText.trim(); }).filter(Boolean);
      if (parts.length) { copyText(parts.join("\n\n"), button, null); }
      return;
    }
    var target = document.querySelector(button.getAttribute("data-copy"));
    if (!target) { return; }
    copyText("value" in target ? target.value : target.textContent, button, target);
  });

  // Light, dark or the system's: the choice is kept in this browser (theme.js applies it
  // before the page paints).
  function applyTheme(choice) {
    if (choice === "light" || choice === "dark") { document.documentElement.setAttribute("data-theme", choice); }
    else { document.documentElement.removeAttribute("data-theme"); }
    document.querySelectorAll("[data-theme-choice]").forEach(function (b) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-theme-choice") === (choice || "system")));
    });
  }
  var savedTheme = null;
  try { savedTheme = localStorage.getItem("agentsite.theme"); } catch (e) { /* private mode */ }
  document.addEventListener("DOMContentLoaded", function () { applyTheme(savedTheme); });
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-theme-choice]");
    if (!button) { return; }
    var choice = button.getAttribute("data-theme-choice");
    try {
      if (choice === "system") { localStorage.removeItem("agentsite.theme"); } else { localStorage.setItem("agentsite.theme", choice); }
    } catch (e) { /* the choice lasts for this page only */ }
    applyTheme(choice);
  });

  // <textarea data-enter-submits>: Enter sends its form, Shift+Enter adds a line (as in the chat).
  document.addEventListener("keydown", function (event) {
    var el = event.target;
    if (event.key !== "Enter" || event.shiftKey || event.isComposing || !el.matches ||
        !el.matches("textarea[data-enter-submits]") || !el.form) { return; }
    event.preventDefault();
    if (!el.value.trim()) { return; }
    if (typeof el.form.requestSubmit === "function") { el.form.requestSubmit(); } else { el.form.submit(); }
  });

  // Close an open <details class="menu"> when clicking elsewhere or pressing Escape.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.menu[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) { menu.removeAttribute("open"); }
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      document.querySelectorAll("details.menu[open]").forEach(function (menu) { menu.removeAttribute("open"); });
    }
  });

  // A page's live lists are read again whenever one of its sockets opens, the first time too:
  // what changed between rendering the page and subscribing was announced to nobody. The
  // person's own lists (the chat's sidebar, the home page) answer 204 when unchanged.
  document.addEventListener("htmx:wsOpen", function (event) {
    var names = ["team:lists-changed"];
    var live = event.target && event.target.closest && event.target.closest(".live-root");
    if (live) { names.push("team:members-changed", "team:invitations-changed"); }
    names.forEach(function (name) {
      document.body.dispatchEvent(new CustomEvent(name, { detail: {} }));
    });
  });

  // Websocket messages that are JSON events (not HTML fragments) become DOM events on <body>:
  // {"event": "members.changed"} -> "team:members-changed", which hx-trigger attributes listen to.
  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var message = event.detail && event.detail.message;
    if (typeof message !== "string" || message.charAt(0) !== "{") { return; }
    var payload;
    try { payload = JSON.parse(message); } catch (e) { return; }
    if (!payload || typeof payload.event !== "string") { return; }
    event.preventDefault();
    var name = "team:" + payload.event.replace(/[^a-z0-9_-]+/gi, "-");
    document.body.dispatchEvent(new CustomEvent(name, { detail: payload.data || {} }));
  });
})();
