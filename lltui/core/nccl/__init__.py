"""NCCL: its enums and version codes (enums), what its NCCL_* variables do (variables), findings
about one machine's setup (findings), and NCCL_DEBUG logs (log) and nccl-tests output
(nccl_tests) read."""
