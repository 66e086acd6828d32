"""JSON Schemas shipped with the package as data (core layer): report.schema.json is the JSON report's (docs/report-json.md)."""
