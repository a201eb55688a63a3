"""The pages of a toolkit, one module per part: the list, the toolkit itself and its revisions
(`toolkit`), who may use it (`access`), its egress grant (`egress`), download and export
(`export`), its translations and the language switcher (`i18n`), bulk import (`imports`), the
package queue and a toolkit's build (`packages`), the review queue (`review`), its Valves
(`settings`) and its saved tool tests (`tool_tests`)."""
