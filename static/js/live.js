// A run's live section (templates/runs/_live.html), which htmx replaces on every poll.
// A tool's __event_call__ question opens as a modal dialog: it takes the focus, keeps Tab
// inside itself, and Esc answers "Cancel". Once the answer is sent, the focus moves to the
// line that says so, so a keyboard user is not left on a button that no longer exists.
(function () {
  "use strict";

  function focusables(dialog) {
    return Array.prototype.filter.call(
      dialog.querySelectorAll("button, input, select, textarea, a[href], [tabindex]:not([tabindex='-1'])"),
      function (el) { return !el.disabled && el.offsetParent !== null; }
    );
  }

  function openDialog(dialog) {
    if (dialog.hasAttribute("data-modal")) {
      return;
    }
    dialog.setAttribute("data-modal", "");
    // Rendered open for pages without JavaScript; reopened as a modal.
    dialog.removeAttribute("open");
    dialog.showModal();
    var first = dialog.querySelector("[autofocus]") || dialog.querySelector(".primary") || focusables(dialog)[0];
    if (first) {
      first.focus();
    }
    dialog.addEventListener("cancel", function (event) {
      // Esc is the Cancel button: the tool is told, instead of the dialog just vanishing.
      event.preventDefault();
      var cancel = dialog.querySelector("button[value=cancel]");
      if (cancel) {
        // Focused first: htmx sends the value of the submit button that last had the focus.
        cancel.focus();
        cancel.click();
      }
    });
    dialog.addEventListener("keydown", function (event) {
      if (event.key !== "Tab") {
        return;
      }
      var items = focusables(dialog);
      if (!items.length) {
        return;
      }
      var first = items[0];
      var last = items[items.length - 1];
      if (event.shiftKey && document.activeElement === first) {
        event.preventDefault();
        last.focus();
      } else if (!event.shiftKey && document.activeElement === last) {
        event.preventDefault();
        first.focus();
      }
    });
    dialog.querySelector("form").addEventListener("submit", function () {
      window.__toolhubAnswered = true;
    });
  }

  // Copy buttons: each names the element whose text it copies.
  function copy(button) {
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source || !navigator.clipboard) {
      return;
    }
    navigator.clipboard.writeText(source.innerText || source.textContent).then(function () {
      var live = document.getElementById("live");
      var label = button.textContent;
      button.textContent = (live && live.getAttribute("data-copied")) || label;
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.copy");
    if (button) {
      copy(button);
    }
  });

  // The elapsed time ticks between polls; each poll brings the server's count again.
  var ticking = null;
  function tick() {
    var clock = document.getElementById("elapsed");
    if (!clock) {
      clearInterval(ticking);
      ticking = null;
      return;
    }
    if (!clock.hasAttribute("data-since")) {
      clock.setAttribute("data-since", String(Date.now() - Number(clock.getAttribute("data-elapsed-ms"))));
    }
    // In the page's language ("1,5 s" in French), as the server writes it.
    var seconds = (Date.now() - Number(clock.getAttribute("data-since"))) / 1000;
    clock.textContent = seconds.toLocaleString(document.documentElement.lang || undefined,
      { minimumFractionDigits: 1, maximumFractionDigits: 1 }) + " s";
  }

  function setUp(root) {
    var scope = root && root.querySelectorAll ? root : document;
    Array.prototype.forEach.call(document.querySelectorAll("button.copy[hidden]"), function (button) {
      button.hidden = !navigator.clipboard;
    });
    if (document.getElementById("elapsed") && ticking === null) {
      ticking = setInterval(tick, 100);
    }
    Array.prototype.forEach.call(openDetails, function (id) {
      var again = document.getElementById(id);
      if (again) {
        again.open = true;
      }
    });
    var dialogs = scope.querySelectorAll("dialog.ask");
    Array.prototype.forEach.call(dialogs, openDialog);
    var sent = scope.querySelector ? scope.querySelector("#answer-sent") : null;
    if (sent && window.__toolhubAnswered) {
      window.__toolhubAnswered = false;
      sent.focus();
    }
  }

  // A poll replaces the section and whatever had the focus in it; the focus goes back to the
  // element with the same id, else to the run's status line.
  var focusedId = null;
  // What the reader opened (the status history, the JSON text) stays open across polls.
  var openDetails = [];
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (target && target.querySelectorAll) {
      openDetails = Array.prototype.map.call(target.querySelectorAll("details[id][open]"), function (d) { return d.id; });
    }
    var active = document.activeElement;
    focusedId = active && event.detail.target && event.detail.target.contains(active) ? (active.id || "live-status") : null;
  });
  document.addEventListener("htmx:load", function (event) {
    setUp(event.target);
    if (focusedId && !window.__toolhubAnswered) {
      var again = document.getElementById(focusedId) || document.getElementById("live-status");
      if (again && !document.querySelector("dialog.ask[open]")) {
        again.focus();
      }
    }
    focusedId = null;
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { setUp(document); });
  } else {
    setUp(document);
  }
})();
