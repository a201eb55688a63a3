// The source form as a code editor (CodeMirror 6, vendored as static/vendor/codemirror.js by
// scripts/vendor-js). The textarea stays the form's field: the editor writes into it on every
// change, so submitting works as before; without JavaScript the page is a plain textarea.
// "Check" runs the server's static checks without saving and marks each error in the gutter.
(function () {
  "use strict";
  var CM = window.ToolHubCM;
  var form = document.getElementById("source-form");
  if (!CM || !form) {
    return;
  }
  var textarea = document.getElementById("id_source");
  var label = document.getElementById("id_source_label");
  var fileInput = document.getElementById("id_file");
  var filenameInput = document.getElementById("id_filename");
  var checkButton = document.getElementById("check-source");
  var result = document.getElementById("check-result");
  var help = document.getElementById("editor-help");
  var errorsData = document.getElementById("source-errors-data");
  var MAX_BYTES = 512 * 1024;

  // One diagnostic per server error. An error without a line (a file-level problem) is put
  // on the first line, so it still shows in the gutter.
  function diagnostics(doc, errors) {
    return errors.map(function (error) {
      var number = error.line && error.line <= doc.lines ? error.line : 1;
      var line = doc.line(number);
      var column = error.line && error.column ? Math.min(error.column - 1, line.length) : 0;
      var from = line.from + Math.max(column, 0);
      // An error just past the end of a line (code cut short) marks the line's last character.
      if (from === line.to && line.length > 0 && error.line) {
        from -= 1;
      }
      return { from: from, to: Math.max(from, line.to), severity: "error", message: error.message, source: error.code || undefined };
    });
  }

  function show(errors) {
    view.dispatch(CM.setDiagnostics(view.state, diagnostics(view.state.doc, errors || [])));
  }

  function setText(text) {
    view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
  }

  var host = document.createElement("div");
  host.className = "editor";
  textarea.parentNode.insertBefore(host, textarea);
  textarea.hidden = true;
  // The label now names the editor, not the hidden textarea.
  label.removeAttribute("for");
  label.addEventListener("click", function () { view.focus(); });
  help.hidden = false;
  checkButton.hidden = false;

  var view = new CM.EditorView({
    parent: host,
    state: CM.EditorState.create({
      doc: textarea.value,
      extensions: [
        CM.lineNumbers(),
        CM.highlightActiveLineGutter(),
        CM.highlightSpecialChars(),
        CM.history(),
        CM.foldGutter(),
        CM.drawSelection(),
        CM.indentOnInput(),
        CM.indentUnit.of("    "),
        CM.syntaxHighlighting(CM.defaultHighlightStyle, { fallback: true }),
        CM.bracketMatching(),
        CM.closeBrackets(),
        CM.highlightActiveLine(),
        CM.highlightSelectionMatches(),
        CM.lintGutter(),
        CM.python(),
        CM.keymap.of([].concat(
          [CM.indentWithTab],
          CM.closeBracketsKeymap, CM.defaultKeymap, CM.searchKeymap, CM.historyKeymap,
          CM.foldKeymap, CM.lintKeymap
        )),
        CM.EditorView.contentAttributes.of({
          "aria-labelledby": label.id,
          "aria-describedby": help.id,
          // Explicit, so checkers see that the scrolling box holds something focusable.
          tabindex: "0",
          spellcheck: "false",
          autocapitalize: "off",
          autocorrect: "off",
        }),
        CM.EditorView.updateListener.of(function (update) {
          if (update.docChanged) {
            textarea.value = update.state.doc.toString();
          }
        }),
      ],
    }),
  });

  var initial = errorsData ? JSON.parse(errorsData.textContent) : [];
  if (initial && initial.length) {
    show(initial);
  }

  // A chosen file is shown in the editor. Submitted unchanged, the file itself is uploaded;
  // edited, the editor's text is (with the file's name, as the slug may come from it). A
  // file over the limit is left to the upload, whose answer says how big it is.
  var loaded = null;
  if (fileInput) {
    fileInput.addEventListener("change", function () {
      var file = fileInput.files && fileInput.files[0];
      loaded = null;
      if (!file || file.size > MAX_BYTES) {
        return;
      }
      file.text().then(function (text) {
        setText(text);
        loaded = view.state.doc.toString();
        filenameInput.value = file.name;
        show([]);
        result.textContent = "";
      });
    });
  }

  form.addEventListener("submit", function () {
    var text = view.state.doc.toString();
    textarea.value = text;
    if (fileInput && fileInput.files && fileInput.files.length && loaded !== null && loaded !== text) {
      fileInput.value = "";
    }
  });

  checkButton.addEventListener("click", function () {
    var body = new FormData();
    body.append("source", view.state.doc.toString());
    body.append("filename", filenameInput.value);
    var token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    result.textContent = result.getAttribute("data-checking");
    checkButton.disabled = true;
    fetch(form.getAttribute("data-check-url"), {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": token, Accept: "application/json" },
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.json();
      })
      .then(function (answer) {
        show(answer.errors);
        result.textContent = answer.summary;
        result.className = "check-result " + (answer.ok ? "check-ok" : "check-problems");
      })
      .catch(function () {
        result.textContent = result.getAttribute("data-failed");
        result.className = "check-result check-problems";
      })
      .finally(function () {
        checkButton.disabled = false;
      });
  });
})();
