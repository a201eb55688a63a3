// Copy buttons: a button with data-copy names the element whose text (or, for a field, value)
// it copies, and says so for a moment in its data-copied text. On the Connect page the token
// pasted into #connect-token is filled into every .token-slot, so the snippets copy whole; it
// never leaves the browser.
document.addEventListener("click", function (event) {
  var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
  if (!button) {
    return;
  }
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) {
    return;
  }
  var text = source.tagName === "INPUT" || source.tagName === "TEXTAREA" ? source.value : source.textContent;
  navigator.clipboard.writeText(text).then(function () {
    var label = button.getAttribute("data-label") || button.textContent;
    button.setAttribute("data-label", label);
    button.textContent = button.getAttribute("data-copied") || label;
    window.setTimeout(function () { button.textContent = label; }, 1500);
  });
});

(function () {
  var field = document.getElementById("connect-token");
  if (!field) {
    return;
  }
  function fill() {
    var token = field.value.trim() || "<token>";
    document.querySelectorAll(".token-slot").forEach(function (slot) { slot.textContent = token; });
  }
  field.addEventListener("input", fill);
  fill();
})();
