"""What every raybus service process shares: settings, errors, the NATS/JetStream topology, snapshot
reads, tracing, metrics, health endpoints, logging and the process lifecycle."""
