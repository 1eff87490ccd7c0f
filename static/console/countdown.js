// Countdowns: an element with data-expires-in (seconds left when the server wrote the page)
// shows the time left, rewritten each minute in the words the server used (the formats are
// the page's #countdown-formats JSON). Without JavaScript the server's text stands, right as
// of the page's time. A list that refreshes itself (live.js) brings fresh values.
(function () {
  "use strict";

  var formats = null;

  function text(seconds) {
    if (seconds <= 0) return formats.expired;
    if (seconds < 60) return formats.under_minute;
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor(seconds / 3600) % 24;
    var minutes = Math.floor(seconds / 60) % 60;
    var format = days ? formats.days : hours ? formats.hours : formats.minutes;
    return format.replace("{d}", days).replace("{h}", hours).replace("{m}", minutes);
  }

  function stamp(root) {
    root.querySelectorAll("[data-expires-in]").forEach(function (element) {
      if (element.countdownFrom === undefined) element.countdownFrom = Date.now();
    });
  }

  function tick() {
    if (formats === null) return;
    document.querySelectorAll("[data-expires-in]").forEach(function (element) {
      var left = Number(element.dataset.expiresIn) - (Date.now() - element.countdownFrom) / 1000;
      element.textContent = text(left);
      element.classList.toggle("soon", left < 3600);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var source = document.getElementById("countdown-formats");
    if (source === null) return;
    formats = JSON.parse(source.textContent);
    stamp(document);
    setInterval(tick, 60 * 1000);
  });
  document.addEventListener("htmx:afterSwap", function () { stamp(document); });
})();
