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
// loads and whenever htmx swaps in a fresh copy.
function scrollLogsToEnd(root) {
  (root || document).querySelectorAll("[data-scroll-end]").forEach(function (log) {
    log.scrollTop = log.scrollHeight;
  });
}
document.addEventListener("DOMContentLoaded", function () { scrollLogsToEnd(document); });
document.addEventListener("htmx:afterSettle", function () { scrollLogsToEnd(document); });

// A live section with data-pause-while-answering skips its polls while the person is typing
// an answer in its dialog: each poll replaces the section, and with it what they typed.
document.addEventListener("htmx:beforeRequest", function (event) {
  var element = event.detail && event.detail.elt;
  if (element && element.hasAttribute && element.hasAttribute("data-pause-while-answering")
      && element.querySelector("dialog :focus")) {
    event.preventDefault();
  }
});
