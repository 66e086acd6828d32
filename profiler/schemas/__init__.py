"""JSON Schemas shipped with the package (package data): report.schema.json is the JSON report's (docs/report-json.md)."""
