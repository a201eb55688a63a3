// Styles for pages with JavaScript (the phone's folding top bar) key on this class.
document.documentElement.classList.add("js");

// Confirmation before destructive actions: any form with data-confirm asks first.
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});

// No inline scripts or handlers anywhere (the Content-Security-Policy allows only these files).

// A select with data-autosubmit sends its form when it changes (the language menu).
document.addEventListener("change", function (event) {
  var select = event.target;
  if (select.matches && select.matches("select[data-autosubmit]") && select.form) {
    select.form.submit();
  }
});

// Logs with data-scroll-end show their newest lines: scrolled to the bottom when the page
// loads. When htmx swaps in a fresh copy (the live build log, every second), a reader who
// was at the bottom follows the new lines; one who scrolled up stays where they were.
var logPositions = {};
function atBottom(log) {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 4;
}
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-scroll-end]").forEach(function (log) {
    log.scrollTop = log.scrollHeight;
  });
});
document.addEventListener("htmx:beforeSwap", function () {
  logPositions = {};
  document.querySelectorAll("[data-scroll-end][id]").forEach(function (log) {
    logPositions[log.id] = atBottom(log) ? null : log.scrollTop;
  });
});
document.addEventListener("htmx:afterSettle", function () {
  document.querySelectorAll("[data-scroll-end]").forEach(function (log) {
    var kept = log.id ? logPositions[log.id] : undefined;
    log.scrollTop = (kept === undefined || kept === null) ? log.scrollHeight : kept;
  });
});

// A live section with data-pause-while-answering skips its polls while the person is typing
// an answer in its dialog: each poll replaces the section, and with it what they typed.
document.addEventListener("htmx:beforeRequest", function (event) {
  var element = event.detail && event.detail.elt;
  if (element && element.hasAttribute && element.hasAttribute("data-pause-while-answering")
      && element.querySelector("dialog :focus")) {
    event.preventDefault();
  }
});

// Secret inputs (templates/includes/schema_field.html) have a Show button, a toggle
// (aria-pressed) that turns the password input into a text input and back. Hidden without
// JavaScript, where it could do nothing.
function showSecretToggles(root) {
  (root || document).querySelectorAll("[data-secret-toggle][hidden]").forEach(function (button) {
    button.hidden = false;
  });
}
document.addEventListener("DOMContentLoaded", function () { showSecretToggles(document); });
document.addEventListener("htmx:afterSettle", function () { showSecretToggles(document); });
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("[data-secret-toggle]");
  var input = button && document.getElementById(button.getAttribute("aria-controls"));
  if (!input) {
    return;
  }
  var shown = button.getAttribute("aria-pressed") !== "true";
  input.type = shown ? "text" : "password";
  button.setAttribute("aria-pressed", shown ? "true" : "false");
});

// A button with data-enabled-by="<checkbox id>" (the package queue's Approve of a name the
// index does not know) is disabled until that checkbox is ticked. The server checks the same
// confirmation, so without JavaScript nothing is approved by accident either.
function linkConfirmations(root) {
  (root || document).querySelectorAll("button[data-enabled-by]").forEach(function (button) {
    var box = document.getElementById(button.getAttribute("data-enabled-by"));
    if (!box) { return; }
    var follow = function () { button.disabled = !box.checked; };
    box.addEventListener("change", follow);
    follow();
  });
}
document.addEventListener("DOMContentLoaded", function () { linkConfirmations(document); });

// The phone's Menu button folds the top bar open and shut; Esc shuts it again.
document.addEventListener("click", function (event) {
  var toggle = event.target.closest && event.target.closest(".menu-toggle");
  if (toggle) {
    var open = toggle.closest(".topbar").classList.toggle("menu-open");
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  }
});
document.addEventListener("keydown", function (event) {
  var bar = document.querySelector(".topbar.menu-open");
  if (event.key === "Escape" && bar) {
    bar.classList.remove("menu-open");
    var toggle = bar.querySelector(".menu-toggle");
    toggle.setAttribute("aria-expanded", "false");
    toggle.focus();
  }
});

// On a phone a wide table scrolls sideways (toolhub.css); one that does gets a tab stop, so a
// keyboard can scroll it too (axe: scrollable-region-focusable).
function focusableScrollers(root) {
  (root || document).querySelectorAll(".table").forEach(function (table) {
    if (table.scrollWidth > table.clientWidth + 1 && !table.hasAttribute("tabindex")) {
      table.setAttribute("tabindex", "0");
    }
  });
}
document.addEventListener("DOMContentLoaded", function () { focusableScrollers(document); });
document.addEventListener("htmx:afterSettle", function () { focusableScrollers(document); });
window.addEventListener("resize", function () { focusableScrollers(document); });
