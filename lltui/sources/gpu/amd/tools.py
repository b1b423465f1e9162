"""AMD's command-line tools by name: read by the source that picks one and by the
reader of their output, so that neither imports the other."""

AMD_SMI = "amd-smi"
ROCM_SMI = "rocm-smi"
TOOLS = (AMD_SMI, ROCM_SMI)


def not_on_path(tool: str) -> str:
    return f"{tool} is not on PATH here"
