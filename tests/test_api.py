import pytest

from lltui.api import (
    MultiGPUConfig,
    SplitMode,
    detect_gpus,
    get_cuda_version,
    get_free_vram,
    get_total_vram,
    gpu_count,
)


def test_detect_gpus_on_a_simulated_rig_in_cuda_order():
    gpus = detect_gpus("sim:mixed-4090-3090")
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name.endswith("4090") and gpus[0].nvml_index == 1
    assert gpus[0].compute_capability == "8.9"
    assert gpu_count("sim:8xh100-sxm") == 8
    assert get_cuda_version("sim:kaggle-2xt4") == "12.6"


def test_vram_sums_and_subsets():
    total = get_total_vram(source="sim:4xl4")
    assert total == 4 * 23034 * 1024 * 1024
    assert get_total_vram([0], source="sim:4xl4") == 23034 * 1024 * 1024
    assert 0 < get_free_vram(source="sim:4xl4") < total
    with pytest.raises(ValueError, match="no GPU with index 9"):
        get_total_vram([9], source="sim:4xl4")


def test_no_source_means_no_gpus(monkeypatch):
    from lltui import api

    monkeypatch.setattr(api, "rig_sample", lambda source="nvml": None)
    assert api.detect_gpus() == [] and api.gpu_count() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_gpu": 2, "tensor_split": [1.0]}, "has 1 value"),
        ({"n_gpu": 2, "tensor_split": [0.7, 0.7]}, "sum to 1"),
        ({"n_gpu": 2, "tensor_split": [1.5, -0.5]}, "negative"),
        ({"n_gpu": 2, "main_gpu": 2}, "main_gpu 2"),
        ({"n_gpu": 0}, "n_gpu"),
        ({"n_parallel": 0}, "n_parallel"),
        ({"gpu_layers": -2}, "gpu_layers"),
        ({"split_mode": "diagonal"}, "unknown split mode"),
    ],
)
def test_multigpu_config_rejects_settings_that_cannot_work(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiGPUConfig(**kwargs)


def test_multigpu_config_to_llama_flags():
    cfg = MultiGPUConfig(
        n_gpu=2, split_mode="row", main_gpu=1, tensor_split=[0.6, 0.4], gpu_layers=99, n_parallel=4
    )
    assert cfg.split_mode is SplitMode.ROW
    assert cfg.to_llama_args() == [
        "-ngl",
        "99",
        "-sm",
        "row",
        "-mg",
        "1",
        "-ts",
        "0.6,0.4",
        "-np",
        "4",
    ]
    assert MultiGPUConfig().to_llama_args() == ["-sm", "layer"]
