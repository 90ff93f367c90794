// Applies the light/dark choice kept in this browser before the page paints (loaded in <head>,
// not deferred; the toggle itself is in app.js).
(function () {
  "use strict";
  try {
    var choice = localStorage.getItem("agentsite.theme");
    if (choice === "light" || choice === "dark") { document.documentElement.setAttribute("data-theme", choice); }
  } catch (e) { /* no storage: the system's theme */ }
})();
