"""llama-server's facts beside its command line: the builds and what each changed, its
limits, metrics, timings, exit reasons, the router's API and served models."""
