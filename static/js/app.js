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

  // <button data-copy="#selector"> copies the value or text of the target.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) { return; }
    var target = document.querySelector(button.getAttribute("data-copy"));
    if (!target) { return; }
    var text = "value" in target ? target.value : target.textContent;
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done);
    } else if (target.select) {
      target.select();
      document.execCommand("copy");
      done();
    }
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
