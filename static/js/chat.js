// agentsite — the chat page's controls around the live conversation (live.js): the sidebar
// drawer, the "/" command palette, starters that send through the composer, and Escape to stop.
// The page works without this file: starters post their form, commands are typed.
(function () {
  "use strict";
  var composer = document.getElementById("composer");
  var area = composer ? composer.querySelector("textarea") : null;

  // -- the sidebar: a drawer on phones -------------------------------------------------------
  function setSidebar(open) {
    document.body.classList.toggle("drawer-open", open);
    document.querySelectorAll(".sidebar-open[data-sidebar-toggle]").forEach(function (b) {
      b.setAttribute("aria-expanded", String(open));
    });
    if (open) {
      var search = document.getElementById("sidebar-search");
      if (search) { search.focus(); }
    }
  }
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-sidebar-toggle]");
    if (toggle) { setSidebar(!document.body.classList.contains("drawer-open")); return; }
    var sidebar = document.getElementById("chat-sidebar");
    if (document.body.classList.contains("drawer-open") && sidebar && !sidebar.contains(event.target)) {
      setSidebar(false);
    }
  });

  // -- starters: a click puts the prompt through the composer (its outbox, its live answer) ----
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("starter-form") || !composer || !area) { return; }
    event.preventDefault();
    area.value = form.querySelector("input[name=text]").value;
    // A prompt that needs arguments waits for them in the composer.
    if (form.hasAttribute("data-fill")) { area.value += " "; area.focus(); return; }
    composer.requestSubmit();
  });

  // -- Escape stops the answer being written -------------------------------------------------
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented) { return; }
    if (palette && !palette.hidden) { closePalette(); event.preventDefault(); return; }
    if (document.body.classList.contains("drawer-open")) { setSidebar(false); return; }
    if (document.querySelector("details.menu[open], details.edit[open]")) { return; }
    var stop = document.querySelector(".answer.pending .stop-form button");
    if (stop && !stop.disabled && stop.offsetParent !== null) {
      event.preventDefault();
      stop.click();
    }
  });

  // -- images: choose, paste or drop; each is uploaded at once and waits in the tray ----------
  var picker = document.getElementById("attach-input");
  var tray = document.getElementById("attachment-tray");
  function trayError(text) {
    var error = document.getElementById("composer-error");
    if (error) { error.textContent = text; }
  }
  function upload(file) {
    if (!picker || !tray) { return; }
    var max = parseInt(picker.getAttribute("data-max"), 10) || 4;
    var maxMb = parseInt(picker.getAttribute("data-max-mb"), 10) || 5;
    if (tray.children.length >= max) { trayError("Attach at most " + max + " images to a message."); return; }
    if (!/^image\/(png|jpeg|gif|webp)$/.test(file.type)) { trayError("Attach a PNG, JPEG, GIF or WebP image."); return; }
    if (file.size > maxMb * 1024 * 1024) { trayError("The image is larger than " + maxMb + " MB."); return; }
    var item = document.createElement("li");
    item.className = "uploading";
    item.textContent = "Uploading " + (file.name || "image") + "…";
    tray.appendChild(item);
    var body = new FormData();
    body.append("file", file, file.name || "pasted.png");
    var token = document.querySelector("#composer input[name=csrfmiddlewaretoken]");
    fetch(picker.getAttribute("data-upload-url"), { method: "POST", body: body, credentials: "same-origin",
                                                    headers: token ? { "X-CSRFToken": token.value } : {} })
      .then(function (r) { return r.json().then(function (data) { return { ok: r.ok, data: data }; }); })
      .then(function (result) {
        if (!result.ok) { item.remove(); trayError(result.data.error || "The image could not be attached."); return; }
        trayError("");
        item.className = "";
        item.textContent = "";
        var img = document.createElement("img");
        img.src = result.data.url;
        img.alt = result.data.name || "Attached image";
        var hidden = document.createElement("input");
        hidden.type = "hidden";
        hidden.name = "attachments";
        hidden.value = result.data.id;
        var remove = document.createElement("button");
        remove.type = "button";
        remove.className = "tray-remove";
        remove.setAttribute("aria-label", "Remove " + (result.data.name || "this image"));
        remove.textContent = "✕";
        remove.addEventListener("click", function () { item.remove(); area && area.focus(); });
        item.appendChild(img);
        item.appendChild(remove);
        item.appendChild(hidden);
      })
      .catch(function () { item.remove(); trayError("The image could not be attached: check the connection and try again."); });
  }
  if (picker && composer) {
    picker.addEventListener("change", function () {
      Array.prototype.forEach.call(picker.files || [], upload);
      picker.value = "";
    });
    composer.addEventListener("paste", function (event) {
      var items = (event.clipboardData && event.clipboardData.files) || [];
      if (items.length) { event.preventDefault(); Array.prototype.forEach.call(items, upload); }
    });
    composer.addEventListener("dragover", function (event) { event.preventDefault(); composer.classList.add("dropping"); });
    composer.addEventListener("dragleave", function () { composer.classList.remove("dropping"); });
    composer.addEventListener("drop", function (event) {
      event.preventDefault();
      composer.classList.remove("dropping");
      Array.prototype.forEach.call((event.dataTransfer && event.dataTransfer.files) || [], upload);
    });
  }

  // -- the "/" command palette ---------------------------------------------------------------
  var palette = document.getElementById("command-palette");
  if (!palette || !area) { return; }
  var options = Array.prototype.slice.call(palette.querySelectorAll("[role=option]"));
  var active = -1;

  function visible() { return options.filter(function (o) { return !o.hidden; }); }
  function highlight(index) {
    var shown = visible();
    active = shown.length ? (index + shown.length) % shown.length : -1;
    options.forEach(function (o) { o.setAttribute("aria-selected", "false"); });
    if (active >= 0) {
      shown[active].setAttribute("aria-selected", "true");
      area.setAttribute("aria-activedescendant", shown[active].id);
      shown[active].scrollIntoView({ block: "nearest" });
    } else {
      area.removeAttribute("aria-activedescendant");
    }
  }
  function closePalette() {
    palette.hidden = true;
    area.removeAttribute("aria-activedescendant");
  }
  function update() {
    var text = area.value;
    // Open while the message is a command word being typed: "/", "/mo", not "/model gpt".
    if (!/^\/[A-Za-z0-9_-]*$/.test(text)) { closePalette(); return; }
    var typed = text.toLowerCase();
    options.forEach(function (o) { o.hidden = o.getAttribute("data-command").toLowerCase().indexOf(typed) !== 0; });
    if (!visible().length) { closePalette(); return; }
    palette.hidden = false;
    highlight(0);
  }
  function choose(option) {
    var usage = option.getAttribute("data-command");
    var word = usage.split(" ")[0];
    closePalette();
    // A command with an argument waits for it; one without is sent at once.
    if (usage.indexOf("<") !== -1) { area.value = word + " "; area.focus(); }
    else { area.value = word; composer.requestSubmit(); }
  }
  area.addEventListener("input", update);
  area.addEventListener("blur", function () { setTimeout(closePalette, 150); });
  // Before live.js's Enter-sends (on the composer, capturing), so a highlighted command is
  // chosen instead of the text being sent.
  composer.addEventListener("keydown", function (event) {
    if (event.target !== area || palette.hidden) { return; }
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      highlight(active + (event.key === "ArrowDown" ? 1 : -1));
    } else if ((event.key === "Enter" && !event.shiftKey) || event.key === "Tab") {
      var shown = visible();
      if (active >= 0 && shown[active]) {
        event.preventDefault();
        event.stopImmediatePropagation();
        choose(shown[active]);
      }
    }
  }, true);
  palette.addEventListener("mousedown", function (event) {
    var option = event.target.closest("[role=option]");
    if (option) { event.preventDefault(); choose(option); }
  });
})();
