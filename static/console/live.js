// Live pages: an element marked data-live polls its own page (htmx hx-trigger "every Ns") and
// swaps in its fresh copy, so work that arrives or is settled shows without a reload. A page
// whose changing parts are apart (an object's state, its look-ups, its timeline) has an empty
// poller (templates/console/_live.html) naming them in hx-select-oob; each is marked
// data-live-part. Nothing the user is in the middle of is lost: a poll is skipped while the
// user has ticked or selected a row, or is in a field or on a button of the polling element,
// and a part is left as it is (the others are swapped) while the user has typed in it or is in
// one of its fields or buttons, unless its fresh copy closes it (below). A part whose fresh copy
// is the same is left as it is too, so an alert in it is not announced again and a selection in
// it stays.
(function () {
  "use strict";

  function edited(field) {
    if (field.type === "hidden") return false;
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    if (field.tagName === "SELECT" && !field.multiple) {
      // Without an option marked selected, a browser shows the first: that is not an edit.
      var chosen = 0;
      Array.prototype.forEach.call(field.options, function (option, index) {
        if (option.defaultSelected) chosen = index;
      });
      return field.options.length > 0 && field.selectedIndex !== chosen;
    }
    if (field.tagName === "SELECT") {
      return Array.prototype.some.call(field.options, function (option) {
        return option.selected !== option.defaultSelected;
      });
    }
    return field.value !== field.defaultValue;
  }

  function busy(live) {
    if (live.querySelector("input[type=checkbox]:checked, tr.selected")) return true;
    if (Array.prototype.some.call(live.querySelectorAll("input, textarea, select"), edited)) {
      return true;
    }
    var focused = document.activeElement;
    return (
      focused !== null && live.contains(focused) && focused.matches("input, textarea, select, button")
    );
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var live = event.target.closest ? event.target.closest("[data-live]") : null;
    if (live !== null && event.target === live && busy(live)) event.preventDefault();
  });

  // A part as the server wrote it: without what the page did to it since (copy buttons shown,
  // htmx's classes) or what differs on every rendering (a form's CSRF token).
  function served(element) {
    var copy = element.cloneNode(true);
    copy.querySelectorAll("button[data-copy]").forEach(function (button) { button.hidden = true; });
    copy.querySelectorAll("input[name=csrfmiddlewaretoken]").forEach(function (token) {
      token.removeAttribute("value");
    });
    copy.querySelectorAll("[class*=htmx-]").forEach(function (node) {
      Array.prototype.slice.call(node.classList).forEach(function (name) {
        if (name.indexOf("htmx-") === 0) node.classList.remove(name);
      });
    });
    return copy.innerHTML;
  }

  // What the user typed in a part that closes is shown back to them in its fresh copy, under
  // the label the server gave it (data-live-kept), so nothing typed is lost.
  function keepTyped(part, fresh) {
    var typed = Array.prototype.filter
      .call(part.querySelectorAll("textarea, input[type=text], input:not([type])"), edited)
      .map(function (field) { return field.value.trim(); })
      .filter(function (value) { return value !== ""; });
    if (typed.length === 0) return;
    var kept = document.createElement("p");
    kept.className = "muted kept";
    kept.textContent = (fresh.getAttribute("data-live-kept") || "") + " " + typed.join(" · ");
    fresh.appendChild(kept);
  }

  // A part whose fresh copy closes it (data-live-closes: what it offered can no longer be
  // done, say a decision made meanwhile in another tab) is swapped even while the user is in
  // it, so the page never offers what the server would refuse.
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var part = event.detail.target;
    if (!part || !part.hasAttribute("data-live-part")) return;
    var fresh = event.detail.fragment.firstElementChild;
    if (fresh && fresh.hasAttribute("data-live-closes") && !part.hasAttribute("data-live-closes")) {
      keepTyped(part, fresh);
      return;
    }
    if (busy(part) || (fresh && served(fresh) === served(part))) event.preventDefault();
  });
})();
