// The admin's own behaviour (no inline scripts: the Content-Security-Policy refuses them).
(function () {
  "use strict";

  // An agent's tools table: the "Applies" column follows the policy chosen for a tool at once,
  // not only after saving.
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!select.matches || !select.matches("table.tool-policies select")) { return; }
    var row = select.closest("tr");
    var label = row && row.querySelector(".effective-label");
    var source = row && row.querySelector(".effective-source");
    if (!label || !source) { return; } // a tool the team has disabled: off whatever is chosen
    var team = row.getAttribute("data-team-policy");
    var own = select.value !== "" && select.value !== team;
    label.textContent = own ? select.options[select.selectedIndex].text : row.getAttribute("data-team-label");
    source.textContent = own ? "(this agent)" : "(team default)";
    row.className = row.className.replace(/\bpolicy-\S+/, "policy-" + (own ? select.value : team));
  });
})();
