"""slurmpolicy.daemon: runs the policy against the live cluster - loop, executor,
crash-safe journal, systemd notify and watchdog, lock, metrics."""
