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
  // Picking a tool swaps in its form instead of loading the whole page, and puts the focus
  // on its first field (or its Run button), not back at the top of the page.
  if (entries && window.htmx) {
    entries.addEventListener("click", function (event) {
      var link = event.target.closest ? event.target.closest("a") : null;
      if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) {
        return;
      }
      event.preventDefault();
      window.htmx.ajax("GET", link.href, { target: "#tool-panel", select: "#tool-panel", swap: "outerHTML" }).then(function () {
        window.history.pushState({ playground: true }, "", link.href);
        Array.prototype.forEach.call(entries.querySelectorAll("a[aria-current]"), function (other) {
          other.removeAttribute("aria-current");
        });
        link.setAttribute("aria-current", "true");
        var form = document.querySelector("#tool-panel form.run-form");
        var first = form && form.querySelector("input:not([type=hidden]), select, textarea, button[type=submit]");
        if (first) {
          first.focus();
        }
      });
    });
    // Back and forward come to addresses this script made: load them as they are.
    window.addEventListener("popstate", function (event) {
      if (event.state && event.state.playground) {
        window.location.reload();
      }
    });
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var form = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (event.detail.xhr.status === 400 && form && form.closest && form.closest("#tool-panel")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
