"""The console: a web application onto runs, approvals and task graphs (issue 34)."""
