// Keyboard shortcuts for the console queues. Progressive: every action also has a link or a
// button, and nothing here changes data by itself (approve needs Enter on the focused button).
//   j / k      next / previous row in a list, or next / previous item on a detail page
//   o, Enter   open the selected row
//   a          focus "Approve";  r  focus the reason, then Ctrl+Enter rejects
//   x          tick or untick the selected row's checkbox (bulk actions)
//   /          focus the first filter;  s  focus the top bar's search box (any id)
//   ?          show or hide this help
(function () {
  "use strict";

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function rows() {
    var list = document.querySelector("[data-keyboard-list]");
    return list ? Array.prototype.slice.call(list.querySelectorAll("tbody tr")) : [];
  }

  function move(step) {
    var all = rows();
    if (!all.length) return false;
    var current = all.findIndex(function (row) { return row.classList.contains("selected"); });
    var next = Math.min(all.length - 1, Math.max(0, current + step));
    if (current === -1) next = 0;
    all.forEach(function (row) { row.classList.remove("selected"); row.removeAttribute("aria-selected"); });
    var row = all[next];
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
    var link = row.querySelector("a[href]");
    (link || row).focus();
    row.scrollIntoView({ block: "nearest" });
    return true;
  }

  function open() {
    var row = document.querySelector("[data-keyboard-list] tr.selected");
    var link = row && row.querySelector("a[href]");
    if (link) { link.click(); return true; }
    return false;
  }

  function tick() {
    var box = document.querySelector("[data-keyboard-list] tr.selected input[type=checkbox]");
    if (!box) return false;
    box.click();  // a click, so change listeners (select all) hear it
    return true;
  }

  function keyed(key) {
    var element = document.querySelector('[data-key="' + key + '"]');
    if (!element) return false;
    if (element.tagName === "A") element.click(); else element.focus();
    return true;
  }

  function toggleHelp() {
    var help = document.getElementById("key-help");
    if (help) help.hidden = !help.hidden;
    return Boolean(help);
  }

  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.id === "reason") {
      var reject = document.querySelector('button[value="reject"]');
      if (reject) { event.preventDefault(); reject.click(); }
      return;
    }
    if (event.altKey || event.ctrlKey || event.metaKey || typing(event.target)) return;
    var handled = false;
    switch (event.key) {
      case "j": case "ArrowDown": handled = rows().length ? move(1) : keyed("j"); break;
      case "k": case "ArrowUp": handled = rows().length ? move(-1) : keyed("k"); break;
      case "o": handled = open(); break;
      case "x": handled = tick(); break;
      case "a": handled = keyed("a"); break;
      case "r": handled = keyed("r"); break;
      case "/": handled = keyed("/"); break;
      case "s": handled = keyed("s"); break;
      case "?": handled = toggleHelp(); break;
    }
    if (handled) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () {
    // A form's error (data-focus) takes the focus, so it is in view and read out at once.
    var error = document.querySelector("[data-focus]");
    if (error) error.focus();
    var filter = document.querySelector(".filters input, .filters select");
    if (filter && !document.querySelector('[data-key="/"]')) filter.setAttribute("data-key", "/");
    document.querySelectorAll("[data-select-all]").forEach(function (box) {
      box.hidden = false;
      box.addEventListener("change", function () {
        document.querySelectorAll('input[name="' + box.dataset.selectAll + '"]').forEach(function (item) {
          item.checked = box.checked;
        });
      });
    });
    // The hint and the help list only the shortcuts this page has.
    var has = {
      rows: rows().length > 0 || document.querySelector('[data-key="j"], [data-key="k"]') !== null,
      tick: document.querySelector("[data-keyboard-list] tbody input[type=checkbox]") !== null,
      approve: document.querySelector('[data-key="a"]') !== null,
      reject: document.querySelector('[data-key="r"]') !== null,
      filter: document.querySelector('[data-key="/"]') !== null,
    };
    document.querySelectorAll("[data-key-for]").forEach(function (element) {
      element.hidden = !has[element.getAttribute("data-key-for")];
    });
    var hint = document.getElementById("key-hint");
    if (hint) hint.hidden = false;
  });
})();
