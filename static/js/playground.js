// The Tools tab as a playground (templates/runs/tools.html): the tool list filters as one
// types, and a run form whose input is refused (400) still swaps in, so its errors show next
// to the fields. Running itself is htmx: the panel comes back with the run, live.
(function () {
  "use strict";
  var search = document.getElementById("tool-search");
  var entries = document.getElementById("tool-entries");
  var none = document.getElementById("no-tool-match");
  if (search && entries) {
    var filter = function () {
      var words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.prototype.forEach.call(entries.children, function (item) {
        var text = item.getAttribute("data-search") || "";
        var match = words.every(function (word) { return text.indexOf(word) !== -1; });
        item.hidden = !match;
        shown += match ? 1 : 0;
      });
      none.hidden = shown > 0;
    };
    search.addEventListener("input", filter);
    // Filtering happens here; Enter would only reload the page with the same list.
    search.form.addEventListener("submit", function (event) { event.preventDefault(); filter(); });
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var form = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (event.detail.xhr.status === 400 && form && form.closest && form.closest("#tool-panel")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
