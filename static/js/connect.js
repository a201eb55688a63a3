// Copy buttons of the Connect page: a button with data-copy names the element whose text it
// copies, and says so for a moment in its data-copied text.
document.addEventListener("click", function (event) {
  var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
  if (!button) {
    return;
  }
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) {
    return;
  }
  navigator.clipboard.writeText(source.textContent).then(function () {
    var label = button.textContent;
    button.textContent = button.getAttribute("data-copied") || label;
    window.setTimeout(function () { button.textContent = label; }, 1500);
  });
});
