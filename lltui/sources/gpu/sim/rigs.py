"""The simulated rigs: GPUs from the GPU catalog (names, VRAM, power limits, clocks, links)
and the model each rig serves."""

from __future__ import annotations

from lltui.core.monitor.models import ContainerRef
from lltui.sources.gpu.sim.profile import ServedModel, SideJob, SimGpu, SimProfile

T4 = SimGpu.of("Tesla T4")
L4 = SimGpu.of("NVIDIA L4")
RTX3090 = SimGpu.of("NVIDIA GeForce RTX 3090", speed=0.75)
RTX4090 = SimGpu.of("NVIDIA GeForce RTX 4090")
V100_SXM3 = SimGpu.of("Tesla V100-SXM3-32GB")
H100_SXM = SimGpu.of("NVIDIA H100 80GB HBM3")
MI300X = SimGpu.of("AMD Instinct MI300X")
RX7900XTX = SimGpu.of("AMD Radeon RX 7900 XTX", speed=0.8)


def _even_links(n: int, cell: str) -> dict[tuple[int, int], str]:
    return {(i, j): cell for i in range(n) for j in range(i + 1, n)}


def _socket_links(n: int, per_socket: int, same: str, cross: str) -> dict[tuple[int, int], str]:
    return {
        (i, j): same if i // per_socket == j // per_socket else cross
        for i in range(n)
        for j in range(i + 1, n)
    }


PROFILES: dict[str, SimProfile] = {
    p.name: p
    for p in (
        SimProfile(
            name="kaggle-2xt4",
            description="Kaggle notebook, 2x Tesla T4 on PCIe",
            gpus=(T4, T4),
            pci_bus_ids=("00000000:00:04.0", "00000000:00:05.0"),
            links={(0, 1): "PHB"},
            cpu_affinity=("0-3", "0-3"),
            numa_affinity=("N/A", "N/A"),
            cpu_count=4,
            host_mem_gib=31,
            driver_version="560.35.03",
            cuda_version="12.6",
            nccl_version="2.23.4",
            served=ServedModel(
                gguf="Qwen2.5-14B-Instruct-Q4_K_M.gguf",
                weights_gib=8.37,
                n_layer=48,
                kv_gib=1.5,
                compute_mib=616,
                argv=("-ngl", "99", "-sm", "layer", "-c", "8192", "-np", "1", "-fa", "on"),
            ),
            hostname="kaggle-sim",
            side_jobs=(
                SideJob(
                    2207,
                    "python3",
                    "root",
                    "python3 -m ipykernel_launcher -f /root/.local/share/jupyter/kernel-7f3a.json",
                    (0,),
                    418,
                    cpu_pct=1.0,
                    rss_mib=1850,
                ),
            ),
        ),
        SimProfile(
            name="colab-t4",
            description="Colab notebook, one Tesla T4",
            gpus=(T4,),
            pci_bus_ids=("00000000:00:04.0",),
            links={},
            cpu_affinity=("0-1",),
            numa_affinity=("N/A",),
            cpu_count=2,
            host_mem_gib=12,
            driver_version="550.54.15",
            cuda_version="12.4",
            nccl_version="2.21.5",
            served=ServedModel(
                gguf="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
                weights_gib=4.58,
                n_layer=32,
                kv_gib=1.0,
                compute_mib=520,
                argv=("-ngl", "99", "-c", "8192"),
            ),
            hostname="colab-sim",
            side_jobs=(
                SideJob(
                    1184,
                    "python3",
                    "root",
                    "python3 -m colab_kernel_launcher -f /root/.local/share/jupyter/kernel.json",
                    (0,),
                    306,
                    cpu_pct=2.0,
                    rss_mib=2200,
                ),
            ),
        ),
        SimProfile(
            name="4xl4",
            description="4x NVIDIA L4 on PCIe, two sockets",
            gpus=(L4, L4, L4, L4),
            pci_bus_ids=(
                "00000000:17:00.0",
                "00000000:31:00.0",
                "00000000:B1:00.0",
                "00000000:CA:00.0",
            ),
            links=_socket_links(4, 2, "NODE", "SYS"),
            cpu_affinity=("0-23,48-71", "0-23,48-71", "24-47,72-95", "24-47,72-95"),
            numa_affinity=("0", "0", "1", "1"),
            cpu_count=96,
            host_mem_gib=376,
            served=ServedModel(
                gguf="Llama-3.3-70B-Instruct-Q4_K_M.gguf",
                weights_gib=39.6,
                n_layer=80,
                kv_gib=5.0,
                compute_mib=1184,
                argv=("-ngl", "99", "-sm", "layer", "-c", "16384", "-np", "2", "-fa", "on"),
            ),
            side_jobs=(
                SideJob(
                    30517,
                    "python",
                    "mlops",
                    "python embed.py --model BAAI/bge-m3 --batch 64 --device cuda:3",
                    (3,),
                    2310,
                    cpu_pct=46.0,
                    rss_mib=5400,
                    container=ContainerRef(
                        "kubernetes",
                        id="5f0c2a9e81d4b7c36a2e9f10d8b4c7a1e3f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9",
                        name="embed",
                        pod="bge-embed-6d5f8c7b9-x2k4q",
                        namespace="mlops",
                    ),
                    age_s=2 * 86400 + 3600,
                ),
            ),
        ),
        SimProfile(
            name="2x3090-nvlink",
            description="2x RTX 3090 with an NVLink bridge (NV4)",
            gpus=(RTX3090, RTX3090),
            pci_bus_ids=("00000000:01:00.0", "00000000:21:00.0"),
            links={(0, 1): "NV4"},
            cpu_affinity=("0-31", "0-31"),
            numa_affinity=("0", "0"),
            cpu_count=32,
            host_mem_gib=128,
            served=ServedModel(
                gguf="Llama-3.3-70B-Instruct-IQ3_XS.gguf",
                weights_gib=27.3,
                n_layer=80,
                kv_gib=5.0,
                compute_mib=1184,
                argv=("-ngl", "99", "-sm", "layer", "-c", "16384", "-fa", "on"),
            ),
            nccl_env={"NCCL_P2P_LEVEL": "NVL"},
        ),
        SimProfile(
            name="8xh100-sxm",
            description="8x H100 SXM on NVSwitch (NV18), two sockets, 4 NICs",
            gpus=(H100_SXM,) * 8,
            pci_bus_ids=tuple(
                f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
            ),
            links=_even_links(8, "NV18"),
            cpu_affinity=("0-55,112-167",) * 4 + ("56-111,168-223",) * 4,
            numa_affinity=("0",) * 4 + ("1",) * 4,
            cpu_count=224,
            host_mem_gib=2015,
            driver_version="580.95.05",
            cuda_version="13.0",
            nccl_version="2.27.7",
            nics=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"),
            nic_links={
                (g, n): ("PIX" if g // 2 == n else ("NODE" if g // 4 == n // 2 else "SYS"))
                for g in range(8)
                for n in range(4)
            },
            served=ServedModel(
                gguf="Llama-3.1-405B-Instruct-Q4_K_M-00001-of-00006.gguf",
                weights_gib=227.0,
                n_layer=126,
                kv_gib=63.0,
                compute_mib=2400,
                argv=("-ngl", "999", "-sm", "layer", "-c", "131072", "-np", "4", "-fa", "on"),
            ),
            nccl_env={"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3"},
            hostname="dgx-sim",
            side_jobs=(
                SideJob(
                    52310,
                    "python",
                    "alice",
                    "python -m torch.distributed.run --nproc-per-node 2 train.py --config"
                    " lora-8b.yaml",
                    (6, 7),
                    21480,
                    cpu_pct=198.0,
                    rss_mib=24600,
                    container=ContainerRef("slurm", id="48213", job="48213", name="llama-ft"),
                    age_s=9 * 3600,
                ),
                SideJob(
                    52977,
                    "python",
                    "bob",
                    "python eval_harness.py --tasks gsm8k --device cuda:0",
                    (0,),
                    6150,
                    cpu_pct=35.0,
                    rss_mib=7300,
                    container=ContainerRef(
                        "docker",
                        id="a3c9e4f1b2d8c7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2",
                        name="eval-gsm8k",
                    ),
                    age_s=1800,
                ),
            ),
        ),
        SimProfile(
            name="16xv100-dgx2",
            description="16x V100 SXM3 on NVSwitch (NV6), two sockets",
            gpus=(V100_SXM3,) * 16,
            pci_bus_ids=tuple(
                f"00000000:{b:02X}:00.0"
                for b in (
                    *(0x34, 0x36, 0x39, 0x3B, 0x57, 0x59, 0x5C, 0x5E),
                    *(0xB7, 0xB9, 0xBC, 0xBE, 0xE0, 0xE2, 0xE5, 0xE7),
                )
            ),
            links=_even_links(16, "NV6"),
            cpu_affinity=("0-23,48-71",) * 8 + ("24-47,72-95",) * 8,
            numa_affinity=("0",) * 8 + ("1",) * 8,
            cpu_count=96,
            host_mem_gib=1510,
            driver_version="535.247.01",
            cuda_version="12.2",
            nccl_version="2.18.5",
            served=ServedModel(
                gguf="Llama-3.1-405B-Instruct-Q4_K_M-00001-of-00006.gguf",
                weights_gib=227.0,
                n_layer=126,
                kv_gib=31.5,
                compute_mib=1400,
                argv=("-ngl", "999", "-sm", "layer", "-c", "32768", "-np", "2"),
            ),
            hostname="dgx2-sim",
            side_jobs=(
                SideJob(
                    52310,
                    "python",
                    "alice",
                    "python -m torch.distributed.run --nproc-per-node 4 train.py --config"
                    " bert-large.yaml",
                    (12, 13, 14, 15),
                    9830,
                    cpu_pct=380.0,
                    rss_mib=31200,
                    container=ContainerRef("slurm", id="48877", job="48877", name="moe-pretrain"),
                    age_s=3 * 86400,
                ),
                SideJob(
                    61044,
                    "python",
                    "carol",
                    "python notebook_kernel.py --device cuda:2",
                    (2,),
                    1540,
                    cpu_pct=3.0,
                    rss_mib=2900,
                    container=ContainerRef(
                        "podman",
                        id="7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a29180f",
                        name="carol-notebook",
                    ),
                    age_s=4 * 3600,
                ),
            ),
        ),
        SimProfile(
            name="mixed-4090-3090",
            description="RTX 4090 + RTX 3090 on PCIe (CUDA and NVML order differ)",
            # NVML order is PCI bus order; CUDA puts the 4090 (compute 8.9) first.
            gpus=(RTX3090, RTX4090),
            pci_bus_ids=("00000000:01:00.0", "00000000:4C:00.0"),
            links={(0, 1): "PHB"},
            cpu_affinity=("0-23", "0-23"),
            numa_affinity=("N/A", "N/A"),
            cpu_count=24,
            host_mem_gib=64,
            served=ServedModel(
                gguf="Qwen3-32B-Q5_K_M.gguf",
                weights_gib=21.7,
                n_layer=64,
                kv_gib=4.0,
                compute_mib=900,
                argv=("-ngl", "99", "-sm", "layer", "-ts", "3,2", "-c", "16384", "-fa", "on"),
                tensor_split=(0.6, 0.4),
            ),
            side_jobs=(
                SideJob(
                    2412,
                    "gnome-shell",
                    "sam",
                    "/usr/bin/gnome-shell",
                    (0,),
                    None,
                    kind="G",
                    cpu_pct=1.5,
                    rss_mib=310,
                ),
                SideJob(
                    44821,
                    "python",
                    "sam",
                    "python -m comfyui.main --listen 127.0.0.1 --cuda-device 1",
                    (1,),
                    2760,
                    cpu_pct=4.0,
                    rss_mib=6100,
                    container=ContainerRef(
                        "docker",
                        id="c0ffee00d15ea5e0c0ffee00d15ea5e0c0ffee00d15ea5e0c0ffee00d15ea5e0",
                        name="comfyui",
                    ),
                    age_s=26 * 60,
                ),
            ),
        ),
        SimProfile(
            name="8xmi300x",
            description="8x AMD Instinct MI300X on XGMI (Infinity Fabric), two sockets",
            gpus=(MI300X,) * 8,
            # the bus ids of the 8x MI300X whose amd-smi topology ROCm's changelog prints
            pci_bus_ids=tuple(
                f"00000000:{b}:00.0" for b in ("0C", "22", "38", "5C", "9F", "AF", "BF", "DF")
            ),
            links=_even_links(8, "XGMI"),
            cpu_affinity=("0-47,96-143",) * 4 + ("48-95,144-191",) * 4,
            numa_affinity=("0",) * 4 + ("1",) * 4,
            cpu_count=192,
            host_mem_gib=2048,
            driver_version="6.10.5",
            rocm_version="6.4.1",
            nccl_version="2.22.3",  # RCCL
            served=ServedModel(
                gguf="DeepSeek-V3-0324-Q4_K_M-00001-of-00009.gguf",
                weights_gib=376.7,
                n_layer=61,
                kv_gib=61.0,
                compute_mib=3300,
                argv=("-ngl", "999", "-sm", "layer", "-c", "65536", "-np", "4", "-fa", "on"),
            ),
            nccl_env={"NCCL_MIN_NCHANNELS": "112", "HSA_NO_SCRATCH_RECLAIM": "1"},
            hostname="mi300x-sim",
            side_jobs=(
                SideJob(
                    71422,
                    "python3",
                    "dana",
                    "python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B"
                    " --port 8001 --gpu-memory-utilization 0.5",
                    (7,),
                    96200,
                    cpu_pct=104.0,
                    rss_mib=9800,
                    container=ContainerRef(
                        "docker",
                        id="9d1c0e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d",
                        name="vllm-qwen3",
                    ),
                    age_s=6 * 3600,
                ),
            ),
        ),
        SimProfile(
            name="2x4090-2x7900xtx",
            description="2x RTX 4090 + 2x RX 7900 XTX on PCIe, one llama-server on Vulkan",
            gpus=(RTX4090, RTX4090, RX7900XTX, RX7900XTX),
            pci_bus_ids=(
                "00000000:01:00.0",
                "00000000:21:00.0",
                "00000000:41:00.0",
                "00000000:61:00.0",
            ),
            links=_even_links(4, "PHB"),
            cpu_affinity=("0-31",) * 4,
            numa_affinity=("N/A",) * 4,
            cpu_count=32,
            host_mem_gib=128,
            rocm_version="6.4.1",
            served=ServedModel(
                gguf="Llama-3.3-70B-Instruct-Q6_K-00001-of-00002.gguf",
                weights_gib=53.9,
                n_layer=80,
                kv_gib=10.0,
                compute_mib=1100,
                # a Vulkan build sees both vendors' GPUs: Vulkan0..3, the 4090s first
                argv=(
                    "-ngl",
                    "99",
                    "-sm",
                    "layer",
                    "-c",
                    "32768",
                    "-fa",
                    "on",
                    "-dev",
                    "Vulkan0,Vulkan1,Vulkan2,Vulkan3",
                ),
            ),
            hostname="mixed-sim",
        ),
    )
}

DEFAULT_PROFILE = "kaggle-2xt4"
