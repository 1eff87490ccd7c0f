// Copy buttons: a button with data-copy puts that text on the clipboard. The buttons are
// hidden in the page and shown here, so without JavaScript there is no button that does nothing
// (the whole text is still in the cell's title and selectable).
(function () {
  "use strict";

  function reveal(root) {
    root.querySelectorAll("button[data-copy][hidden]").forEach(function (button) {
      if (navigator.clipboard) button.hidden = false;
    });
  }

  document.addEventListener("DOMContentLoaded", function () { reveal(document); });
  document.addEventListener("htmx:afterSwap", function (event) { reveal(event.target); });
  // A live page's parts are swapped out of band (live.js): each one swapped in is revealed too.
  document.addEventListener("htmx:oobAfterSwap", function (event) { reveal(event.target); });
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (button === null) return;
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      button.classList.add("copied");
      setTimeout(function () { button.classList.remove("copied"); }, 1500);
    });
  });
})();
