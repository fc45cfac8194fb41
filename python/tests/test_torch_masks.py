"""A causal mask built from constants (as Hugging Face's models build theirs)
becomes attention's is_causal, so the fused kernel skips the tiles above the
diagonal; any other mask stays a mask. References: eager PyTorch, and masks
written out by hand."""
import pytest
import torch
import torch.nn.functional as F
import transformers

import strata.torch
from strata.torch import _masks


@pytest.fixture(autouse=True)
def fresh():
    strata.torch.reset()
    yield
    strata.torch.reset()


@pytest.fixture
def rewrites(monkeypatch):
    """How many calls each causal_masks pass rewrote, in order."""
    seen = []
    real = _masks.causal_masks
    monkeypatch.setattr(_masks, "causal_masks", lambda gm: seen.append(real(gm)) or seen[-1])
    return seen


def tiny_llama(train):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(cfg)
    return (model.train() if train else model.eval()), torch.randint(0, 128, (2, 16))


def test_the_causal_mask_is_recognized_in_each_form():
    keep = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    additive = torch.tensor([[0.0, -torch.inf, -torch.inf], [0.0, 0.0, -torch.inf],
                             [0.0, 0.0, 0.0]])
    lowest = torch.where(keep, 0.0, torch.finfo(torch.float32).min)
    for mask in (keep, additive, lowest, keep.expand(2, 4, 3, 3), additive[None, None]):
        assert _masks.is_causal_mask(mask, 3, 3)


@pytest.mark.parametrize("mask", [
    torch.ones(3, 3, dtype=torch.bool).tril(-1),          # the diagonal hidden
    torch.ones(3, 3, dtype=torch.bool).tril(1),           # one key too many
    torch.ones(3, 3, dtype=torch.bool),                   # no mask at all
    torch.where(torch.ones(3, 3, dtype=torch.bool).tril(), 0.0, -1e4),  # a finite penalty
    torch.where(torch.ones(3, 3, dtype=torch.bool).tril(), 0.5, -torch.inf),  # a bias kept
    torch.stack([torch.ones(3, 3, dtype=torch.bool).tril(),
                 torch.ones(3, 3, dtype=torch.bool)]),    # causal for one batch only
    torch.ones(3, 3, dtype=torch.int64).tril(),           # not a mask type
])
def test_anything_else_is_not_the_causal_mask(mask):
    assert not _masks.is_causal_mask(mask, 3, 3)


def test_a_mask_of_other_lengths_is_not_causal():
    assert not _masks.is_causal_mask(torch.ones(3, 4, dtype=torch.bool).tril(), 3, 4)


def _attention(built_mask):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=built_mask(q.shape[-2]))
    return f


def _causal_built(n):
    positions = torch.arange(n)
    return positions[None, :] <= positions[:, None]


def _flash_calls(kind):
    """(is_causal, has a mask) of each flash-attention call strata compiled."""
    return [r for r in strata.torch.reports() if r.kind == kind]


@pytest.mark.parametrize("built, causal", [
    (_causal_built, True),
    (lambda n: torch.where(_causal_built(n), 0.0, -torch.inf), True),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1) | torch.eye(n, dtype=torch.bool)
     | torch.ones(n, n, dtype=torch.bool).tril(-2), True),
    (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), False),  # anti-causal
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril(4), False),  # a window ahead
])
def test_values_and_gradients_match_eager_and_a_causal_mask_becomes_the_flag(built, causal,
                                                                             rewrites):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    f = _attention(built)
    out = torch.compile(f, backend="strata")(q, k, v)
    out.square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = f(q, k, v)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    for g, t in zip(grads, (q, k, v)):  # sums of squares: f32 noise on values of ~10
        torch.testing.assert_close(g, t.grad, rtol=1e-5, atol=1e-5 * float(t.grad.abs().max()))
    # the joint graph's forward and backward call, both rewritten or neither
    assert rewrites == [2 if causal else 0]


def test_a_mask_from_an_input_stays_a_mask(rewrites):
    """A padding mask the caller passes is data: never taken for causal."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    mask = _causal_built(6)  # causal in value, but an input of the graph
    f = torch.compile(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                      backend="strata")
    torch.testing.assert_close(f(q, k, v, mask), F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask), rtol=1e-5, atol=1e-6)
    assert rewrites == [0]


def test_a_hugging_face_llama_runs_causal_attention_without_its_mask(rewrites):
    model, ids = tiny_llama(train=True)
    loss = torch.compile(model, backend="strata")(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    ref = model(input_ids=ids, labels=ids).loss
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)
    assert rewrites == [4]  # two layers, each a forward and a backward call


def test_an_inference_graph_drops_its_causal_mask_too(rewrites):
    model, ids = tiny_llama(train=False)
    with torch.no_grad():
        logits = torch.compile(model, backend="strata")(input_ids=ids).logits
        torch.testing.assert_close(logits, model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    assert rewrites == [2]  # no joint graph: the inference graph's two calls
