"""movedim on 0-d tensors and repeated dims, against PyTorch (issue 13, item 15)."""

from __future__ import annotations

import pytest

import tensorplay as tp


@pytest.mark.parametrize(("src", "dst"), [(0, 0), (-1, -1), (0, -1), ((0,), (0,)), ((), ())])
def test_movedim_of_0d_returns_it(src, dst):
    x = tp.tensor(2.0, requires_grad=True)
    y = tp.movedim(x, src, dst)
    assert y.shape == () and y.item() == 2.0
    (y * 3).backward()
    assert x.grad.item() == 3.0


@pytest.mark.parametrize(
    ("src", "dst", "which"), [((0, 0), (1, 0), "source"), ((0, 1), (1, 1), "destination")]
)
def test_movedim_repeated_dim_raises(src, dst, which):
    with pytest.raises(RuntimeError, match=f"repeated dim in `{which}`"):
        tp.movedim(tp.ones(2, 3), src, dst)


def test_movedim_matches_torch():
    torch = pytest.importorskip("torch")
    for src, dst in [(0, 0), (-1, -1), (1, 0), (1, 0)]:
        for shape in [(), (2, 3)]:
            if not shape and src == 1:
                with pytest.raises(IndexError):
                    torch.movedim(torch.ones(shape), src, dst)
                with pytest.raises(IndexError):
                    tp.movedim(tp.ones(shape), src, dst)
                continue
            want = torch.movedim(torch.ones(shape), src, dst).shape
            assert tuple(tp.movedim(tp.ones(shape), src, dst).shape) == tuple(want)
