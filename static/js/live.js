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

  function setUp(root) {
    var scope = root && root.querySelectorAll ? root : document;
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
  document.addEventListener("htmx:beforeSwap", function (event) {
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
