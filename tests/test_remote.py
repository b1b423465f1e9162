"""Remote models: ``hf:OWNER/REPO[:FILE|QUANT][@REV]`` and http(s) URLs read by ranged requests
from a real HTTP server on 127.0.0.1 (tests/support/hub_server.py) that speaks the hub's
endpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.hub_server import COMMIT, Hub, HubServer, Repo

from lltui.cli import main
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.refs import (
    HfRef,
    RefError,
    RepoFile,
    UrlRef,
    display_url,
    hf_draft_file,
    hf_projector,
    parse_ref,
    quant_of,
    repo_models,
    tag_model,
)
from lltui.sources.models import hf_hub, remote_gguf
from lltui.sources.models.remote import read_remote
from lltui.sources.models.remote_gguf import RemoteError

TOKEN = "hf_secretTOKENvalue1234567890"
N_VOCAB = 151936


@pytest.fixture(autouse=True)
def _hub_env(tmp_path, monkeypatch):
    """The header cache in the test's own directory; no token unless a test gives one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_hub, "token", lambda: None)


@pytest.fixture(scope="module")
def big_model(tmp_path_factory) -> Path:
    """A 150k-token vocabulary (tokens, scores, types and merges, as Qwen's) in a 4 GiB file
    of which only the header is on disk."""
    d = tmp_path_factory.mktemp("big")
    spec = gf.qwen3_spec(
        n_vocab=N_VOCAB, n_embd=4096, n_layer=36, n_ff=12288, n_head=32, n_head_kv=8, head_dim=128
    )
    vocab = gf.spm_vocab(N_VOCAB)
    (path,) = gf.write_model(
        d / "big.gguf", spec, "Q4_K", vocab=vocab, merges=gf.bpe_merges(N_VOCAB), sparse=True
    )
    return path


@pytest.fixture(scope="module")
def small_models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("small")
    (one,) = gf.write_model(d / "one.gguf", gf.llama_spec(), "Q8_0")
    (one32,) = gf.write_model(d / "one32.gguf", gf.llama_spec(), "F32")
    parts = gf.write_model(d / "tiny.gguf", gf.qwen3_spec(), "Q8_0", split_max_tensors=25)
    assert len(parts) == 2
    cut = d / "cut.gguf"
    data = one.read_bytes()
    cut.write_bytes(data[: read_gguf(one).files[0].header_nbytes // 2])
    # projectors into Big's 4096 dimensions and one's 256 (F16, and F32: -hf picks by bits)
    big_mm = gf.write_mmproj(d / "big-mmproj.gguf", 4096)
    mm = gf.write_mmproj(d / "mmproj.gguf", 256, n_embd=256, image_size=336, patch_size=14)
    mm32 = gf.write_mmproj(d / "mmproj32.gguf", 256, weight_type="F32")
    return {
        "one": one,
        "one32": one32,
        "part1": parts[0],
        "part2": parts[1],
        "cut": cut,
        "big_mmproj": big_mm,
        "mmproj": mm,
        "mmproj32": mm32,
    }


@pytest.fixture
def hub(big_model, small_models, monkeypatch):
    h = Hub(
        repos={
            "acme/Big-GGUF": Repo(
                files={
                    "Big-Q4_K_M.gguf": big_model,
                    "Big-IQ4_XS.gguf": small_models["one"],
                    "mmproj-Big-F16.gguf": small_models["big_mmproj"],
                    "README.md": small_models["one"],
                }
            ),
            "acme/Split-GGUF": Repo(
                files={
                    "Q8_0/Split-Q8_0-00001-of-00002.gguf": small_models["part1"],
                    "Q8_0/Split-Q8_0-00002-of-00002.gguf": small_models["part2"],
                }
            ),
            "acme/Vis-GGUF": Repo(
                files={
                    "Vis-Q8_0.gguf": small_models["one"],
                    "Vis-F32.gguf": small_models["one32"],
                    "mmproj-Vis-F32.gguf": small_models["mmproj32"],
                    "mmproj-Vis-F16.gguf": small_models["mmproj"],
                    "other/mmproj-Vis-Q8_0.gguf": small_models["mmproj32"],
                }
            ),
            "acme/Gap-GGUF": Repo(
                files={"Q8_0/Gap-Q8_0-00001-of-00002.gguf": small_models["part1"]}
            ),
            "acme/Gated-GGUF": Repo(files={"Gated-Q8_0.gguf": small_models["one"]}, gated=True),
            "acme/Fake-GGUF": Repo(  # its "projector" is a plain model
                files={
                    "Fake-Q8_0.gguf": small_models["one"],
                    "mmproj-Fake.gguf": small_models["one"],
                }
            ),
            "acme/Cut-GGUF": Repo(files={"Cut-Q8_0.gguf": small_models["cut"]}),
            "acme/Draft-GGUF": Repo(
                files={
                    "Draft-F32.gguf": small_models["one32"],
                    "Draft-Q8_0.gguf": small_models["one"],
                }
            ),
            "acme/Mtp-GGUF": Repo(  # a model and the MTP head -hfd picks before it
                files={"M-Q8_0.gguf": small_models["one"], "mtp-M-F32.gguf": small_models["one32"]}
            ),
            "acme/Preset-GGUF": Repo(  # a router's preset: -hf downloads it alone
                files={"preset.ini": small_models["one"], "P-Q8_0.gguf": small_models["one"]}
            ),
            "acme/Halves-GGUF": Repo(  # tags -hf matches in more than one file
                files={
                    "M-BF16.gguf": small_models["one32"],
                    "M-F16.gguf": small_models["one"],
                    "a-Q8_0.gguf": small_models["one"],
                    "b-Q8_0.gguf": small_models["one32"],
                }
            ),
            "acme/Twins-GGUF": Repo(  # MTP heads beside two quantizations, one shared
                files={
                    "T-F32.gguf": small_models["one32"],
                    "T-Q8_0.gguf": small_models["one"],
                    "T-Q8_K_XL.gguf": small_models["one"],
                    "mtp-T-F32.gguf": small_models["one"],
                    "mtp-T-Q8_0.gguf": small_models["one32"],
                }
            ),
            "acme/Heads-GGUF": Repo(  # heads of each quantization beside the model's
                files={
                    "H-Q8_0.gguf": small_models["one"],
                    "mtp-H-F32.gguf": small_models["one"],
                    "mtp-H-Q8_0.gguf": small_models["one32"],
                    "eagle3-H-Q8_0.gguf": small_models["one"],
                }
            ),
        },
        files={
            "big.gguf": big_model,
            "one.gguf": small_models["one"],
            "mmproj.gguf": small_models["mmproj"],
            "tiny-00001-of-00002.gguf": small_models["part1"],
            "tiny-00002-of-00002.gguf": small_models["part2"],
        },
        token=TOKEN,
    )
    with HubServer(h) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        yield h


def _ranged(hub: Hub) -> list:
    return [h for h in hub.hits("/resolve/") + hub.hits("/files/") if h.method == "GET"]


# -- references ------------------------------------------------------------------------------


def test_references_parse():
    assert parse_ref("hf:acme/M-GGUF") == HfRef("acme/M-GGUF")
    assert parse_ref("hf:acme/M-GGUF:Q4_K_M@v1") == HfRef("acme/M-GGUF", "Q4_K_M", "v1")
    r = parse_ref("hf:acme/M:sub/m-Q8_0.gguf")
    assert isinstance(r, HfRef) and r.is_file and r.revision is None
    assert parse_ref("https://h.example/m.gguf") == UrlRef("https://h.example/m.gguf")
    for bad in ("hf:acme", "hf:acme/m:", "hf:acme/m@", "hf:/m", "https://"):
        with pytest.raises(RefError):
            parse_ref(bad)
    # urllib's own refusals (a bracket left open, a port that is no number) were internal
    # errors at the first request; the key in the URL stays out of the line
    for bad in ("http://[::1", "http://127.0.0.1:abc/x.gguf", "http://u:secret@[::1/x"):
        with pytest.raises(RefError, match="not a URL") as exc:
            parse_ref(bad)
        assert "secret" not in str(exc.value)


def test_an_hf_endpoint_that_is_no_url_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://[::1")
    for ref in ("hf:acme/M-GGUF", "http://127.0.0.1:1/x.gguf"):
        assert main(["fit", ref, "--gpus", "cpu", "--json"]) == 2
        out = capsys.readouterr()
        assert "HF_ENDPOINT='http://[::1' is not a URL" in json.loads(out.out)["error"]
        assert len(out.err.strip().splitlines()) == 1
    monkeypatch.setenv("HF_ENDPOINT", "http://me:s3cret@[::1")  # its password never shown
    assert main(["fit", "hf:acme/M-GGUF", "--gpus", "cpu"]) == 2
    assert "s3cret" not in capsys.readouterr().err


def test_quant_tags_match_as_llama_cpp_does():
    """common/download.cpp's find_best_model: the first model file (in the hub's order) whose
    path holds TAG. or TAG- in any case, a split model's first part."""
    files = [
        RepoFile("m-Q4_K_M.gguf", 10),
        RepoFile("m-IQ4_XS.gguf", 8),
        RepoFile("m-Q4_K.gguf", 9),
        RepoFile("UD-Q4_K_XL/m-UD-Q4_K_XL-00002-of-00002.gguf", 5),
        RepoFile("UD-Q4_K_XL/m-UD-Q4_K_XL-00001-of-00002.gguf", 5),
        RepoFile("mmproj-m-F16.gguf", 1),
        RepoFile("Q6_K/m-00001-of-00001.gguf", 1),
    ]
    models = repo_models(files)

    def picked(tag: str, among: list = models) -> str | None:
        found = tag_model(among, tag)
        return found.path if found is not None else None

    assert picked("q4_k_m") == "m-Q4_K_M.gguf"
    assert picked("Q4_K") == "m-Q4_K.gguf"
    assert picked("Q4_K_XL") == picked("UD-Q4_K_XL")
    ud = tag_model(models, "UD-Q4_K_XL")
    assert ud is not None and len(ud.files) == 2 and ud.size == 10 and ud.complete
    assert ud.path.endswith("-00001-of-00002.gguf")
    assert [m.kind for m in models][-1] == "mmproj"
    assert picked("F16") is None  # the projector is not a model
    assert picked("Q6_K") is None  # a folder's name followed by '/' is no tag llama.cpp reads
    assert quant_of("x/m-UD-Q4_K_XL-00001-of-00002.gguf") == "UD-Q4_K_XL"
    assert quant_of("Q8_0/model-00001-of-00002.gguf") == "Q8_0"
    both = repo_models([RepoFile("m-Q4_K_M.gguf", 1), RepoFile("m-UD-Q4_K_M.gguf", 1)])
    assert picked("Q4_K_M", both) == "m-Q4_K_M.gguf"
    assert picked("ud-q4_k_m", both) == "m-UD-Q4_K_M.gguf"
    # where llama-server's pick is not the file whose quantization is the tag: its pick
    # (lltui took m.Q4_K_M.gguf, said F16's file and refused two models of one tag)
    dots = repo_models([RepoFile("m.Q4_K_M.gguf", 1), RepoFile("m-UD-Q4_K_M.gguf", 1)])
    assert picked("Q4_K_M", dots) == "m-UD-Q4_K_M.gguf"
    halves = repo_models([RepoFile("M-F16.gguf", 1), RepoFile("M-BF16.gguf", 1)])
    assert picked("F16", halves) == "M-BF16.gguf"
    two = repo_models([RepoFile("b-Q8_0.gguf", 1), RepoFile("a-Q8_0.gguf", 1)])
    assert picked("Q8_0", two) == "a-Q8_0.gguf"
    assert quant_of("model.gguf") is None


def test_hf_tag_loads_the_file_llama_server_loads(hub, capsys):
    """fit hf:REPO:F16 read M-F16.gguf where -hf REPO:F16 loads M-BF16.gguf; a tag two
    models carry was refused where -hf loads the first; quant --best named BF16's file."""
    got = _fit_json(capsys, "hf:acme/Halves-GGUF:F16", "--gpus", "24GiB")
    assert got["model"]["path"] == "hf:acme/Halves-GGUF:M-BF16.gguf"
    got = _fit_json(capsys, "hf:acme/Halves-GGUF:Q8_0", "--gpus", "24GiB")
    assert got["model"]["path"] == "hf:acme/Halves-GGUF:a-Q8_0.gguf"
    best = ("--gpus", "24GiB", "--best", "gpu-only", "--json")
    assert main(["quant", "hf:acme/Halves-GGUF", *best]) == 0
    flags = {q["file"]: q["flags"][:4] for q in json.loads(capsys.readouterr().out)["quants"]}
    assert flags["M-F16.gguf"][:4] == ["-hf", "acme/Halves-GGUF", "-hff", "M-F16.gguf"]
    assert flags["M-BF16.gguf"][:2] == ["-hf", "acme/Halves-GGUF:BF16"]
    assert flags["a-Q8_0.gguf"][:2] == ["-hf", "acme/Halves-GGUF:Q8_0"]


# -- reading headers ---------------------------------------------------------------------------


def test_a_150k_vocabulary_header_in_a_few_ranged_requests(hub, big_model):
    got = read_remote("hf:acme/Big-GGUF:Q4_K_M")
    local = read_gguf(big_model)
    ranged = _ranged(hub)
    size = big_model.stat().st_size
    assert size > 4 * 10**9
    assert len(ranged) <= 4 and all(h.status == 206 for h in ranged)
    sent = sum(h.sent for h in ranged)
    assert sent == got.stats.bytes_read < 0.02 * size
    m = got.model
    assert m.path == "hf:acme/Big-GGUF:Big-Q4_K_M.gguf"
    assert m.file_size == size and m.tokens is not None and m.tokens.count == N_VOCAB
    assert [(t.name, t.dims, t.type, t.file_offset) for t in m.tensors] == [
        (t.name, t.dims, t.type, t.file_offset) for t in local.tensors
    ]
    # a long array is read from the header kept in the cache, not from the network
    assert m.tokens.values()[:3] == local.tokens.values()[:3]


def test_the_second_run_reads_the_header_from_the_cache(hub):
    read_remote("hf:acme/Big-GGUF:q4_k_m")
    hub.clear()
    again = read_remote("hf:acme/Big-GGUF:Q4_K_M")
    assert again.stats.cache_hits == 1 and again.stats.bytes_read == 0
    assert _ranged(hub) == [] and len(hub.hits("/api/models/")) == 1
    # at a commit (which never changes) the second run asks nothing at all
    read_remote(f"hf:acme/Big-GGUF:Q4_K_M@{COMMIT}")
    hub.clear()
    pinned = read_remote(f"hf:acme/Big-GGUF:Q4_K_M@{COMMIT}")
    assert hub.log == [] and pinned.stats.requests == 0
    assert pinned.model.path == f"hf:acme/Big-GGUF:Big-Q4_K_M.gguf@{COMMIT}"
    url = f"{hub.url}/files/big.gguf"
    read_remote(url)
    hub.clear()
    read_remote(url)
    assert [h.method for h in hub.hits("/files/")] == ["HEAD"]


def test_split_models_are_followed(hub, small_models):
    local = read_gguf(small_models["part1"])
    for ref in (
        "hf:acme/Split-GGUF:Q8_0",
        "hf:acme/Split-GGUF:Q8_0/Split-Q8_0-00002-of-00002.gguf",
        f"{hub.url}/files/tiny-00002-of-00002.gguf",
    ):
        m = read_remote(ref).model
        assert m.split_count == 2
        assert [(t.name, t.split, t.file_offset) for t in m.tensors] == [
            (t.name, t.split, t.file_offset) for t in local.tensors
        ]
    assert m.paths[0].endswith("/files/tiny-00001-of-00002.gguf")


def test_missing_files_and_repositories_are_one_line(hub):
    with pytest.raises(RemoteError, match=r"not found \(HTTP 404\)"):
        read_remote(f"{hub.url}/files/nope.gguf")
    with pytest.raises(RemoteError, match="no such repository"):
        read_remote("hf:acme/Nope-GGUF:Q4_K_M")
    with pytest.raises(RemoteError, match="no file of quantization Q2_K"):
        read_remote("hf:acme/Big-GGUF:Q2_K")


def test_a_missing_part_of_a_remote_split_model_is_named(hub, capsys):
    """It said only "parts of this split model are missing", where a local one names the file."""
    assert main(["fit", "hf:acme/Gap-GGUF:Q8_0", "--gpus", "24GiB"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.strip().endswith("missing: Q8_0/Gap-Q8_0-00002-of-00002.gguf")


def test_a_truncated_header_is_one_line(hub, capsys):
    assert main(["fit", "hf:acme/Cut-GGUF:Q8_0", "--gpus", "24GiB"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "hf:acme/Cut-GGUF:Cut-Q8_0.gguf" in err and "past the end of the file" in err


def test_a_server_that_ignores_range_is_read_as_a_bounded_stream(hub, big_model, monkeypatch):
    hub.ranges = False
    got = read_remote(f"{hub.url}/files/big.gguf")
    assert got.model.tokens is not None and got.model.tokens.count == N_VOCAB
    assert got.stats.bytes_read < 0.01 * big_model.stat().st_size
    monkeypatch.setattr(remote_gguf, "MAX_HEADER_BYTES", 3 * 2**20)
    with pytest.raises(RemoteError, match=r"ignores byte ranges.*stopped reading after"):
        read_remote(f"{hub.url}/files/big.gguf?again=1")


def test_an_unreachable_server_is_one_line(capsys):
    assert main(["quant", "http://someone:pa55word@127.0.0.1:9/m.gguf"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot connect" in err
    assert "http://127.0.0.1:9/m.gguf" in err and "pa55word" not in err


def test_credentials_in_a_url_are_not_shown(hub, capsys):
    url = hub.url.replace("http://", "http://someone:pa55word@") + "/files/one.gguf"
    assert main(["fit", url, "--gpus", "24GiB", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["model"]["path"] == f"{hub.url}/files/one.gguf"
    kept = list((Path(os.environ["XDG_CACHE_HOME"]) / "lltui" / "gguf-headers").glob("*.json"))
    assert kept and all("pa55word" not in p.read_text() for p in kept)


def test_no_output_of_a_remote_model_shows_its_credentials(hub, capsys):
    """quant's title and --best's -mu commands printed the URL's password; a signed URL's
    query (X-Amz-Signature, token) was printed and kept in the header cache whole."""
    url = hub.url.replace("http://", "http://someone:pa55word@") + "/files/one.gguf"
    signed = f"{hub.url}/files/one.gguf?X-Amz-Signature=SIGSECRET&token=TOKSECRET&v=2"
    runs = [
        ["quant", url, "--gpus", "24GiB"],
        ["fit", url, "--gpus", "24GiB", "--best", "speed"],
        ["fit", signed, "--gpus", "24GiB", "--best", "speed"],
        ["fit", signed, "--gpus", "24GiB", "--json"],
        ["quant", signed.replace("one.gguf", "none.gguf"), "--gpus", "24GiB"],
    ]
    for argv in runs:
        main(argv)
        got = capsys.readouterr()
        for secret in ("pa55word", "SIGSECRET", "TOKSECRET"):
            assert secret not in got.out + got.err, (argv, secret)
    assert "-mu " in got.out + got.err or "none.gguf" in got.err
    kept = (Path(os.environ["XDG_CACHE_HOME"]) / "lltui" / "gguf-headers").glob("*.json")
    assert all("SIGSECRET" not in p.read_text() for p in kept)
    assert "X-Amz-Signature=***&token=***&v=2" in display_url(signed)


# -- tokens and gated repositories -----------------------------------------------------------


def test_a_gated_repository_without_a_token(hub, capsys):
    assert main(["fit", "hf:acme/Gated-GGUF:Q8_0", "--gpus", "24GiB"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "HTTP 401" in err and "gated" in err and "HF_TOKEN" in err
    assert all(h.auth is None for h in hub.log)


def test_the_token_is_sent_but_never_shown(hub, monkeypatch, capsys):
    monkeypatch.setattr(hf_hub, "token", lambda: TOKEN)
    assert main(["fit", "hf:acme/Gated-GGUF:Q8_0", "--gpus", "24GiB", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["model"]["path"] == "hf:acme/Gated-GGUF:Gated-Q8_0.gguf"
    sent = [h.auth for h in hub.hits("/resolve/") + hub.hits("/api/models/")]
    assert sent and all(a == f"Bearer {TOKEN}" for a in sent)
    assert TOKEN not in out + err
    # a token without access: refused, one line, the token not in it
    monkeypatch.setattr(hf_hub, "token", lambda: "hf_wrongTOKEN0000")
    hub.repos["acme/Gated-GGUF"].files = {"Gated2-Q8_0.gguf": hub.files["one.gguf"]}
    assert main(["fit", "hf:acme/Gated-GGUF:Q8_0", "--gpus", "24GiB"]) == 2
    out, err = capsys.readouterr()
    assert "HTTP 403" in err and "hf_wrongTOKEN0000" not in out + err
    assert (
        repr(remote_gguf.RemoteFile("u", "n", auth={"Authorization": "Bearer x"})).count("Bearer")
        == 0
    )


def test_url_references_get_the_token_only_on_the_hub_host(hub, monkeypatch):
    monkeypatch.setattr(hf_hub, "token", lambda: TOKEN)
    read_remote(f"{hub.url}/files/one.gguf")
    assert {h.auth for h in hub.hits("/files/")} == {f"Bearer {TOKEN}"}
    hub.clear()
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    read_remote(f"{hub.url}/files/one.gguf")
    assert {h.auth for h in hub.hits("/files/")} == {None}


# -- the commands ----------------------------------------------------------------------------


def test_fit_json_names_the_remote_file(hub, capsys):
    assert main(["fit", "hf:acme/Big-GGUF:Q4_K_M", "--gpus", "24GiB", "-c", "8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    path = data["model"]["path"]
    assert path == "hf:acme/Big-GGUF:Big-Q4_K_M.gguf" and not os.path.exists(path)
    assert data["model"]["n_vocab"] == N_VOCAB and data["devices"][0]["fits"]
    assert main(["quant", f"{hub.url}/files/one.gguf", "--gpus", "24GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["path"].startswith(f"{hub.url}/files/one") and data["rows"]


def test_hf_picks_the_projector_as_llama_cpp_does():
    """common/download.cpp's find_best_mmproj: the model's folder or one above it, the
    deepest, then the bits nearest the model's, then the first listed."""
    paths = ["MMPROJ-F16.gguf", "mmproj-BF16.gguf", "mmproj-F16.gguf", "mmproj-F32.gguf"]
    paths += ["Q8_0/mmproj-Q8_0.gguf", "other/mmproj-F16.gguf", "mmproj.txt"]
    assert hf_projector(paths, "M-Q4_K_M.gguf") == "mmproj-BF16.gguf"
    assert hf_projector(paths, "M-F32.gguf") == "mmproj-F32.gguf"
    assert hf_projector(paths, "Q8_0/M-Q8_0-00001-of-00002.gguf") == "Q8_0/mmproj-Q8_0.gguf"
    assert hf_projector(paths, "Q4_0/M-Q4_0.gguf") == "mmproj-BF16.gguf"
    assert hf_projector(["MMPROJ-F16.gguf", "x/mmproj.gguf"], "M-Q4_0.gguf") is None


def _fit_json(capsys, *args: str) -> dict:
    assert main(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_hf_counts_the_projector_llama_server_loads_beside_the_model(hub, capsys):
    """llama-server's -hf downloads and loads the repository's mmproj file unless told
    --no-mmproj: fit counted none of it."""
    ref, gpus = "hf:acme/Vis-GGUF:Q8_0", ("--gpus", "24GiB")
    mm = "hf:acme/Vis-GGUF:mmproj-Vis-F16.gguf"  # F16 nearest Q8_0's bits; other/ is not above
    auto = _fit_json(capsys, ref, *gpus)
    named = _fit_json(capsys, ref, *gpus, "--mmproj", mm)
    bare = _fit_json(capsys, ref, *gpus, "--no-mmproj")
    assert [p["path"] for p in auto["parts"]] == [mm] and not bare.get("parts")
    totals = [[d["total_bytes"] for d in r["devices"]] for r in (auto, named, bare)]
    assert totals[0] == totals[1] and totals[0][0] > totals[2][0]
    note = "-hf also loads mmproj-Vis-F16.gguf (2.7 MiB), counted as --mmproj; --no-mmproj"
    assert any(n.startswith(note) for n in auto["notes"])
    assert not any("-hf also" in n for n in named.get("notes", []) + bare.get("notes", []))
    assert main(["fit", ref, *gpus]) == 0
    assert f"note: {note} leaves it out" in capsys.readouterr().out


def test_a_projector_given_by_url_is_counted_as_mmproj_counts_it(hub, capsys):
    """-mmu URL: llama-server downloads and loads it; fit counted no projector."""
    ref, gpus = "hf:acme/Vis-GGUF:Q8_0", ("--gpus", "24GiB")
    url = f"{hub.url}/files/mmproj.gguf"
    by_url = _fit_json(capsys, ref, *gpus, "-mmu", url)
    named = _fit_json(capsys, ref, *gpus, "--mmproj", url)
    assert [p["path"] for p in by_url["parts"]] == [url]
    totals = [[d["total_bytes"] for d in r["devices"]] for r in (by_url, named)]
    assert totals[0] == totals[1]
    assert not any("-hf also" in n for n in by_url.get("notes", []))


def test_a_repositorys_projector_that_is_none_is_said_as_hfs_own(hub, capsys):
    """It was blamed on --mmproj, which the user had not given."""
    ref, gpus = "hf:acme/Fake-GGUF:Q8_0", ("--gpus", "24GiB")
    assert main(["fit", ref, *gpus]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "lltui: fit: -hf also loads mmproj-Fake.gguf, which is no multimodal projector (no "
        "clip.* keys): llama-server fails to load it; --no-mmproj leaves it out"
    )
    assert main(["fit", ref, *gpus, "--no-mmproj"]) == 0


def test_hf_projector_left_out_by_the_environment(hub, capsys, monkeypatch):
    ref, gpus = "hf:acme/Vis-GGUF:Q8_0", ("--gpus", "24GiB")
    bare = _fit_json(capsys, ref, *gpus, "--no-mmproj")
    monkeypatch.setenv("LLAMA_ARG_NO_MMPROJ_AUTO", "1")  # as llama-server reads it
    off = _fit_json(capsys, ref, *gpus)
    assert not off.get("parts") and off["devices"][0] == bare["devices"][0]


def test_quant_best_ranks_each_file_beside_its_projector(hub, capsys):
    # room for Q8_0 alone at its trained context, not with its projector beside it
    gpus = ("--gpus", "18MiB", "--margin", "0", "--best", "gpu-only", "--json")
    assert main(["quant", "hf:acme/Vis-GGUF", *gpus, "--no-mmproj"]) == 0
    bare = {q["quant"]: q for q in json.loads(capsys.readouterr().out)["quants"]}
    assert main(["quant", "hf:acme/Vis-GGUF", *gpus]) == 0
    data = json.loads(capsys.readouterr().out)
    auto = {q["quant"]: q for q in data["quants"]}
    assert bare["Q8_0"]["max_ctx"] == 4096 > auto["Q8_0"]["max_ctx"]
    # each file beside the projector llama.cpp picks for it: the nearest in bits
    assert sorted(n.split(",")[0] for n in data["notes"] if n.startswith("-hf")) == [
        "-hf also loads mmproj-Vis-F16.gguf (2.7 MiB) beside Q8_0",
        "-hf also loads mmproj-Vis-F32.gguf (639.6 KiB) beside F32",
    ]
    assert "-hf also" not in json.dumps(bare)


def test_a_repository_is_listed_with_its_quants_and_sizes(hub, capsys):
    assert main(["quant", "hf:acme/Big-GGUF"]) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out and "4.0 GiB" in out and "IQ4_XS" in out
    assert "mmproj" in out and "README" not in out
    assert main(["quant", f"hf:acme/Big-GGUF@{COMMIT}", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kinds = {m["file"]: (m["quant"], m["kind"]) for m in data["models"]}
    assert kinds == {
        "Big-Q4_K_M.gguf": ("Q4_K_M", "model"),
        "Big-IQ4_XS.gguf": ("IQ4_XS", "model"),
        "mmproj-Big-F16.gguf": ("F16", "mmproj"),
    }
    assert data["models"][0]["reference"] == f"hf:acme/Big-GGUF:Big-Q4_K_M.gguf@{COMMIT}"
    assert main(["fit", "hf:acme/Big-GGUF", "--gpus", "24GiB"]) == 2
    out, err = capsys.readouterr()
    assert "Q4_K_M" in out and "choose one" in out
    assert len(err.strip().splitlines()) == 1 and "name a quantization" in err


def test_a_revision_that_does_not_exist(hub, capsys):
    assert main(["fit", "hf:acme/Big-GGUF:Q4_K_M@nope", "--gpus", "24GiB"]) == 2
    assert "no such revision" in capsys.readouterr().err


def test_the_fit_view_reads_remote_references(hub):
    from lltui.app.state.fit import FitRequest, compute

    out = compute(FitRequest(1, "hf:acme/Big-GGUF:Q4_K_M", {}, "", "24GiB"), None)
    assert out.error is None and out.result is not None
    hub.clear()  # a form edit estimates again without asking the network
    out = compute(FitRequest(3, "hf:acme/Big-GGUF:Q4_K_M", {"ctx": "8192"}, "", "24GiB"), None)
    assert out.error is None and out.result is not None and hub.log == []
    out = compute(FitRequest(2, "hf:acme/Big-GGUF", {}, "", "24GiB"), None)
    assert out.error is not None and "Q4_K_M" in out.error and "\n" not in out.error


def test_hf_references_without_huggingface_hub_say_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(RemoteError, match=r"pip install 'lltui\[hf\]'"):
        read_remote("hf:acme/Big-GGUF:Q4_K_M")


def test_the_oracle_says_it_needs_the_file(hub, capsys):
    assert main(["fit", f"{hub.url}/files/one.gguf", "--gpus", "cpu", "--oracle", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "download the model first" in json.dumps(data["oracle"])


def test_the_token_stays_on_the_hub_when_a_file_is_redirected_to_storage(hub, monkeypatch):
    monkeypatch.setattr(hf_hub, "token", lambda: TOKEN)
    hub.cdn = True
    m = read_remote("hf:acme/Gated-GGUF:Q8_0").model
    assert m.path == "hf:acme/Gated-GGUF:Gated-Q8_0.gguf"
    resolve, storage = hub.hits("/resolve/"), hub.hits("/cdn/")
    assert resolve and all(h.status == 302 and h.auth == f"Bearer {TOKEN}" for h in resolve)
    assert storage and all(h.status == 206 and h.auth is None for h in storage)


def test_a_server_that_refuses_head_is_read_by_ranges(hub):
    hub.head = False
    m = read_remote(f"{hub.url}/files/one.gguf").model
    assert m.architecture == "llama"
    assert [h.status for h in hub.hits("/files/")][:2] == [405, 206]
    with pytest.raises(RemoteError, match=r"not found \(HTTP 404\)"):
        read_remote(f"{hub.url}/files/gone.gguf")


def test_the_python_api_takes_remote_references(hub, small_models):
    from lltui.api import estimate_model_vram

    here = estimate_model_vram(str(small_models["one"]), None, 2048)
    assert estimate_model_vram(f"{hub.url}/files/one.gguf", None, 2048) == here
    # the projector llama-server's -hf loads beside it is counted
    assert estimate_model_vram("hf:acme/Big-GGUF:IQ4_XS", None, 2048) > here
    split = estimate_model_vram(str(small_models["part1"]), None, 2048)
    assert estimate_model_vram("hf:acme/Split-GGUF:Q8_0", None, 2048) == split


def test_the_listings_choice_names_one_model_and_keeps_the_revision():
    from lltui.core.gguf.refs import RepoFile, listing_lines, repo_models

    rev = "0123456789abcdef0123456789abcdef01234567"
    one = repo_models([RepoFile("M-F16.gguf", 10), RepoFile("M-Q8_0.gguf", 5)])
    assert (
        listing_lines(f"hf:acme/M@{rev}", one)[-1] == f"choose one: lltui fit hf:acme/M:F16@{rev}"
    )
    # two files of one quant: the tag picks the first (a/), so b/'s file is named
    two = repo_models([RepoFile("a/M-Q4_0.gguf", 5), RepoFile("b/M-Q4_0.gguf", 6)])
    assert (
        listing_lines("hf:acme/M:Q4_0", two)[-1] == "choose one: lltui fit hf:acme/M:b/M-Q4_0.gguf"
    )


@pytest.mark.parametrize(("status", "code"), [(500, 1), (503, 1), (404, 2), (403, 2)])
def test_a_hub_that_fails_is_exit_1_a_reference_it_refuses_exit_2(status, code):
    """RemoteError's codes: 1 where the network or server failed (as a plain URL's 5xx is),
    2 where the reference names nothing readable; the hub's 5xx was 2."""
    import httpx
    from huggingface_hub import errors

    response = httpx.Response(status, request=httpx.Request("GET", "http://127.0.0.1/api"))
    err = hf_hub.hub_error("hf:a/b", errors.HfHubHTTPError("x", response=response), None)
    assert err.code == code and str(err) == f"hf:a/b: the hub answered HTTP {status}"


def test_a_server_that_gives_no_size_is_its_failure_exit_1(capsys):
    """A range answered with an unknown total ("bytes 0-67/*"): a server's failure
    (exit 1), not bad input (2)."""
    import http.server
    import threading

    class NoSize(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(200)
            self.end_headers()

        def do_GET(self) -> None:
            body = b"GGUF" + b"\0" * 64
            self.send_response(206)
            self.send_header("Content-Range", f"bytes 0-{len(body) - 1}/*")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NoSize)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/m.gguf"
        assert main(["fit", url, "--gpus", "24GiB"]) == 1
    finally:
        server.shutdown()
    assert "did not say how large" in capsys.readouterr().err


def test_a_model_of_no_layers_says_so(tmp_path, capsys):
    path = gf.write_sparse(tmp_path / "zero.gguf", gf.llama_spec(n_layer=0), "Q4_0")
    assert main(["fit", str(path), "--gpus", "24GiB"]) == 2
    assert "llama.block_count is 0" in capsys.readouterr().err


def test_a_projector_files_share_is_read_once(hub, monkeypatch):
    """Big-GGUF's two files both go beside mmproj-Big-F16.gguf: one read of it, not one each."""
    from lltui.sources.models import remote

    real, read = remote._read_one, []

    def counted(client, listing, chosen, tok, stats):
        read.append(chosen.path)
        return real(client, listing, chosen, tok, stats)

    monkeypatch.setattr(remote, "_read_one", counted)
    got = remote.read_repo_quants("hf:acme/Big-GGUF", projector=True)
    assert [q.projector is not None for q in got.quants] == [True, True]
    assert read.count("mmproj-Big-F16.gguf") == 1


def test_hfd_picks_the_draft_as_llama_cpp_does():
    """common/download.cpp: a sidecar (mtp-, dspark-, dflash-, eagle3-) before the model when
    no --spec-type is given; the tag, else Q4_K_M, then Q8_0, then the first model."""
    paths = ["A-Q8_0.gguf", "B-Q4_K_M.gguf", "mmproj-F16.gguf", "x/C-F16.gguf"]
    assert hf_draft_file(paths, "", ()) == "B-Q4_K_M.gguf"
    assert hf_draft_file(paths, "f16", ()) == "x/C-F16.gguf"
    assert hf_draft_file(paths, "Q5_K", ()) is None
    assert hf_draft_file(["Z-F32.gguf", "mmproj-F32.gguf"], "", ()) == "Z-F32.gguf"
    split = ["S-Q8_0-00002-of-00002.gguf", "S-Q8_0-00001-of-00002.gguf"]
    assert hf_draft_file(split, "", ()) == "S-Q8_0-00001-of-00002.gguf"
    heads = ["M-Q8_0.gguf", "dflash-M-Q8_0.gguf", "mtp-M-F16.gguf", "mtp-M-Q8_0.gguf"]
    assert hf_draft_file(heads, "", ()) == "mtp-M-Q8_0.gguf"  # nearest the model's bits
    assert hf_draft_file(heads, "F16", ()) == "mtp-M-F16.gguf"  # the tag's own (no model)
    assert hf_draft_file(heads, "", ("draft-dflash",)) == "dflash-M-Q8_0.gguf"
    assert hf_draft_file(heads, "", ("draft-simple",)) == "M-Q8_0.gguf"


def test_hfd_counts_the_draft_llama_server_downloads(hub, capsys, monkeypatch):
    """-hfd OWNER/REPO[:QUANT] (--hf-repo-draft) loads a draft model as -md does: fit
    counted nothing of it."""
    base = ["hf:acme/Vis-GGUF:Q8_0", "--no-mmproj", "--gpus", "24GiB"]

    def totals(*args: str) -> list[int]:
        return [d["total_bytes"] for d in _fit_json(capsys, *base, *args)["devices"]]

    as_md = totals("-md", "hf:acme/Draft-GGUF:F32")
    for draft in (["-hfd", "acme/Draft-GGUF:F32"], ["--hf-repo-draft", "acme/Draft-GGUF:F32"],
                  ["-hfd", "acme/Draft-GGUF", "-md", "Draft-F32.gguf"]):  # fmt: skip
        got = _fit_json(capsys, *base, *draft)
        assert [p["path"] for p in got["parts"]] == ["hf:acme/Draft-GGUF:Draft-F32.gguf"]
        assert [d["total_bytes"] for d in got["devices"]] == as_md
    picked = _fit_json(capsys, *base, "-hfd", "acme/Draft-GGUF")  # no Q4_K_M: Q8_0
    assert [p["path"] for p in picked["parts"]] == ["hf:acme/Draft-GGUF:Draft-Q8_0.gguf"]
    head = _fit_json(capsys, *base, "-hfd", "acme/Mtp-GGUF")  # the MTP head, not the model
    assert [p["path"] for p in head["parts"]] == ["hf:acme/Mtp-GGUF:mtp-M-F32.gguf"]
    monkeypatch.setenv("LLAMA_ARG_SPEC_DRAFT_HF_REPO", "acme/Draft-GGUF:F32")
    assert totals() == as_md
    monkeypatch.delenv("LLAMA_ARG_SPEC_DRAFT_HF_REPO")
    assert main(["fit", *base, "-hfd", "acme/Draft-GGUF:Q5_K"]) == 2
    assert capsys.readouterr().err.strip() == (
        "lltui: fit: -hfd acme/Draft-GGUF:Q5_K: no GGUF model of quantization Q5_K in this "
        "repository to draft with"
    )


def test_hf_counts_the_draft_sidecar_a_spec_type_loads(hub, capsys):
    """-hf OWNER/REPO:Q8_0 --spec-type draft-mtp (no -md, no -hfd) downloads the repository's
    mtp- head of the tag and loads it as the draft: fit counted none of it, and took the
    head for a second Q8_0 model ("2 files match Q8_0")."""
    ref, gpus = "hf:acme/Heads-GGUF:Q8_0", ("--gpus", "24GiB", "--no-mmproj")
    head = "hf:acme/Heads-GGUF:mtp-H-Q8_0.gguf"
    got = _fit_json(capsys, ref, *gpus, "--spec-type", "draft-mtp")
    as_md = _fit_json(capsys, ref, *gpus, "--spec-type", "draft-mtp", "-md", head)
    assert [p["path"] for p in got["parts"]] == [head]
    assert [d["total_bytes"] for d in got["devices"]] == [
        d["total_bytes"] for d in as_md["devices"]
    ]
    note = "-hf also loads mtp-H-Q8_0.gguf (10.5 MiB) as the draft of --spec-type draft-mtp"
    assert any(n.startswith(note) for n in got["notes"])
    # of several types, the MTP head before Eagle3's; with the type alone, its sidecar
    both = _fit_json(capsys, ref, *gpus, "--spec-type", "draft-eagle3,draft-mtp")
    assert [p["path"] for p in both["parts"]] == [head]
    eagle = _fit_json(capsys, ref, *gpus, "--spec-type", "draft-eagle3")
    assert [p["path"] for p in eagle["parts"]] == ["hf:acme/Heads-GGUF:eagle3-H-Q8_0.gguf"]
    # none with no --spec-type, a type it ships none for, or a draft named otherwise
    for more in ([], ["--spec-type", "draft-dflash"], ["-hfd", "acme/Draft-GGUF:F32"]):
        out = _fit_json(capsys, ref, *gpus, *more)
        assert not any(p["path"] == head for p in out.get("parts", [])), more
        assert not any("as the draft" in n for n in out.get("notes", [])), more


def test_draft_sidecars_are_no_models_of_the_repository():
    from lltui.core.gguf.refs import hf_sidecar

    heads = ["H-Q8_0.gguf", "mtp-H-Q8_0.gguf", "x/dspark-H-F16.gguf", "mmproj-H-F16.gguf"]
    # an importance matrix is no model either (quant --best had ranked it)
    models = repo_models([RepoFile(p, 1) for p in [*heads, "H.imatrix.gguf"]])
    assert [(m.path, m.kind) for m in models] == [
        ("H-Q8_0.gguf", "model"),
        ("H.imatrix.gguf", "imatrix"),
        ("mmproj-H-F16.gguf", "mmproj"),
        ("mtp-H-Q8_0.gguf", "draft"),
        ("x/dspark-H-F16.gguf", "draft"),
    ]
    head = tag_model(models, "Q8_0")
    assert head is not None and head.path == "H-Q8_0.gguf"
    assert hf_sidecar(heads, "H-Q8_0.gguf", "Q8_0", ("draft-mtp",)) == "mtp-H-Q8_0.gguf"
    assert hf_sidecar(heads, "H-Q8_0.gguf", "", ("draft-simple",)) is None
    assert hf_sidecar(heads, "H-Q8_0.gguf", "", ("draft-dspark",)) is None  # not above x/


def test_a_repository_with_a_preset_is_no_model_to_count(hub, small_models, capsys):
    """A preset.ini at the repository's root: llama-server's -hf downloads only it and runs
    as a router of the models it names; fit counted the tag's file, which it never loads."""
    assert main(["fit", "hf:acme/Preset-GGUF:Q8_0", "--gpus", "24GiB"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "lltui: fit: hf:acme/Preset-GGUF: ships a preset.ini: llama-server's -hf downloads "
        "only it and serves its models as a router, none of this repository's files; plan "
        "them with lltui fit --models-preset preset.ini"
    )
    # with no tag too (llama-server looks no further): it was the listing's choice to make
    assert main(["fit", "hf:acme/Preset-GGUF", "--gpus", "24GiB"]) == 2
    assert capsys.readouterr().err.strip() == err.replace("fit: ", "", 1)
    # -hfd of such a repository downloads only the preset: no draft, and llama-server fails
    # ('failed to load draft model'); lltui counted P-Q8_0.gguf. With -md, -md's path loads
    base = ["hf:acme/Vis-GGUF:Q8_0", "--no-mmproj", "--gpus", "24GiB"]
    assert main(["fit", *base, "-hfd", "acme/Preset-GGUF"]) == 2
    assert capsys.readouterr().err.strip() == (
        "lltui: fit: -hfd acme/Preset-GGUF: ships a preset.ini: llama-server's -hfd downloads "
        "only it and loads no draft, then fails ('failed to load draft model'); -md FILE or "
        "another -hfd names one"
    )
    local = str(small_models["one32"])
    got = _fit_json(capsys, *base, "-hfd", "acme/Preset-GGUF", "-md", local)
    assert [p["path"] for p in got["parts"]] == [local]
    assert main(["fit", *base, "-hfd", "acme/Preset-GGUF", "-md", "P-Q8_0.gguf"]) == 2
    assert "lltui: fit: -md P-Q8_0.gguf: " in capsys.readouterr().err  # not the hub's file
    # quant --best ranked -hf REPO:Q8_0 lines, each of which runs the preset's router
    assert main(["quant", "hf:acme/Preset-GGUF", "--gpus", "24GiB", "--best", "gpu-only"]) == 2
    assert capsys.readouterr().err.strip() == err.replace("fit: ", "", 1)


def test_quant_best_ranks_each_file_beside_its_draft_sidecar(hub, capsys, monkeypatch):
    """quant hf:REPO --best --spec-type draft-mtp: -hf REPO:QUANT loads the tag's MTP head (else
    the nearest in bits) as the draft; each row was ranked with none. Each file is now ranked
    as -md with its own head would rank it, and a head two files share is read once."""
    from lltui.sources.models import remote

    real, read = remote._read_one, []

    def counted(client, listing, chosen, tok, stats):
        read.append(chosen.path)
        return real(client, listing, chosen, tok, stats)

    monkeypatch.setattr(remote, "_read_one", counted)
    ref, args = "hf:acme/Twins-GGUF", ("--gpus", "30MiB", "--margin", "0", "--best", "context")

    def max_ctx(*more: str) -> tuple[dict[str, int], list[str]]:
        assert main(["quant", ref, *args, "--json", *more]) == 0
        data = json.loads(capsys.readouterr().out)
        return {q["file"]: q["max_ctx"] for q in data["quants"]}, data.get("notes", [])

    bare, _ = max_ctx()
    read.clear()
    auto, notes = max_ctx("--spec-type", "draft-mtp")
    assert read.count("mtp-T-Q8_0.gguf") == 1  # beside Q8_0 (its tag's) and Q8_K_XL (8 bits)
    as_md = {
        head: max_ctx("--spec-type", "draft-mtp", "-md", f"{ref}:{head}")[0]
        for head in ("mtp-T-F32.gguf", "mtp-T-Q8_0.gguf")
    }
    assert auto == {
        "T-F32.gguf": as_md["mtp-T-F32.gguf"]["T-F32.gguf"],
        "T-Q8_0.gguf": as_md["mtp-T-Q8_0.gguf"]["T-Q8_0.gguf"],
        "T-Q8_K_XL.gguf": as_md["mtp-T-Q8_0.gguf"]["T-Q8_K_XL.gguf"],
    }
    assert auto["T-Q8_0.gguf"] < bare["T-Q8_0.gguf"]
    assert sorted(n.split(" as the")[0] for n in notes if n.startswith("-hf also")) == [
        "-hf also loads mtp-T-F32.gguf (2.8 MiB) beside F32",
        "-hf also loads mtp-T-Q8_0.gguf (10.5 MiB) beside Q8_0, Q8_K_XL",
    ]
