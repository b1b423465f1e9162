"""The index CUDA gives each GPU, from what NVML reports and the CUDA environment variables.

NVML numbers GPUs in its own order (the one nvidia-smi shows); CUDA, and so llama.cpp's
``CUDA0, CUDA1, ...`` and its ``--tensor-split`` / ``--main-gpu``, numbers them by its own rules:

* ``CUDA_DEVICE_ORDER=FASTEST_FIRST`` (the default): fastest first. CUDA's heuristic is, in
  practice, compute capability descending, ties broken by PCI bus id ascending.
* ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: PCI bus id ascending.
* ``CUDA_VISIBLE_DEVICES`` then picks and renumbers: a comma-separated list of indices into
  that order or of GPU UUIDs (``GPU-8932f937-...``, a unique prefix is enough). CUDA stops at
  the first entry it cannot resolve, so ``0,2,-1,1`` makes only 0 and 2 visible; an empty
  value hides every GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lltui.core.text import is_digits

PCI_BUS_ID = "PCI_BUS_ID"
FASTEST_FIRST = "FASTEST_FIRST"


@dataclass(frozen=True, slots=True)
class CudaCandidate:
    """What CUDA's ordering looks at for one GPU, in NVML order."""

    uuid: str
    pci_bus_id: str
    compute_capability: tuple[int, int] | None


def pci_sort_key(bus_id: str) -> tuple[int, ...]:
    """``00000000:3B:00.0`` and ``0000:3b:00.0`` sort alike: (domain, bus, device, function).

    An id that does not parse sorts after every id that does, by its text.
    """
    text = bus_id.strip().lower()
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return (0, int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))
    except ValueError:
        return (1, *(ord(c) for c in text))


def enumeration_order(gpus: Sequence[CudaCandidate], device_order: str | None) -> list[int]:
    """Positions in ``gpus`` (NVML order) listed in the order CUDA enumerates them."""
    order = (device_order or FASTEST_FIRST).strip().upper()
    positions = range(len(gpus))
    if order == PCI_BUS_ID:
        return sorted(positions, key=lambda i: pci_sort_key(gpus[i].pci_bus_id))

    def fastest_first(i: int) -> tuple[int, int, int, tuple[int, ...]]:
        cc = gpus[i].compute_capability
        # A GPU whose capability is unknown goes after the ones we can rank.
        if cc is None:
            return (1, 0, 0, pci_sort_key(gpus[i].pci_bus_id))
        return (0, -cc[0], -cc[1], pci_sort_key(gpus[i].pci_bus_id))

    return sorted(positions, key=fastest_first)


def _strip_gpu_prefix(text: str) -> str:
    lower = text.strip().lower()
    return lower[4:] if lower.startswith("gpu-") else lower


def _resolve_entry(entry: str, enumerated: list[int], gpus: Sequence[CudaCandidate]) -> int | None:
    """The position in ``gpus`` one CUDA_VISIBLE_DEVICES entry names, or None if none/unclear."""
    text = entry.strip()
    if not text:
        return None
    if is_digits(text.lstrip("+")):
        k = int(text)
        return enumerated[k] if k < len(enumerated) else None
    if text.lower().startswith("mig-"):
        return None  # MIG instances are not whole GPUs; CUDA shows only the instance
    prefix = _strip_gpu_prefix(text)
    if not prefix:
        return None
    matches = [i for i in enumerated if _strip_gpu_prefix(gpus[i].uuid).startswith(prefix)]
    return matches[0] if len(matches) == 1 else None


def cuda_indices(
    gpus: Sequence[CudaCandidate],
    *,
    device_order: str | None = None,
    visible_devices: str | None = None,
) -> list[int | None]:
    """The CUDA index of each GPU in ``gpus`` (NVML order); None for a GPU CUDA will not see.

    ``device_order`` and ``visible_devices`` are the values of ``CUDA_DEVICE_ORDER`` and
    ``CUDA_VISIBLE_DEVICES``; None means the variable is unset.
    """
    enumerated = enumeration_order(gpus, device_order)
    if visible_devices is None:
        visible = enumerated
    else:
        visible = []
        for entry in visible_devices.split(","):
            position = _resolve_entry(entry, enumerated, gpus)
            if position is None or position in visible:
                break  # CUDA ignores this entry and every one after it
            visible.append(position)
    out: list[int | None] = [None] * len(gpus)
    for cuda_index, position in enumerate(visible):
        out[position] = cuda_index
    return out


def cuda_indices_from_env(
    gpus: Sequence[CudaCandidate], env: Mapping[str, str]
) -> list[int | None]:
    """:func:`cuda_indices` with the variables read from ``env`` (e.g. ``os.environ``)."""
    return cuda_indices(
        gpus,
        device_order=env.get("CUDA_DEVICE_ORDER"),
        visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
    )
