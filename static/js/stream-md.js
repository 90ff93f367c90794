// agentsite — an answer's markdown rendered while it streams, so it does not jump from raw
// "## …" to a laid-out page at the end. The same CommonMark rules as the server (raw HTML off,
// tables, strikethrough, line breaks; images never loaded), then DOMPurify with the server's
// allowlist (the page's <script id="md-policy" type="application/json">). The final answer still
// comes from the server, rendered and sanitised there.
(function () {
  "use strict";
  var policyNode = document.getElementById("md-policy");
  if (!window.markdownit || !window.DOMPurify || !policyNode) { return; }
  var policy = JSON.parse(policyNode.textContent);
  var md = window.markdownit("commonmark", { html: false, linkify: false, typographer: false, breaks: true });
  md.enable(["table", "strikethrough"]);
  md.disable("image");  // an image is a link on the server; while streaming, its text
  var schemes = new RegExp("^(?:" + policy.schemes.join("|") + "):", "i");
  var purify = window.DOMPurify;
  purify.addHook("afterSanitizeAttributes", function (node) {
    if (node.tagName === "A") {
      var href = node.getAttribute("href") || "";
      if (!schemes.test(href)) { node.removeAttribute("href"); }
      node.setAttribute("rel", policy.rel);
      node.setAttribute("target", "_blank");
    }
    // tables align cells with a style the CSP refuses: a class, as on the server
    var style = node.getAttribute && node.getAttribute("style");
    if (style) {
      var m = /text-align:\s*(left|right|center)/.exec(style);
      node.removeAttribute("style");
      if (m && (node.tagName === "TH" || node.tagName === "TD")) { node.setAttribute("class", "align-" + m[1]); }
    }
  });
  var options = { ALLOWED_TAGS: policy.tags, ALLOWED_ATTR: policy.attributes.concat(["target", "rel"]),
                  ALLOW_DATA_ATTR: false };

  // Bidirectional controls written out (live.js's agentsiteBidiVisible, loaded beside).
  function bidiVisible(text) { return window.agentsiteBidiVisible ? window.agentsiteBidiVisible(text) : text; }

  // Renders ``box._raw`` into the box at most every 120 ms (long answers are not re-parsed on
  // every frame); the text stays the source of truth for offsets and gap filling.
  window.agentsiteStreamRender = function (box) {
    if (box._mdTimer) { return; }
    box._mdTimer = setTimeout(function () {
      box._mdTimer = null;
      box.innerHTML = purify.sanitize(md.render(bidiVisible(box._raw || "")), options);
      box.classList.add("md");
    }, box._mdRendered ? 120 : 0);
    box._mdRendered = true;
  };
})();
