"""The server-status collector (collectors layer): each target's HTTP status port, found and read with bounds."""
