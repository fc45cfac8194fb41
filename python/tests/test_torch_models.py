"""PyTorch models run unchanged through torch.compile(backend="strata") and
match eager PyTorch (f32): the logits and loss, every parameter's gradient,
and the parameters after 3 AdamW steps (the step compiled by strata too, with
gradient clipping), each within 1e-5 relative to the tensor's own scale.
Hugging Face models are built from small configs in code (no hub). Each
model's step must be one forward and one backward graph, with no Dynamo graph
break and no op falling back to eager PyTorch."""
import copy

import pytest
import torch
import torch.nn.functional as F

import strata.torch
from strata.torch import _backend

transformers = pytest.importorskip("transformers")

# The first step (logits, loss, every gradient) within 1e-5; what follows
# AdamW steps within the model's own tolerance below. Adam divides each
# gradient by its root mean square: an element whose gradient is small
# against eps moves by a step that depends on its rounding, so two correct
# programs part a little more with each step, most in Llama (whose
# gradients are the smallest here: 5e-3 at most). Measured on Zen 4, worst
# over 3 steps: Llama 3.8e-5, GPT-2 1.0e-5, BERT 7e-6, CNN 7e-6.
RTOL = 1e-5
TRAJECTORY_RTOL = {"llama": 1e-4, "gpt2": 2e-5, "bert": 2e-5, "cnn": 2e-5}


def assert_close(got, want, what, rtol=RTOL):
    """Within rtol of the tensor's own scale (its largest magnitude, at least
    0.01: a bias that starts at 0 is compared at the scale of its neighbours)."""
    scale = want.abs().max().item() if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * max(scale, 1e-2),
                               msg=lambda m: f"{what}: {m}")


def llama():
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg)
    # transformers finds a model's loss by its class name, and "GPT2LMHeadModel"
    # names none: it then logs a warning on every call, which is a Dynamo graph
    # break for any backend (inductor's too). Naming the loss removes it.
    model.loss_type = "ForCausalLM"
    return model


def bert():
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=48,
                                  max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(cfg)


class SmallCNN(torch.nn.Module):
    """Convolutions (strided, grouped), batch norm, max and average pooling."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False)
        self.b2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        x = F.avg_pool2d(torch.relu(self.b2(self.c2(x))), 2)
        return self.fc(x.flatten(1))


def token_batch(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (2, 9), generator=g)
    return ids


def hf_step(model, ids, masked):
    labels = ids.clone()
    if masked:
        labels[:, ::2] = -100
    out = model(input_ids=ids, labels=labels)
    return out.logits, out.loss


def cnn_step(model, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, 8, 8, generator=g)
    y = torch.randint(0, 10, (4,), generator=g)
    logits = model(x)
    return logits, F.cross_entropy(logits, y)


MODELS = {
    "llama": (llama, lambda m, s: hf_step(m, token_batch(s), False)),
    "gpt2": (gpt2, lambda m, s: hf_step(m, token_batch(s), False)),
    "bert": (bert, lambda m, s: hf_step(m, token_batch(s), True)),
    "cnn": (SmallCNN, cnn_step),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_matches_eager_pytorch(name):
    make, step = MODELS[name]
    torch.manual_seed(0)
    eager = make().train()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="strata")  # the entry point, no import needed
    # eps 1e-6, not 1e-8: Adam's first step is lr * g / (|g| + eps), a sign for
    # every |g| above eps, so with eps 1e-8 a gradient that is 0 up to rounding
    # (a key bias, whose gradient softmax cancels) moves by +-lr on either side
    # of 0, and two correct programs part by 2 lr. Above 1e-6 the step is the sign
    # of a gradient both compute to 1e-5, and below it the step is small.
    opt_eager = torch.optim.AdamW(eager.parameters(), lr=1e-3, weight_decay=0.1, eps=1e-6)
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-3, weight_decay=0.1, eps=1e-6)

    @torch.compile(backend="strata")
    def optimizer_step():
        opt_ours.step()

    strata.torch.reset()
    for s in range(3):
        rtol = RTOL if s == 0 else TRAJECTORY_RTOL[name]
        opt_eager.zero_grad()
        opt_ours.zero_grad()
        logits_e, loss_e = step(eager, s)
        logits_o, loss_o = step(compiled, s)
        assert_close(logits_o, logits_e, f"{name} step {s} logits", rtol)
        assert_close(loss_o, loss_e, f"{name} step {s} loss", rtol)
        loss_e.backward()
        loss_o.backward()
        for (n, pe), po in zip(eager.named_parameters(), ours.parameters()):
            assert (pe.grad is None) == (po.grad is None), n
            if pe.grad is not None:
                assert_close(po.grad, pe.grad, f"{name} step {s} grad {n}", rtol)
        torch.nn.utils.clip_grad_norm_(eager.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(ours.parameters(), 1.0)
        opt_eager.step()
        optimizer_step()
    for (n, pe), po in zip(eager.named_parameters(), ours.parameters()):
        assert_close(po.detach(), pe.detach(), f"{name} parameter {n} after 3 AdamW steps",
                     TRAJECTORY_RTOL[name])
    for (n, be), bo in zip(eager.named_buffers(), ours.buffers()):
        if be.is_floating_point():
            assert_close(bo, be, f"{name} buffer {n} after 3 steps", TRAJECTORY_RTOL[name])
    reports = strata.torch.reports()
    kinds = sorted(r.kind for r in reports)
    # One graph each way for the model, one for the optimizer: no graph break.
    assert kinds == ["backward", "forward", "inference"], kinds
    assert all(not r.fallbacks for r in reports), [dict(r.fallbacks) for r in reports]


def test_eval_mode_uses_the_running_statistics_and_no_dropout():
    torch.manual_seed(0)
    model = SmallCNN()
    model.train()
    x = torch.randn(4, 3, 8, 8)
    model(x)  # moves the running statistics
    model.eval()
    compiled = torch.compile(model, backend="strata")
    with torch.no_grad():
        assert_close(compiled(x), model(x), "eval logits")
