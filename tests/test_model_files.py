from lltui.sources.models.files import default_roots, find_models


def touch(path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)


def test_finds_models_splits_once_and_skips_projectors(tmp_path):
    root = tmp_path / "models"
    touch(root / "a" / "small.gguf", 10)
    touch(root / "b" / "big-00001-of-00002.gguf", 100)
    touch(root / "b" / "big-00002-of-00002.gguf", 50)
    touch(root / "b" / "mmproj-f16.gguf", 500)
    touch(root / "c" / "notes.txt", 5)
    touch(root / ".hidden" / "x.gguf", 5)
    models = find_models([root, tmp_path / "missing"])
    assert [m.path.rsplit("/", 1)[-1] for m in models] == ["big-00001-of-00002.gguf", "small.gguf"]
    assert (models[0].size, models[0].parts) == (150, 2)


def test_default_roots_include_the_usual_places(tmp_path):
    env = {"HOME": str(tmp_path), "LLTUI_MODELS": "/data/gguf"}
    roots = [str(r) for r in default_roots(env)]
    assert roots[0] == "/data/gguf"
    assert str(tmp_path / "models") in roots
    assert str(tmp_path / ".cache" / "huggingface" / "hub") in roots
    assert str(tmp_path / ".lmstudio" / "models") in roots
