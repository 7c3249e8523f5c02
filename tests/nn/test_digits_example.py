"""examples/digits.py: the MLP on scikit-learn's digits trains to >= 97% test accuracy and
writes its loss curve (a short run: 10 epochs instead of the example's 20)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits.py"

for _module, _dist in (("sklearn", "scikit-learn"), ("tqdm", "tqdm"), ("matplotlib", "matplotlib")):
    pytest.importorskip(
        _module,
        reason=f"examples/digits.py needs {_dist}: pip install scikit-learn tqdm matplotlib",
    )


def _load_example():
    spec = importlib.util.spec_from_file_location("digits_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_example_reaches_97_percent_and_writes_png(tmp_path, capsys):
    digits = _load_example()
    out = tmp_path / "loss.png"
    result = digits.main(["--epochs", "10", "--device", "cpu", "--out", str(out), "--no-progress"])
    assert result["accuracy"] >= 0.97, result
    assert result["total"] == 450 and result["device"] == "cpu"
    assert len(result["epoch_losses"]) == 10
    assert result["epoch_losses"][-1] < result["epoch_losses"][0] / 10  # it learned
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    printed = capsys.readouterr().out
    assert f"test accuracy: {result['accuracy']:.2%}" in printed and str(out) in printed


def test_digits_example_rejects_cuda_without_gpu():
    import tensorplay as tp

    if tp.cuda.is_available():
        pytest.skip("a GPU is present: --device cuda is valid here")
    digits = _load_example()
    with pytest.raises(SystemExit, match="CUDA is not available"):
        digits.pick_device("cuda")
    assert digits.pick_device("auto") == "cpu"
