"""llama.cpp's command line and output: the one flag table and parser, the launch spec, the
server's log and metrics, and the seed API's multi-GPU settings."""
