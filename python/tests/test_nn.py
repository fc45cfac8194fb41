"""strata.nn and strata.optim against torch.nn and torch.optim."""
import numpy as np
import pytest
import torch

import strata
import strata.nn.functional as SF
from strata import nn
from conftest import close, rng


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(4, 8, key=strata.random_key(1))
        self.norm = nn.LayerNorm(8)
        self.blocks = nn.ModuleList([nn.Linear(8, 8, bias=False, key=strata.random_key(i))
                                     for i in range(2)])
        self.head = nn.Linear(8, 3, key=strata.random_key(9))
        self.register_buffer("scale", strata.tensor(2.0))

    def forward(self, x):
        h = SF.relu(self.norm(self.up(x)))
        for block in self.blocks:
            h = strata.tanh(block(h)) + h
        return self.head(h) * self.scale


def torch_twin(model):
    """The same network in torch, with strata's initial weights."""
    t = torch.nn.ModuleDict({
        "up": torch.nn.Linear(4, 8), "norm": torch.nn.LayerNorm(8),
        "blocks": torch.nn.ModuleList([torch.nn.Linear(8, 8, bias=False) for _ in range(2)]),
        "head": torch.nn.Linear(8, 3)})
    with torch.no_grad():
        for name, p in t.named_parameters():
            p.copy_(torch.tensor(model.state_dict()[name].numpy()))

    def forward(x):
        h = torch.relu(t["norm"](t["up"](x)))
        for block in t["blocks"]:
            h = torch.tanh(block(h)) + h
        return t["head"](h) * 2.0

    return t, forward


def test_modules_name_parameters_with_dots_as_torch():
    model = MLP()
    twin, _ = torch_twin(model)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in twin.named_parameters()]
    assert [n for n, _ in model.named_buffers()] == ["scale"]
    for name, p in model.named_parameters():
        assert p.shape == tuple(dict(twin.named_parameters())[name].shape)


def test_linear_initialization_has_torchs_bounds():
    layer = nn.Linear(64, 32, key=strata.random_key(3))
    w = layer.weight.numpy()
    bound = 1 / np.sqrt(64)
    assert w.min() >= -bound and w.max() <= bound and w.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)
    e = nn.Embedding(100, 16, key=strata.random_key(4)).weight.numpy()
    assert abs(e.mean()) < 0.05 and e.std() == pytest.approx(1, rel=0.05)


def test_forward_backward_and_adamw_steps_match_torch():
    model = MLP()
    twin, forward = torch_twin(model)
    x = rng(1).standard_normal((5, 4)).astype(np.float32)
    target = np.array([0, 2, 1, 1, 0])
    opt = strata.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
    topt = torch.optim.AdamW(twin.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
    for _ in range(3):
        for p in model.parameters():
            p.requires_grad_()
        loss = SF.cross_entropy(model(strata.tensor(x)), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(forward(torch.tensor(x)), torch.tensor(target))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        close(loss, tloss, rtol=1e-5)
    close(model.state_dict(), {**{n: p for n, p in twin.named_parameters()}, "scale": np.float32(2)},
          rtol=1e-4, atol=1e-5)
    assert opt.steps == 3


def test_grad_through_a_module_with_functional_call_matches_backward():
    model = MLP()
    x = strata.tensor(rng(4).standard_normal((5, 4)).astype(np.float32))
    params = {n: p for n, p in model.named_parameters()}
    before = {n: p.numpy().copy() for n, p in params.items()}
    g = strata.grad(lambda p: (nn.functional_call(model, p, x) ** 2).sum())(params)
    for p in model.parameters():
        p.requires_grad_()
    (model(x) ** 2).sum().backward()
    close(g, {n: p.grad for n, p in model.named_parameters()}, rtol=1e-5, atol=1e-6)
    close({n: p for n, p in model.named_parameters()}, before)  # the module is as it was


def test_sgd_with_momentum_and_clipping_match_torch():
    w0 = rng(2).standard_normal((3, 3)).astype(np.float32)
    w = strata.tensor(w0)
    tw = torch.tensor(w0, requires_grad=True)
    opt = strata.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    for step in range(3):
        g = strata.grad(lambda v: (v ** 3).sum())(w)
        grads = [g]
        norm = strata.optim.clip_grad_norm_(grads, 1.0)
        opt.step(grads)
        topt.zero_grad()
        (tw ** 3).sum().backward()
        tnorm = torch.nn.utils.clip_grad_norm_([tw], 1.0)
        topt.step()
        close(norm, tnorm, rtol=1e-5)
    close(w, tw, rtol=1e-5, atol=1e-6)
    # Warm-up counts steps from 0; halfway through the cosine the rate is half.
    assert strata.optim.warmup_cosine_lr(4, 10, 100, 1.0) == pytest.approx(0.5)
    assert strata.optim.warmup_cosine_lr(55, 10, 100, 1.0) == pytest.approx(0.5)
    assert strata.optim.warmup_cosine_lr(100, 10, 100, 1.0, 0.1) == pytest.approx(0.1)


def test_load_state_dict_checks_names_shapes_and_dtypes():
    model = MLP()
    state = {n: strata.zeros_like(t) for n, t in model.state_dict().items()}
    model.load_state_dict(state)
    close(model.up.weight, np.zeros((8, 4), np.float32))
    with pytest.raises(strata.Error, match=r"missing keys \['head.bias'\]"):
        model.load_state_dict({k: v for k, v in state.items() if k != "head.bias"})
    bad = dict(state, **{"up.weight": strata.zeros(4, 8)})
    with pytest.raises(strata.Error, match=r"up.weight: expected shape \(8, 4\)"):
        model.load_state_dict(bad)


def test_apply_layers_is_the_loop_with_the_same_gradients():
    layers = [nn.Linear(6, 6, key=strata.random_key(10 + i)) for i in range(4)]
    x = strata.tensor(rng(3).standard_normal((2, 6)).astype(np.float32))

    def loop(ws):
        h = x
        for i, layer in enumerate(layers):
            h = strata.tanh(strata.linear(h, ws[f"{i}.weight"], ws[f"{i}.bias"]))
        return (h * h).sum()

    def scanned(ws):
        with_ws = [{"weight": ws[f"{i}.weight"], "bias": ws[f"{i}.bias"]} for i in range(4)]
        for layer, w in zip(layers, with_ws):
            layer.weight, layer.bias = w["weight"], w["bias"]
        h = nn.apply_layers(layers, x, lambda layer, h: strata.tanh(layer(h)))
        return (h * h).sum()

    ws = {f"{i}.{n}": t for i, layer in enumerate(layers) for n, t in layer.named_parameters()}
    value, grads = strata.value_and_grad(scanned)(dict(ws))
    expected_value, expected = strata.value_and_grad(loop)(dict(ws))
    close(value, expected_value.numpy(), rtol=1e-6)
    close(grads, {k: v.numpy() for k, v in expected.items()}, rtol=1e-5, atol=1e-6)
    with pytest.raises(strata.Error, match="layer 1 differs from layer 0"):
        nn.apply_layers([nn.Linear(6, 6), nn.Linear(6, 5)], x)


def test_dropout_modes():
    d = nn.Dropout(0.5)
    x = strata.ones(10000)
    y = d(x, key=strata.random_key(5)).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and abs(y.mean() - 1) < 0.05
    close(d.eval()(x), np.ones(10000, np.float32))
    with pytest.raises(strata.Error, match=r"p must be in \[0, 1\)"):
        nn.Dropout(1.5)
