"""A llama.cpp log explained: what it allocated on each device, beside what lltui predicts
for the same flags and build, and why a failed load failed."""
