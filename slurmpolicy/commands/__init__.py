"""Click commands, one module a topic; each command is a thin call into the core."""
