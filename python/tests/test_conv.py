"""Convolutions and pooling against PyTorch: torch.nn.functional.conv1d/2d/3d
and max/avg pooling, their values and gradients; nn.Conv2d against
torch.nn.Conv2d with the same weights; and a small CNN (two convolutions,
max pooling, global average pooling, a linear head) trained for 20 steps
with the same losses."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import strata
import strata.nn.functional as SF
from conftest import close, rng

CASES = [
    # (rank, input shape, weight shape, stride, padding, dilation, groups)
    (1, (2, 3, 11), (4, 3, 3), 2, 1, 1, 1),
    (1, (1, 4, 9), (4, 1, 2), 1, 0, 3, 4),
    (2, (2, 3, 9, 8), (5, 3, 3, 3), 1, 1, 1, 1),
    (2, (2, 4, 10, 9), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2),
    (2, (1, 6, 7, 7), (6, 1, 3, 3), 2, 1, 1, 6),  # depthwise
    (2, (3, 8, 6, 6), (4, 8, 1, 1), 1, 0, 1, 1),  # pointwise
    (2, (4, 5), (2, 4, 3, 2), 1, 0, 1, 1),  # unbatched: [C, H, W]
    (3, (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), (1, 2, 1), (1, 0, 1), 1, 1),
]


@pytest.mark.parametrize("rank,xs,ws,stride,padding,dilation,groups", CASES)
def test_conv_values_and_gradients_match_torch(rank, xs, ws, stride, padding, dilation, groups):
    if len(xs) == 2:
        xs = (ws[1],) + xs  # unbatched input [C, H, W]
    r = rng(rank + len(xs))
    x = r.standard_normal(xs).astype(np.float32)
    w = r.standard_normal(ws).astype(np.float32) * 0.3
    b = r.standard_normal(ws[0]).astype(np.float32)
    tconv = getattr(F, f"conv{rank}d")
    sconv = getattr(SF, f"conv{rank}d")
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ty = tconv(tx, tw, tb, stride, padding, dilation, groups)
    weights = torch.tensor(r.standard_normal(tuple(ty.shape)).astype(np.float32))
    (ty * weights).sum().backward()

    def f(x, w, b):
        y = sconv(x, w, b, stride, padding, dilation, groups)
        return (y * strata.tensor(weights.numpy())).sum(), y

    (_, y), grads = strata.value_and_grad(f, argnums=(0, 1, 2), has_aux=True)(
        strata.tensor(x), strata.tensor(w), strata.tensor(b))
    close(y, ty, rtol=1e-4, atol=1e-4)
    close(grads, (tx.grad, tw.grad, tb.grad), rtol=1e-4, atol=1e-4)


def test_conv2d_module_matches_torch_with_the_same_weights():
    conv = strata.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    ref = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(conv.weight.numpy()))
        ref.bias.copy_(torch.tensor(conv.bias.numpy()))
    x = rng(3).standard_normal((2, 3, 9, 9)).astype(np.float32)
    close(conv(strata.tensor(x)), ref(torch.tensor(x)), rtol=1e-4, atol=1e-5)
    assert conv.weight.shape == (4, 3, 3, 3)
    bound = 1 / np.sqrt(3 * 9)  # PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.abs(conv.weight.numpy()).max() <= bound
    assert np.abs(conv.weight.numpy()).max() > 0.8 * bound


def test_bad_convolution_arguments_raise_strata_errors():
    x = strata.zeros((1, 4, 5, 5))
    with pytest.raises(strata.Error, match=r"\[conv2d\] input f32\[1,4,5,5\] has 4 channels"):
        SF.conv2d(x, strata.zeros((2, 3, 3, 3)))
    with pytest.raises(strata.Error, match="bias must be"):
        SF.conv2d(x, strata.zeros((2, 4, 3, 3)), strata.zeros((3,)))
    with pytest.raises(strata.Error, match="larger than the padded input"):
        SF.conv2d(x, strata.zeros((2, 4, 7, 7)))
    with pytest.raises(TypeError, match="stride takes an int or a tuple"):
        SF.conv2d(x, strata.zeros((2, 4, 3, 3)), stride="2")
    with pytest.raises(strata.Error, match="must divide by groups"):
        strata.nn.Conv2d(4, 6, 3, groups=4)


POOLS = [
    # (torch name, input shape, kwargs)
    ("max_pool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", (1, 2, 7, 7), dict(kernel_size=2, stride=1, dilation=2)),
    ("max_pool1d", (2, 3, 10), dict(kernel_size=3, stride=3)),
    ("max_pool3d", (1, 2, 4, 6, 5), dict(kernel_size=(2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 0))),
    ("avg_pool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("avg_pool1d", (2, 2, 9), dict(kernel_size=4, stride=2)),
    ("avg_pool3d", (1, 2, 4, 4, 6), dict(kernel_size=2)),
    ("max_pool2d", (3, 6, 6), dict(kernel_size=2)),  # unbatched
    # ceil_mode: the windows past the input, and the one torch drops because
    # it would start in the right padding (7 + 2 - 3 = 6 steps of 2 from -1).
    ("max_pool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, ceil_mode=True)),
    ("max_pool1d", (1, 2, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("max_pool3d", (1, 1, 5, 6, 4), dict(kernel_size=2, stride=(3, 2, 3), ceil_mode=True)),
    ("avg_pool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool2d", (2, 3, 10, 7), dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True,
                                       count_include_pad=False)),
    ("avg_pool1d", (2, 2, 9), dict(kernel_size=4, stride=3, ceil_mode=True)),
    ("avg_pool1d", (1, 2, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
]


@pytest.mark.parametrize("name,xs,kwargs", POOLS)
def test_pooling_values_and_gradients_match_torch(name, xs, kwargs):
    x = rng(len(xs)).standard_normal(xs).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = getattr(F, name)(tx, **kwargs)
    weights = torch.tensor(rng(9).standard_normal(tuple(ty.shape)).astype(np.float32))
    (ty * weights).sum().backward()
    sfn = getattr(SF, name)
    g = strata.grad(lambda v: (sfn(v, **kwargs) * strata.tensor(weights.numpy())).sum())(
        strata.tensor(x))
    close(sfn(strata.tensor(x), **kwargs), ty, rtol=1e-5, atol=1e-6)
    close(g, tx.grad, rtol=1e-5, atol=1e-6)


def test_pooling_modules_take_ceil_mode():
    x = rng(5).standard_normal((1, 2, 7, 7)).astype(np.float32)
    for s_pool, t_pool in ((strata.nn.MaxPool2d(2, ceil_mode=True), torch.nn.MaxPool2d(2, ceil_mode=True)),
                           (strata.nn.AvgPool2d(3, 2, 1, ceil_mode=True),
                            torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True))):
        close(s_pool(strata.tensor(x)), t_pool(torch.tensor(x)))


@pytest.mark.parametrize("name,xs,kwargs", [p for p in POOLS if p[0].startswith("max")])
def test_max_pooling_indices_match_torch(name, xs, kwargs):
    x = rng(len(xs) + 1).standard_normal(xs).astype(np.float32)
    x[..., 1] = x[..., 0]  # ties inside windows: torch keeps the first
    values, indices = getattr(SF, name)(strata.tensor(x), return_indices=True, **kwargs)
    t_values, t_indices = getattr(F, name)(torch.tensor(x), return_indices=True, **kwargs)
    close(values, t_values, rtol=0, atol=0)
    assert indices.dtype == strata.int64
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())


def test_avg_pooling_divisor_override_matches_torch():
    x = rng(3).standard_normal((2, 3, 7, 6)).astype(np.float32)
    for kwargs in (dict(kernel_size=3, stride=2, padding=1, divisor_override=5),
                   dict(kernel_size=2, ceil_mode=True, divisor_override=3)):
        tx = torch.tensor(x, requires_grad=True)
        ty = F.avg_pool2d(tx, **kwargs)
        ty.sum().backward()
        g = strata.grad(lambda v: SF.avg_pool2d(v, **kwargs).sum())(strata.tensor(x))
        close(SF.avg_pool2d(strata.tensor(x), **kwargs), ty, rtol=1e-6, atol=1e-6)
        close(g, tx.grad, rtol=1e-6, atol=1e-6)


def test_bad_pooling_options_raise():
    x = strata.zeros((1, 2, 6, 6))
    with pytest.raises(strata.Error, match="divisor_override must not be zero"):
        SF.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(strata.Error, match=r"\[avg_pool2d\] padding \(2\) must be at most half"):
        SF.avg_pool2d(x, 2, padding=2)


class SmallCnn(strata.nn.Module):
    """Two convolutions, max pooling, global average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = strata.nn.Conv2d(1, 4, 3, padding=1, key=strata.random_key(1))
        self.conv2 = strata.nn.Conv2d(4, 8, 3, stride=2, padding=1, key=strata.random_key(2))
        self.head = strata.nn.Linear(8, 3, key=strata.random_key(3))

    def forward(self, x):
        h = SF.max_pool2d(strata.relu(self.conv1(x)), 2)
        h = strata.relu(self.conv2(h))
        return self.head(h.mean(dim=(2, 3)))


def test_a_small_cnn_trains_with_torchs_losses():
    model = SmallCnn()
    twin = torch.nn.ModuleDict({
        "conv1": torch.nn.Conv2d(1, 4, 3, padding=1),
        "conv2": torch.nn.Conv2d(4, 8, 3, stride=2, padding=1),
        "head": torch.nn.Linear(8, 3)})
    with torch.no_grad():
        for name, p in twin.named_parameters():
            p.copy_(torch.tensor(dict(model.named_parameters())[name].numpy()))

    def forward(x):
        h = F.max_pool2d(torch.relu(twin["conv1"](x)), 2)
        h = torch.relu(twin["conv2"](h))
        return twin["head"](h.mean(dim=(2, 3)))

    x = rng(7).standard_normal((6, 1, 8, 8)).astype(np.float32)
    target = np.array([0, 1, 2, 1, 0, 2])
    opt = strata.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    topt = torch.optim.SGD(twin.parameters(), lr=0.2, momentum=0.9)
    losses = []
    for _ in range(20):
        for p in model.parameters():
            p.requires_grad_()
        loss = SF.cross_entropy(model(strata.tensor(x)), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        tloss = F.cross_entropy(forward(torch.tensor(x)), torch.tensor(target))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        close(loss, tloss, rtol=1e-4, atol=1e-5)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses  # it learns
    close({n: p for n, p in model.named_parameters()}, dict(twin.named_parameters()),
          rtol=1e-3, atol=1e-4)
