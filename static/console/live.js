// Live lists: an element marked data-live polls its own page (htmx hx-trigger "every Ns") and
// swaps in its fresh copy, so work that arrives or is settled shows without a reload. A poll
// is skipped while the user has ticked or selected a row or is typing in the list, so nothing
// they are in the middle of is lost; the next poll after that goes ahead.
(function () {
  "use strict";

  function busy(live) {
    if (live.querySelector("input[type=checkbox]:checked, tr.selected")) return true;
    var focused = document.activeElement;
    return focused !== null && live.contains(focused) && focused.matches("input, textarea, select");
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var live = event.target.closest ? event.target.closest("[data-live]") : null;
    if (live !== null && event.target === live && busy(live)) event.preventDefault();
  });
})();
