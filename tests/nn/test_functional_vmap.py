"""``embedding``, ``one_hot``, ``nll_loss`` and ``cross_entropy`` inside ``vmap`` and in
per-sample gradients, compared with torch.func; bad indices anywhere in the batch raise."""

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402
from torch.func import vmap as torch_vmap  # noqa: E402

RNG = np.random.RandomState(0)
WEIGHT = RNG.randn(6, 3)
INDICES = np.array([[0, 5, 2], [1, 1, 4], [3, 0, 0], [5, 2, 1]])
LOGITS = RNG.randn(4, 5, 6)  # 4 samples of 5 rows of 6 classes
TARGETS = np.array([[0, 1, 2, 3, 5], [5, 4, 0, 1, 2], [2, 2, 2, 2, 2], [1, 0, 5, 4, 3]])


def test_embedding_under_vmap_matches_torch():
    got = tp.vmap(lambda i: F.embedding(i, tp.tensor(WEIGHT)))(tp.tensor(INDICES))
    expected = torch_vmap(lambda i: TF.embedding(i, torch.tensor(WEIGHT)))(torch.tensor(INDICES))
    np.testing.assert_allclose(got.numpy(), expected.numpy())


@pytest.mark.parametrize("bad", [6, -1])
def test_embedding_under_vmap_raises_for_a_bad_index_in_any_sample(bad):
    idx = INDICES.copy()
    idx[3, 2] = bad
    with pytest.raises(IndexError):
        torch_vmap(lambda i: TF.embedding(i, torch.tensor(WEIGHT)))(torch.tensor(idx))
    with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds"):
        tp.vmap(lambda i: F.embedding(i, tp.tensor(WEIGHT)))(tp.tensor(idx))


def test_one_hot_under_vmap_matches_torch():
    got = tp.vmap(lambda i: F.one_hot(i, 7))(tp.tensor(INDICES))
    expected = torch_vmap(lambda i: TF.one_hot(i, 7))(torch.tensor(INDICES))
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_one_hot_under_vmap_needs_num_classes_as_in_torch():
    with pytest.raises(RuntimeError, match="num_classes"):
        torch_vmap(lambda i: TF.one_hot(i))(torch.tensor(INDICES))
    with pytest.raises(RuntimeError, match="provide an explicit positive num_classes"):
        tp.vmap(lambda i: F.one_hot(i))(tp.tensor(INDICES))


def test_one_hot_under_vmap_raises_for_a_class_out_of_range():
    # (torch.vmap writes nothing for it, silently; here it is an error, as outside vmap)
    with pytest.raises(RuntimeError, match="index 6 is out of bounds"):
        tp.vmap(lambda i: F.one_hot(i, 6))(tp.tensor(INDICES + 1))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 2}],
    ids=["mean", "sum", "none", "ignore_index"],
)
def test_cross_entropy_and_nll_loss_under_vmap_match_torch(kwargs):
    x, y = tp.tensor(LOGITS), tp.tensor(TARGETS)
    tx, ty = torch.tensor(LOGITS), torch.tensor(TARGETS)
    got = tp.vmap(lambda a, b: F.cross_entropy(a, b, **kwargs))(x, y)
    expected = torch_vmap(lambda a, b: TF.cross_entropy(a, b, **kwargs))(tx, ty)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12)
    got = tp.vmap(lambda a, b: F.nll_loss(a.log_softmax(-1), b, **kwargs))(x, y)
    expected = torch_vmap(lambda a, b: TF.nll_loss(a.log_softmax(-1), b, **kwargs))(tx, ty)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12)


def test_cross_entropy_with_weights_and_smoothing_under_vmap_matches_the_loop():
    w = tp.tensor(RNG.rand(6) + 0.5)

    def loss(a, b):
        return F.cross_entropy(a, b, weight=w, label_smoothing=0.1)

    got = tp.vmap(loss)(tp.tensor(LOGITS), tp.tensor(TARGETS))
    expected = [
        TF.cross_entropy(
            torch.tensor(a), torch.tensor(b), weight=torch.tensor(w.numpy()), label_smoothing=0.1
        ).item()
        for a, b in zip(LOGITS, TARGETS)
    ]
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_cross_entropy_under_vmap_raises_for_a_bad_target_in_any_sample():
    targets = TARGETS.copy()
    targets[2, 4] = 6
    with pytest.raises(RuntimeError, match="index 6 is out of bounds"):
        tp.vmap(F.cross_entropy)(tp.tensor(LOGITS), tp.tensor(targets))


def test_per_sample_gradients_with_cross_entropy_and_embedding_match_torch():
    tp.manual_seed(0)
    model = nn.Sequential(nn.Embedding(6, 4), nn.Flatten(0), nn.Linear(12, 5)).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    labels = np.array([0, 4, 2, 1])

    def loss(p, i, y):
        return F.cross_entropy(tp.func.functional_call(model, p, (i,)), y)

    grads = tp.vmap(tp.func.grad(loss), in_dims=(None, 0, 0))(
        params, tp.tensor(INDICES), tp.tensor(labels)
    )

    tparams = {k: torch.tensor(v.numpy()) for k, v in params.items()}

    def torch_loss(p, i, y):
        emb = TF.embedding(i, p["0.weight"]).flatten(0)
        return TF.cross_entropy(TF.linear(emb, p["2.weight"], p["2.bias"]), y)

    expected = torch_vmap(torch.func.grad(torch_loss), in_dims=(None, 0, 0))(
        tparams, torch.tensor(INDICES), torch.tensor(labels)
    )
    assert sorted(grads) == sorted(expected)
    for k in grads:
        np.testing.assert_allclose(grads[k].numpy(), expected[k].numpy(), rtol=1e-10, atol=1e-12)
