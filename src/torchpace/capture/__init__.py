"""Run a user's unmodified training script in a child process and capture a bounded window
of its steps with torch.profiler (see docs/ARCHITECTURE.md)."""
