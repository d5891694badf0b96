"""What this host gives a process: its thread budget, cores and memory, and its processes' accounting."""
