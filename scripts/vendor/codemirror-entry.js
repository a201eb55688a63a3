// The parts of CodeMirror 6 that ToolHub's pages use, bundled by scripts/vendor-js into
// static/vendor/codemirror.js as one global, `ToolHubCM`. The pages' own code
// (static/js/editor.js) composes them; nothing here is ToolHub-specific.
export { EditorState, Compartment } from "@codemirror/state";
export {
  EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
  highlightSpecialChars, drawSelection,
} from "@codemirror/view";
export { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
export {
  bracketMatching, indentOnInput, indentUnit, syntaxHighlighting, defaultHighlightStyle,
  foldGutter, foldKeymap,
} from "@codemirror/language";
export { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
export { searchKeymap, highlightSelectionMatches } from "@codemirror/search";
export { lintGutter, setDiagnostics, lintKeymap, forEachDiagnostic } from "@codemirror/lint";
export { python } from "@codemirror/lang-python";
