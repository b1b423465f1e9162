import os

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


@pytest.mark.parametrize("source", ["none", "sim:colab-t4", "sim:4xl4"])
@pytest.mark.parametrize(
    "call",
    [
        lambda a, src: a.can_fit_model("/nonexistent.gguf", source=src),
        lambda a, src: a.can_fit_model(13.0, "Q9_Z", source=src),
        lambda a, src: a.auto_config("/nonexistent.gguf", source=src),
        lambda a, src: a.auto_config("70", source=src),
    ],
)
def test_a_model_that_cannot_work_is_said_with_or_without_gpus(monkeypatch, call, source):
    # without a GPU (or with one) can_fit_model said False and auto_config gave a config for
    # a model path that cannot be read, where with several GPUs both raised
    from lltui import api

    if source == "none":
        monkeypatch.setattr(api, "rig_sample", lambda source="nvml": None)
    with pytest.raises(ValueError, match=r"cannot read|unknown quantization"):
        call(api, source)


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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_parallel": 10**12}, r"^n_parallel: 1000000000000 is out of range \(as .* -np\)$"),
        ({"gpu_layers": 10**12}, r"^gpu_layers: 1000000000000 is out of range \(as .* -ngl\)$"),
        ({"n_gpu": 2**40, "main_gpu": 2**31}, r"^main_gpu: 2147483648 is out of range"),
        ({"n_gpu": 16, "tensor_split": [1 / 16] * 16}, r"^tensor_split: 16 proportions"),
    ],
)
def test_multigpu_config_refuses_what_its_flag_would_on_construction(kwargs, message):
    """n_parallel=10**12 built a config that failed only in to_llama_args, naming -np."""
    with pytest.raises(ValueError, match=message):
        MultiGPUConfig(**kwargs)
    edge = MultiGPUConfig(n_parallel=2**31 - 1, gpu_layers=2**31 - 1)
    assert edge.to_llama_args()[-1] == str(2**31 - 1)


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
    assert MultiGPUConfig().to_llama_args() == ["-sm", "layer", "-np", "1"]


def test_rough_estimate_grows_with_size_bits_and_context():
    from lltui.api import estimate_model_vram

    base = estimate_model_vram(7.0)
    assert estimate_model_vram(13.0) > base
    assert estimate_model_vram(7.0, "Q8_0") > base > estimate_model_vram(7.0, "Q2_K")
    assert estimate_model_vram(7.0, context_size=32768) > base
    assert estimate_model_vram(7.0, overhead_factor=1.0) < base
    # 7B at Q4_K_M: 4.28 GB of weights and 0.54 GB of f16 KV at 4096 cells, times 1.15
    assert estimate_model_vram(7.0) == int((int(7e9 * 4.89 / 8) + 2 * 32 * 1024 * 4096 * 2) * 1.15)


def test_rough_estimate_takes_every_type_quant_lists():
    """Q1_0 and Q2_0 (listed by quant and the exact path) were "unknown quantization" for a
    size in billions: every llama-quantize type ggml has a size for is taken, at its ggml
    type's bits per weight where the rule-of-thumb table has none. None or "" is Q4_K_M."""
    from lltui.api import estimate_model_vram
    from lltui.core.gguf.types import FTYPE_NAMES, QUANTIZE_FTYPES

    kv = 2 * 32 * 1024 * 4096 * 2  # 7B: Llama-class shape, f16 KV at 4096 cells
    assert estimate_model_vram(7.0, "Q1_0") == int((int(7e9 * 18 * 8 / 128 / 8) + kv) * 1.15)
    assert estimate_model_vram(7.0, "q2_0") == int((int(7e9 * 18 * 8 / 64 / 8) + kv) * 1.15)
    for ftype in QUANTIZE_FTYPES:
        name = FTYPE_NAMES[ftype]
        if name != "MXFP4_MOE":  # (MXFP4 experts or all Q8_0: a size says neither)
            assert estimate_model_vram(7.0, name) > kv, name
    with pytest.raises(ValueError, match="unknown quantization 'MXFP4_MOE'"):
        estimate_model_vram(7.0, "MXFP4_MOE")
    q4_k_m = estimate_model_vram(7.0)
    assert estimate_model_vram(7.0, "") == estimate_model_vram(7.0, None) == q4_k_m


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"model_size_b": 7.0, "quantization": "Q9_Z"}, "unknown quantization"),
        ({"model_size_b": -1.0}, "positive"),
        ({"model_size_b": float("inf")}, "positive"),
        ({"model_size_b": float("nan")}, "positive"),
        ({"model_size_b": 7.0, "overhead_factor": 0.5}, "overhead_factor"),
    ],
)
def test_rough_estimate_rejects_nonsense(kwargs, needle):
    from lltui.api import estimate_model_vram

    with pytest.raises(ValueError, match=needle):
        estimate_model_vram(**kwargs)


def test_recommend_quantization_walks_down_the_quality_list():
    from lltui.api import recommend_quantization

    assert recommend_quantization(7.0, available_vram_gb=80) == "Q8_0"
    q_small = recommend_quantization(70.0, available_vram_gb=30)
    q_large = recommend_quantization(70.0, available_vram_gb=48)
    from lltui.core.fit.rough import QUALITY_ORDER

    assert QUALITY_ORDER.index(q_large) < QUALITY_ORDER.index(q_small)
    with pytest.raises(ValueError, match="no quantization"):
        recommend_quantization(405.0, available_vram_gb=16)


def test_can_fit_and_presets_and_auto_config():
    from lltui.api import (
        auto_config,
        can_fit_model,
        colab_t4_single_config,
        kaggle_t4_dual_config,
    )

    assert can_fit_model(7.0, source="sim:kaggle-2xt4")
    assert not can_fit_model(70.0, "Q8_0", source="sim:kaggle-2xt4")
    k = kaggle_t4_dual_config()
    assert (k.n_gpu, k.split_mode, k.tensor_split, k.n_parallel) == (
        2,
        SplitMode.LAYER,
        (0.5, 0.5),
        2,
    )
    assert colab_t4_single_config().split_mode is SplitMode.NONE
    big = auto_config(405.0, source="sim:4xl4")
    assert big.split_mode is SplitMode.LAYER and big.n_gpu == 4
    assert abs(sum(big.tensor_split) - 1.0) < 1e-3
    small = auto_config(1.0, source="sim:mixed-4090-3090")
    assert small.split_mode is SplitMode.NONE and small.n_gpu == 2
    assert auto_config(7.0, source="sim:colab-t4").n_gpu == 1


def test_with_a_gguf_path_the_exact_estimator_is_used(tmp_path):
    from support import gguf_factory as gf

    from lltui.api import can_fit_model, estimate_model_vram, recommend_quantization
    from lltui.core.gguf.reader import read_gguf

    path = tmp_path / "tiny.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    as_is = estimate_model_vram(str(path), None, 512)
    weights = sum(t.nbytes for t in read_gguf(path).tensors)
    assert as_is > weights * 0.9  # the weights (less the input embeddings on the host) + KV
    q4 = estimate_model_vram(path, "Q4_K_M", 512)
    assert q4 < as_is  # a 4-bit what-if of an f16 file is smaller
    assert estimate_model_vram(path, None, 4096) > as_is  # more context, more KV
    with pytest.raises(ValueError, match="no type"):
        estimate_model_vram(path, "Q9_Z", 512)
    assert can_fit_model(str(path), None, 512, source="sim:kaggle-2xt4")
    assert estimate_model_vram(path, "q4-k-m", 512) == q4  # spelled as the rough path reads it
    # the need counts the margin fit keeps on each GPU (1 GiB): less than that never fits
    assert as_is > 2**30
    with pytest.raises(ValueError, match="no quantization"):
        recommend_quantization(str(path), available_vram_gb=1.0)
    # the largest file that fits, F16 included, as lltui quant marks it
    assert recommend_quantization(str(path), (as_is + 1) / 1e9, 512) == "F16"
    assert recommend_quantization(str(path), (as_is - 1) / 1e9, 512) != "F16"
    for bad in (float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="available_vram_gb"):
            recommend_quantization(str(path), available_vram_gb=bad)


def test_amd_gpus_beside_nvidia_ones_are_counted():
    """An AMD GPU has no CUDA index: it was taken for one CUDA_VISIBLE_DEVICES hides."""
    from lltui import api

    assert api.gpu_count("sim:2x4090-2x7900xtx") == 4
    assert api.gpu_count("sim:8xmi300x") == 8


def test_an_amd_gpu_beside_nvidia_ones_has_no_cuda_version():
    """The rig's CUDA version is its NVIDIA GPUs': an AMD GPU's is "" as on an AMD rig (a
    7900 XTX beside 4090s said cuda_version '13.0')."""
    from lltui import api

    found = api.detect_gpus("sim:2x4090-2x7900xtx")
    versions = {g.name: g.cuda_version for g in found}
    assert versions == {"NVIDIA GeForce RTX 4090": "13.0", "AMD Radeon RX 7900 XTX": ""}
    assert {g.cuda_version for g in api.detect_gpus("sim:8xmi300x")} == {""}


def test_detect_gpus_lists_amd_gpus_after_nvidia_ones_wherever_they_sit(monkeypatch):
    """AMD GPUs first on the bus were numbered by their bus place, between the NVIDIA ones
    (0, 0, 1, 1): llama.cpp, fit and ``--gpus 4090,7900xtx`` put them after."""
    from dataclasses import replace

    from lltui import api

    mixed = api.rig_sample("sim:2x4090-2x7900xtx")
    assert mixed is not None
    nvidia, amd = mixed.gpus[:2], mixed.gpus[2:]
    amd_first = [replace(g, info=replace(g.info, index=i)) for i, g in enumerate(amd)]
    nv_after = [replace(g, info=replace(g.info, index=i + 2)) for i, g in enumerate(nvidia)]
    monkeypatch.setattr(
        api, "rig_sample", lambda source: replace(mixed, gpus=(*amd_first, *nv_after))
    )
    found = api.detect_gpus()
    assert [(g.index, g.nvml_index) for g in found] == [(0, 2), (1, 3), (2, 0), (3, 1)]
    assert [g.name.split()[0] for g in found] == ["NVIDIA", "NVIDIA", "AMD", "AMD"]
    assert api.get_total_vram([2, 3]) == sum(g.info.memory_total or 0 for g in amd)


def test_nvml_reads_for_the_api_skip_slow_fields_and_hidden_gpus(monkeypatch):
    from support.fake_pynvml import FakeNvml, make_gpus

    from lltui import api

    gpus = make_gpus(4, nvlinks=2)
    for g in gpus:
        g.compute_procs = [(1, 1024)]
    fake = FakeNvml(gpus)
    fake.install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    found = api.detect_gpus()
    # only the two GPUs this process can use, numbered as CUDA numbers them
    assert [g.index for g in found] == [0, 1]
    assert {g.nvml_index for g in found} == {2, 3}
    assert api.gpu_count() == 2
    # names and memory only: no 20 ms PCIe counters, NVLink state or process lists
    assert fake.count(function="nvmlDeviceGetPcieThroughput") == 0
    assert fake.count(function="nvmlDeviceGetNvLinkState") == 0
    assert fake.count(function="nvmlDeviceGetComputeRunningProcesses_v3") == 0


def test_explain_log_is_the_cli_json(tmp_path):
    """The API's explain is the command's --json: the same buffers, and bad input a
    ValueError of one line rather than a traceback of the parser's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from lltui.api import explain_log

    log = Path(__file__).parent / "fixtures" / "llama-server" / "server_lv4_full.log"
    data = explain_log(log, build=11434)
    assert data["buffers"] and all(
        {"device", "kind", "logged_bytes", "predicted_bytes"} <= set(b) for b in data["buffers"]
    )
    cli = subprocess.run(
        [sys.executable, "-m", "lltui", "explain", str(log), "--build", "11434", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(cli.stdout)["buffers"] == data["buffers"]
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty file") as err:
        explain_log(empty)
    assert "\n" not in str(err.value)
    # a build as people write it, the model as a Path; a build that is none is a ValueError
    assert explain_log(log, build="b11434")["buffers"] == data["buffers"]
    assert explain_log(log, model=Path(log), build=11434)["build"] == 11434
    with pytest.raises(ValueError, match=r"^explain: model .*nope\.gguf: no such file$"):
        explain_log(log, model=tmp_path / "nope.gguf", build=11434)  # (it was a note)
    for bad in (0, -1, 5000.5, "latest"):
        with pytest.raises(ValueError, match="expected a build number"):
            explain_log(log, build=bad)


def test_what_the_review_of_the_api_found(tmp_path, monkeypatch):
    """auto's simulated rig was real GPUs to the API; an F16 file was recommended F32; a
    path's fit was a Q4_K_M re-quantization's; an unknown free memory was 0; an int split
    mode, a "0.5,0.5" split and a Path were raw errors."""
    from dataclasses import replace
    from pathlib import Path

    from support import gguf_factory as gf

    from lltui import api
    from lltui.core.monitor.models import RigInfo
    from lltui.sources.gpu import kinds
    from lltui.sources.gpu.sim import SimSource

    def auto_without_a_gpu(source: str):  # what auto opens on a machine without a GPU
        src = SimSource("kaggle-2xt4", reason="no NVIDIA GPU here")
        return src, src.open()

    with monkeypatch.context() as m:
        m.setattr(kinds, "open_source", auto_without_a_gpu)
        assert api.detect_gpus("auto") == [] and api.get_cuda_version("auto") is None
    path = tmp_path / "tiny.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    need = api.estimate_model_vram(path, None, 512)
    assert api.recommend_quantization(str(path), 1000.0, 512) == "F16"  # not F32
    assert api.can_fit_model(path, context_size=512, source="sim:kaggle-2xt4") == (
        need <= api.get_free_vram(source="sim:kaggle-2xt4")
    )
    sim = api.rig_sample("sim:kaggle-2xt4")
    assert sim is not None
    blind = replace(
        sim, gpus=tuple(replace(g, memory_free=None, memory_used=None) for g in sim.gpus)
    )
    monkeypatch.setattr(api, "rig_sample", lambda source="nvml": blind)
    assert [g.free_memory for g in api.detect_gpus()] == [None, None]
    with pytest.raises(ValueError, match="does not report its free memory"):
        api.get_free_vram()
    assert MultiGPUConfig(n_gpu=2, split_mode=2).to_llama_args()[:2] == ["-sm", "row"]
    assert MultiGPUConfig(n_gpu=2, tensor_split="0.5,0.5").tensor_split == (0.5, 0.5)
    plan = api.plan_models([Path(path), (path, "-c 1024")], gpus="24GiB")
    assert len(plan["models"]) == 2
    assert RigInfo("x").stand_in is False


def test_a_total_memory_not_reported_is_an_error_as_a_free_one(monkeypatch):
    """get_total_vram counted a GPU of unknown total as 0 (two T4s summed to one's 15 GiB),
    where get_free_vram raises."""
    from dataclasses import replace

    from lltui import api

    sim = api.rig_sample("sim:kaggle-2xt4")
    assert sim is not None
    first = replace(sim.gpus[0], info=replace(sim.gpus[0].info, memory_total=None))
    blind = replace(sim, gpus=(first, *sim.gpus[1:]))
    monkeypatch.setattr(api, "rig_sample", lambda source="nvml": blind)
    with pytest.raises(ValueError, match=r"^GPU 0 does not report its total memory$"):
        api.get_total_vram()
    assert api.get_total_vram([1]) == sim.gpus[1].info.memory_total


def test_auto_config_sizes_a_gguf_as_the_file_is(tmp_path):
    """auto_config sized a GGUF path as its Q4_K_M re-quantization: a 16 GB F16 file was put
    on one GPU with 12 GB free, where it cannot load."""
    from support import gguf_factory as gf

    from lltui import api

    path = gf.write_sparse(tmp_path / "8b-f16.gguf", gf.llama_8b_spec(), "F16")
    rig = "sim:mixed-4090-3090"
    roomiest = max(g.free_memory or 0 for g in api.detect_gpus(rig))
    # the file does not fit on the roomiest GPU; its 4-bit re-quantization would
    assert api.estimate_model_vram(path, "Q4_K_M") < roomiest < api.estimate_model_vram(path, None)
    cfg = api.auto_config(path, source=rig)
    assert cfg.split_mode is SplitMode.LAYER and cfg.n_gpu == 2


def test_a_source_that_cannot_be_read_is_an_error_not_a_rig_without_gpus(tmp_path, monkeypatch):
    """A mistyped recording or an unreachable host read as a rig with no GPU: gpu_count 0,
    can_fit_model False, where ``lltui gpus`` says why it cannot read it."""
    from lltui import api

    missing = tmp_path / "nope.jsonl"
    for fn in (api.detect_gpus, api.gpu_count, api.get_cuda_version, api.get_free_vram):
        with pytest.raises(ValueError, match="no such recording") as err:
            fn(source=f"replay:{missing}")
        assert str(err.value).startswith(f"source replay:{missing}: ")
    with pytest.raises(ValueError, match="not reachable"):
        api.can_fit_model(7.0, source="prom:http://127.0.0.1:1")
    # this machine without a driver (no nvidia-smi on PATH) is still no GPU, not an error
    monkeypatch.setenv("PATH", str(tmp_path))
    assert api.detect_gpus("smi") == [] and api.get_cuda_version("smi") is None


def test_plan_models_given_one_path_says_so():
    """One path where a list belongs was planned letter by letter: "/: is a directory"."""
    from pathlib import Path

    from lltui.api import plan_models

    for one in ("models/chat.gguf", Path("models/chat.gguf")):
        with pytest.raises(TypeError, match=r"not one path: \['models/chat.gguf'\]"):
            plan_models(one, gpus="24GiB")  # type: ignore[arg-type]


def test_plan_models_takes_numbers_among_the_flags(tmp_path):
    """["-c", 8192] was a TypeError from inside the flag parser ("expected string or
    bytes-like object, got 'int'"); a string with an open quote said only "No closing
    quotation"."""
    from support import gguf_factory as gf

    from lltui.api import plan_models

    path = tmp_path / "tiny.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    as_words = plan_models([(path, ["-c", 1024])], flags=["-np", 2], gpus="24GiB")
    as_text = plan_models([(path, "-c 1024")], flags="-np 2", gpus="24GiB")
    assert as_words["models"][0]["n_ctx"] == 1024
    assert as_words["models"][0]["args"] == as_text["models"][0]["args"]
    with pytest.raises(ValueError, match="whole number"):
        plan_models([(path, ["-c", 1024.5])], gpus="24GiB")
    with pytest.raises(ValueError, match=r"flags .-a 'x.: No closing quotation"):
        plan_models([path], flags="-a 'x", gpus="24GiB")


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda a, p: a.detect_gpus(3), TypeError, "source: a source such as 'nvml'"),
        (lambda a, p: a.estimate_model_vram(7.0, 4), TypeError, "quantization: a type such as"),
        (lambda a, p: a.estimate_model_vram(None), TypeError, "model_size_b: a GGUF path or a"),
        (lambda a, p: a.estimate_model_vram(7.0, context_size="4096"), TypeError, "context_size"),
        (lambda a, p: a.plan_models([p], gpus=24), TypeError, "gpus: a --gpus spec"),
        (lambda a, p: a.plan_models([(p,)]), ValueError, r"models: each a path, or a \(path,"),
        (lambda a, p: a.plan_models([p], flags=3), TypeError, "flags: a list of llama-server's"),
        (lambda a, p: a.recommend_quantization(p, "16"), TypeError, "available_vram_gb: a num"),
        (lambda a, p: a.get_total_vram(0), TypeError, "gpu_indices: a list of CUDA indices"),
        # each was a TypeError of the inside ('NoneType' object is not iterable, expected
        # str, bytes or os.PathLike object) or an AttributeError ('int' object has no
        # attribute 'upper')
        (lambda a, p: a.plan_models(None), TypeError, "models: a list of models, not None"),
        (lambda a, p: a.plan_models([(3, [])]), TypeError, "models: each a path, or a"),
        (lambda a, p: a.explain_log(None), TypeError, "log: a llama.cpp log's path, not None"),
        (lambda a, p: a.explain_log(p, model=3), TypeError, "model: a GGUF path or hf:"),
        (lambda a, p: a.setup_nccl_environment(debug=3), TypeError, "debug: a string, or"),
        (lambda a, p: a.setup_nccl_environment(socket_ifname=0), TypeError, "socket_ifname: a"),
        # a string was a list of one-letter indices ("no GPU with index '0'"), a list in the
        # list "unhashable type: 'list'", True GPU 1; a string or a float for a number was
        # "must be real number, not str" or taken as it was ("yes" for True, "no" too)
        (lambda a, p: a.get_total_vram("01", "sim:4xl4"), TypeError, "gpu_indices: a list .*'01'"),
        (lambda a, p: a.get_free_vram([[0]], "sim:4xl4"), TypeError, "gpu_indices: .* item 0 is"),
        (lambda a, p: a.get_total_vram([True], "sim:4xl4"), TypeError, "item 0 is True"),
        (lambda a, p: a.get_total_vram([1.0], "sim:4xl4"), TypeError, "item 0 is 1.0"),
        (lambda a, p: a.estimate_model_vram(7, overhead_factor="x"), TypeError, "overhead_factor"),
        (lambda a, p: a.can_fit_model(7, context_size="x", source=p), TypeError, "context_size"),
        (lambda a, p: a.auto_config(context_size="x", source=p), TypeError, "context_size"),
        (lambda a, p: a.kaggle_t4_dual_config("7B"), TypeError, "model_size_b: a size in"),
        (lambda a, p: a.explain_log(p, model_from_log="yes"), TypeError, "model_from_log: True"),
        (lambda a, p: a.plan_models([p], flags=["-c", None]), TypeError, "flags: .* item 1 is"),
        (lambda a, p: a.setup_nccl_environment(disable_p2p="no"), TypeError, "disable_p2p: True"),
        (lambda a, p: a.is_nccl_available(7), TypeError, "lib_path: libnccl's name or path"),
        (lambda a, p: a.get_nccl_version(b"x"), TypeError, "lib_path: libnccl's name or path"),
        (lambda a, p: a.NCCLCommunicator(lib_path=2), TypeError, "lib_path: libnccl's name"),
        (lambda a, p: a.NCCLCommunicator(device_ids="01"), TypeError, "device_ids: a list of"),
        (lambda a, p: a.NCCLCommunicator(n_devs=2.0), TypeError, "n_devs: a number of GPUs"),
        # each was a ValueError, where the module promises a TypeError for a wrong type
        (lambda a, p: a.MultiGPUConfig(n_gpu="2"), TypeError, "n_gpu: a whole number, not '2'"),
        (lambda a, p: a.kaggle_t4_dual_config(n_parallel="x"), TypeError, "n_parallel: a whole"),
        (lambda a, p: a.colab_t4_single_config(n_parallel=1.0), TypeError, "n_parallel: a whole"),
        (lambda a, p: a.MultiGPUConfig(gpu_layers=1.5), TypeError, "gpu_layers: a whole number"),
        (lambda a, p: a.MultiGPUConfig(split_mode=None), TypeError, "split_mode: a SplitMode"),
        (lambda a, p: a.MultiGPUConfig(n_gpu=2, tensor_split=5), TypeError, "tensor_split: frac"),
    ],
)
def test_a_wrong_argument_says_which_and_what_it_takes(tmp_path, call, kind, message):
    """Each was an error from inside: 'int' object has no attribute 'strip' (or 'split'), tuple
    index out of range, '<' not supported between 'int' and 'str'."""
    from lltui import api

    with pytest.raises(kind, match=message) as err:
        call(api, str(tmp_path / "m.gguf"))
    assert len(str(err.value).splitlines()) == 1


def test_recommend_quantization_is_the_type_lltui_quant_marks(tmp_path, capsys):
    """Of two types of one file size (Q5_0 and Q5_K_S of the demo model), the API gave the
    one later in the alphabet where lltui quant marks the first listed."""
    import json
    from collections import Counter

    from lltui import api
    from lltui.cli import main
    from lltui.services.demo import make_demo

    path = str(make_demo(str(tmp_path)).path)
    assert main(["quant", path, "--gpus", "24GiB", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    sizes = Counter(r["file_bytes"] for r in rows if not r["above_source"])
    tied = [r for r in rows if sizes[r["file_bytes"]] > 1 and not r["above_source"]]
    assert tied, "the demo model has types of one size"
    for row in tied:
        gpus = [d for d in row["devices"] if d["kind"] != "cpu"]
        need = sum(d["total_bytes"] + d["unaccounted_bytes"] for d in gpus)
        assert main(["quant", path, "--gpus", f"{need}B"]) == 0
        (marked,) = [ln for ln in capsys.readouterr().out.splitlines() if "most bits" in ln]
        said = api.recommend_quantization(path, (need + 1) / 1e9)  # (GB as a float: not short)
        assert said == marked.split()[0].rstrip("*")


def test_the_memory_a_model_does_not_fit_in_is_never_said_as_one_it_fits(tmp_path):
    """1.08 GB that no type of the demo model fits in read "fits in 1.1 GB", where 1.1 GB is
    enough for its F16."""
    import re

    from lltui import api
    from lltui.services.demo import make_demo

    path = make_demo(str(tmp_path)).path
    assert api.recommend_quantization(path, 1.1) == "F16"
    with pytest.raises(ValueError, match="no quantization") as err:
        api.recommend_quantization(path, 1.08)
    said = re.search(r"fits in ([0-9.]+) GB", str(err.value))
    assert said is not None and said[1] == "1.08"
    with pytest.raises(ValueError, match="no quantization"):
        api.recommend_quantization(path, float(said[1]))  # what it says is not enough


@pytest.mark.parametrize(
    ("value", "p2p", "ib"),
    [("1", "disabled", "disabled"), ("0x1", "disabled", "disabled"), ("2", "enabled", "disabled"),
     ("true", "enabled", "enabled"), ("0", "enabled", "enabled")],
)  # fmt: skip
def test_print_nccl_info_reads_p2p_and_ib_as_nccl_and_lltui_nccl_do(
    monkeypatch, capsys, value, p2p, ib
):
    """NCCL_P2P_DISABLE=2 (or 'true') printed 'P2P : disabled' where NCCL turns P2P off for 1
    only, and 'true' 'IB : disabled' where NCCL reads no number (lltui nccl: allowed)."""
    from lltui.api import print_nccl_info
    from lltui.services.nccl import nccl_report

    monkeypatch.setenv("NCCL_P2P_DISABLE", value)
    monkeypatch.setenv("NCCL_IB_DISABLE", value)
    print_nccl_info()
    out = capsys.readouterr().out.splitlines()
    assert f"P2P       : {p2p}" in out and f"IB        : {ib}" in out
    said = {f.code for f in nccl_report("nvml").findings}
    assert ("p2p-disabled" in said) == (p2p == "disabled")
    assert ("ib-disabled" in said) == (ib == "disabled")


def test_plan_models_refuses_a_model_named_by_m_as_fit_does(tmp_path, capsys):
    """plan_models([A], flags=["-m", B]) planned A and pinned '-m B' in the router's flags for
    it; lltui fit A -m B refuses it. Both read each model's words through the plan service."""
    from support import gguf_factory as gf

    from lltui.api import plan_models
    from lltui.cli import main

    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    gf.write_model(a, gf.SPECS["llama"](), "F16")
    gf.write_model(b, gf.SPECS["llama"](), "Q8_0")
    said = f"fit: {a}: give each model as a word (A.gguf B.gguf), not with -m"
    for flags, own in ((["-m", str(b)], ()), ((), f"--model {b}")):
        with pytest.raises(ValueError) as err:
            plan_models([(a, own)], flags=flags, gpus="24GiB")
        assert str(err.value) == said
    assert main(["fit", str(b), str(a), "-m", str(b), "--gpus", "24GiB", "--json"]) == 2
    assert capsys.readouterr().err.strip() == f"lltui: {said}"


@pytest.mark.parametrize("fleet", ["smi:gpu1,smi:gpu2", "sim:4xl4,sim:colab-t4", "nvml,sim:4xl4"])
def test_a_fleet_source_is_said_to_be_several_rigs(fleet):
    """A --source of several rigs was read as one: 'host 'gpu1,smi:gpu2' holds a comma: give
    each host its kind (smi:h1,smi:h2)' (they had), or an unknown profile '4xl4,sim:colab-t4'."""
    from lltui import api

    for fn in (api.detect_gpus, api.gpu_count, api.get_cuda_version):
        with pytest.raises(ValueError) as err:
            fn(fleet)
        assert str(err.value) == f"source {fleet}: a fleet is several rigs: give one source"


def test_setup_nccl_environment_refuses_a_debug_level_nccl_does_not_know(monkeypatch):
    """debug="loud" set NCCL_DEBUG=LOUD, which NCCL logs nothing extra for (lltui nccl warns
    debug-invalid about it); a level in any case is set upper-cased, as before."""
    from lltui.api import setup_nccl_environment

    for k in ("NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE"):  # (each put back after)
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    with pytest.raises(ValueError, match=r"debug: 'loud' is not a level NCCL knows \(use VERSION"):
        setup_nccl_environment(socket_ifname=None, debug="loud")
    assert "NCCL_DEBUG" not in os.environ and "NCCL_P2P_DISABLE" not in os.environ
    assert setup_nccl_environment(socket_ifname=None, debug="info")["NCCL_DEBUG"] == "INFO"


def test_auto_config_resolves_the_gpus_as_fit_does(monkeypatch):
    """auto_config made its own CUDA device list: AMD GPUs first on the bus were split
    between the NVIDIA ones, an integrated GPU beside a discrete one was given layers that
    llama.cpp never puts there, and NVIDIA with AMD in one server went unwarned."""
    from dataclasses import replace

    from lltui import api

    mixed = api.rig_sample("sim:2x4090-2x7900xtx")
    assert mixed is not None
    nvidia, amd = mixed.gpus[:2], mixed.gpus[2:]
    # the AMD GPUs first on the bus: llama.cpp still lists them after the NVIDIA ones
    amd_first = [replace(g, info=replace(g.info, index=i)) for i, g in enumerate(amd)]
    nv_after = [replace(g, info=replace(g.info, index=i + 2)) for i, g in enumerate(nvidia)]
    sample = replace(mixed, gpus=(*amd_first, *nv_after))
    monkeypatch.setattr(api, "rig_sample", lambda source: sample)
    cfg = api.auto_config(405.0, source="sim:2x4090-2x7900xtx")
    frees = [g.free_bytes for g in (*nvidia, *amd)]
    shares = [f / sum(frees) for f in frees]
    assert cfg.n_gpu == 4 and cfg.tensor_split is not None
    assert [round(s, 2) for s in cfg.tensor_split] == [round(s, 2) for s in shares]
    (warning,) = cfg.warnings
    assert warning.startswith("CUDA0, CUDA1, ROCm0, ROCm1: NVIDIA and AMD GPUs")
    assert (
        cfg.to_llama_args() == api.MultiGPUConfig(4, "layer", 0, cfg.tensor_split).to_llama_args()
    )

    # a GB10 (integrated) beside a 4090: llama.cpp uses the 4090 alone
    gb10 = replace(nvidia[1], info=replace(nvidia[1].info, name="NVIDIA GB10"))
    monkeypatch.setattr(api, "rig_sample", lambda source: replace(mixed, gpus=(nvidia[0], gb10)))
    cfg = api.auto_config(405.0)
    assert (cfg.n_gpu, cfg.split_mode, cfg.tensor_split) == (1, SplitMode.NONE, None)
    (warning,) = cfg.warnings
    assert warning.startswith("CUDA1 (NVIDIA GB10): an integrated GPU") and "left out" in warning


def test_plan_models_is_the_cli_json(tmp_path, capsys):
    """plan_models had no "simulated" (nor "simulated_reason") where lltui fit A B --json
    says "simulated": false: the API and the command print one object, made once."""
    import json

    from support import gguf_factory as gf

    from lltui.api import plan_models
    from lltui.cli import main

    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    gf.write_model(a, gf.SPECS["llama"](), "F16")
    gf.write_model(b, gf.SPECS["llama"](), "Q8_0")
    data = plan_models([a, b], gpus="24GiB")
    assert main(["fit", str(a), str(b), "--gpus", "24GiB", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert list(data) == list(cli)
    assert (data["simulated"], data["simulated_reason"]) == (False, None)
    # (the host's free memory is read again by each)
    assert [m["usage"] for m in data["models"]] == [m["usage"] for m in cli["models"]]
    assert [d["name"] for d in data["devices"]] == [d["name"] for d in cli["devices"]]


@pytest.mark.parametrize("context_size", [-5, 2**31, 10**15])
def test_context_size_is_refused_alike_for_a_gguf_and_a_size(tmp_path, context_size):
    """A size in billions took any context (10**15 tokens: 1.5e20 bytes) where a GGUF path
    refused it, naming the flag (-c: ... is out of range) rather than the argument."""
    from support import gguf_factory as gf

    from lltui import api

    path = tmp_path / "tiny.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    for model in (7.0, path):
        with pytest.raises(ValueError, match=rf"^context_size: {context_size} is out of range"):
            api.estimate_model_vram(model, None, context_size)
        with pytest.raises(ValueError, match=r"^context_size: "):
            api.recommend_quantization(model, 24.0, context_size)
    assert api.estimate_model_vram(7.0, context_size=2**31 - 1) > 0


def test_can_fit_a_gguf_is_the_placement_lltui_fit_makes_on_those_gpus(tmp_path, capsys):
    """can_fit_model compared a one-GPU need with the free memory summed over the GPUs: an
    8B Q4_K at 99092 tokens "fit" Kaggle's two T4s, where lltui fit on them says it does not
    (each GPU keeps its own margin and compute buffers; layers are whole)."""
    import json

    from support import gguf_factory as gf

    from lltui import api
    from lltui.cli import main

    path = gf.write_sparse(tmp_path / "8b.gguf", gf.llama_8b_spec(), "Q4_K")
    rig = "sim:kaggle-2xt4"
    free = {g.index: g.free_memory for g in api.detect_gpus(rig)}

    def cli_fits(context: int, indices: list[int]) -> bool:
        gpus = ",".join(f"{free[i]}B" for i in indices)
        words = ["-c", str(context), "-ngl", "all", "-np", "1", "--gpus", gpus, "--json"]
        assert main(["fit", str(path), *words]) == 0
        return bool(json.loads(capsys.readouterr().out)["fits"])

    assert api.estimate_model_vram(path, None, 99092) <= api.get_free_vram(source=rig)
    assert not cli_fits(99092, [0, 1])
    assert not api.can_fit_model(path, None, 99092, source=rig)
    seen = set()
    for context, indices in ((60000, [0, 1]), (60000, [1]), (8192, [1]), (8192, [0, 1])):
        fits = cli_fits(context, indices)
        seen.add(fits)
        assert api.can_fit_model(path, None, context, indices, source=rig) is fits
    assert seen == {True, False}
    # a type llama-quantize would write, as lltui quant places it
    assert (
        main(
            [
                "quant",
                str(path),
                "-c",
                "99092",
                "-ngl",
                "all",
                "-np",
                "1",
                "--gpus",
                f"{free[0]}B,{free[1]}B",
                "--json",
            ]
        )
        == 0
    )
    marks = {r["type"]: r["fits"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert marks["Q1_0"] and not marks["IQ1_S"]
    assert api.can_fit_model(path, "Q1_0", 99092, source=rig)
    assert not api.can_fit_model(path, "iq1-s", 99092, source=rig)
    assert not api.can_fit_model(path, None, 8192, [], source=rig)  # no GPU


def test_context_size_0_is_the_trained_context_and_a_size_in_billions_has_none(tmp_path):
    """context_size=0 was the model's trained context for a GGUF path (as -c 0: 131072
    tokens of Llama 3.1 8B, 22.7 GB) but no KV cache at all for a size in billions (5.6 GB
    for 8B at Q4_K_M, less than at any context)."""
    from support import gguf_factory as gf

    from lltui import api

    spec = gf.llama_8b_spec(n_ctx_train=131072)
    path = gf.write_sparse(tmp_path / "8b.gguf", spec, "Q4_K")
    assert api.estimate_model_vram(path, None, 0) == api.estimate_model_vram(path, None, 131072)
    rig = "sim:kaggle-2xt4"
    calls = (
        lambda: api.estimate_model_vram(8.0, "Q4_K_M", 0),
        lambda: api.can_fit_model(8.0, None, 0, source=rig),
        lambda: api.recommend_quantization(8.0, 6.0, 0),
        lambda: api.auto_config(8.0, 0, source=rig),
        lambda: api.auto_config(8.0, 0, source="sim:colab-t4"),  # (one GPU: no estimate)
    )
    for call in calls:
        with pytest.raises(ValueError, match=r"^context_size: 0 is the model's trained context"):
            call()
    assert api.auto_config(None, 0, source=rig).n_gpu == 2


def test_recommend_quantization_of_a_gguf_places_it_on_the_gpus_as_lltui_quant_does(
    tmp_path, capsys
):
    """With no memory given, recommend_quantization compared a one-GPU need with the free
    memory summed over the GPUs: an 8B F16 at 16384 tokens was "F16" on Kaggle's two T4s,
    which can_fit_model and lltui quant on them say does not fit (Q8_0 does)."""
    import json

    from support import gguf_factory as gf

    from lltui import api
    from lltui.cli import main

    path = gf.write_sparse(tmp_path / "8b.gguf", gf.llama_8b_spec(), "F16")
    rig = "sim:kaggle-2xt4"
    gpus = ",".join(f"{g.free_memory}B" for g in api.detect_gpus(rig))
    for context in (4096, 16384):
        words = ["-c", str(context), "-ngl", "all", "-np", "1", "--gpus", gpus]
        assert main(["quant", str(path), *words]) == 0
        (marked,) = [ln for ln in capsys.readouterr().out.splitlines() if "most bits" in ln]
        said = api.recommend_quantization(path, None, context, source=rig)
        assert said == marked.split()[0].rstrip("*")
        assert api.can_fit_model(path, said, context, source=rig)
    assert main(["quant", str(path), *words, "--json"]) == 0
    rows = {r["type"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert not rows["F16"]["fits"] and said == "Q8_0"


def test_every_public_function_s_annotations_resolve_at_run_time():
    """rig_sample's return type named a class imported for type checkers alone:
    typing.get_type_hints (Sphinx, typer, pydantic's validate_call) raised NameError."""
    import inspect
    import typing

    from lltui import api

    for name in api.__all__:
        obj = getattr(api, name)
        if inspect.isfunction(obj):
            typing.get_type_hints(obj)


def test_nccl_communicator_refuses_n_devs_and_device_ids_that_disagree():
    """n_devs=2 with device_ids=[0] quietly made a one-GPU communicator; device_ids alone
    still sets the count (nccl bench gives 4 or 8), n_devs alone range(n_devs)."""
    from lltui.api import NCCLCommunicator

    with pytest.raises(ValueError, match=r"^n_devs=2 but device_ids=\[0\] names 1 GPU\(s\)"):
        NCCLCommunicator(n_devs=2, device_ids=[0])
    assert NCCLCommunicator(device_ids=[0, 1, 2, 3]).n_devs == 4
    assert NCCLCommunicator(n_devs=3).device_ids == [0, 1, 2]
    assert NCCLCommunicator().device_ids == [0, 1]
    assert NCCLCommunicator(n_devs=1, device_ids=[1]).device_ids == [1]
    with pytest.raises(ValueError, match="at least one device"):
        NCCLCommunicator(n_devs=0)
