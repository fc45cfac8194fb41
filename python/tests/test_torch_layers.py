"""strata.torch.apply_layers and scan_layers against the same layers written out in eager
PyTorch: values and every layer's own gradients, layers without parameters, with buffers,
with extra arguments, a Hugging Face Llama with one line changed (eager, and under
torch.compile as one node of one graph), the graph breaks under torch.compile and why, and
the errors that name the first layer that differs."""
import copy

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import strata
import strata.torch as st

RTOL = 1e-5


def close(got, want, rtol=RTOL):
    """Within rtol of want, relative to its largest element."""
    want = want.detach().numpy()
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got.detach().numpy(), want, rtol, 1e-7 + rtol * scale)


class Block(torch.nn.Module):
    def __init__(self, n=6, act="tanh"):
        super().__init__()
        self.fc = torch.nn.Linear(n, n)
        self.scale = torch.nn.Parameter(torch.rand(n) + 0.5)
        self.act = act

    def forward(self, x, mask=None):
        h = self.fc(x) * self.scale
        h = torch.tanh(h) if self.act == "tanh" else torch.relu(h)
        if mask is not None:
            h = h * mask
        return x + h


def unrolled(layers, x, *args, **kwargs):
    for layer in layers:
        x = layer(x, *args, **kwargs)
    return x


def grads_of(layers, x, run, *args, **kwargs):
    for p in [x] + [p for layer in layers for p in layer.parameters()]:
        p.grad = None
    out = run(layers, x, *args, **kwargs)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out, [x.grad] + [p.grad for layer in layers for p in layer.parameters()]


@pytest.mark.parametrize("depth", [1, 4, 32])
def test_layers_match_the_written_out_loop_and_each_gets_its_own_gradient(depth):
    torch.manual_seed(depth)
    layers = torch.nn.ModuleList(Block() for _ in range(depth))
    x = torch.randn(3, 6, requires_grad=True)
    mask = (torch.rand(3, 6) > 0.3).float()
    got, got_grads = grads_of(layers, x, st.apply_layers, mask=mask)
    want, want_grads = grads_of(layers, x, unrolled, mask=mask)
    close(got, want)
    assert len(got_grads) == 1 + 3 * depth
    for g, w in zip(got_grads, want_grads):
        assert g is not None
        close(g, w)


def test_layers_without_parameters_and_with_buffers():
    x = torch.randn(4, 3, requires_grad=True)
    acts = [torch.nn.Tanh() for _ in range(3)]
    close(st.apply_layers(acts, x), unrolled(acts, x))
    torch.manual_seed(0)
    norms = [torch.nn.BatchNorm1d(3) for _ in range(3)]
    for n in norms:
        n.running_mean.uniform_(-1, 1)
        n.running_var.uniform_(0.5, 2)
        n.eval()
    close(st.apply_layers(norms, x), unrolled(norms, x))
    assert st.apply_layers([], x) is x


def test_layers_that_differ_are_named_with_why():
    layers = [Block(), Block(), Block(act="relu")]
    with pytest.raises(strata.Error, match="layer 2 differs from layer 0: its traced forward"):
        st.apply_layers(layers, torch.randn(2, 6))
    with pytest.raises(strata.Error, match="layer 1 differs.*it is a Sequential, layer 0 a Block"):
        st.apply_layers([Block(), torch.nn.Sequential()], torch.randn(2, 6))
    narrow = Block()
    narrow.fc = torch.nn.Linear(6, 5)
    with pytest.raises(strata.Error, match=r"layer 1 differs.*fc.weight is float32\[5, 6\]"):
        st.apply_layers([Block(), narrow], torch.randn(2, 6))
    trained = Block().eval()
    with pytest.raises(strata.Error, match="layer 1 differs.*eval mode"):
        st.apply_layers([Block(), trained], torch.randn(2, 6))


def llama(layers, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, attn_implementation="sdpa")
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("depth", [1, 4])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_hugging_face_llama_with_one_line_changed(depth, compiled):
    model = llama(depth)
    scanned = copy.deepcopy(model)
    scanned.model.layers = st.scan_layers(scanned.model.layers)  # the one line
    assert list(scanned.state_dict()) == list(model.state_dict())
    ids = torch.randint(0, 96, (2, 12))
    if compiled:  # one Dynamo graph: the layers are one scan node of its forward and backward
        report = st.explain(lambda ids: scanned(ids, labels=ids, use_cache=False).loss, ids)
        assert one_node_of_one_graph(report), report
        scanned.zero_grad(set_to_none=True)  # explain ran a backward
        st.reset()
    run = torch.compile(scanned, backend="strata") if compiled else scanned
    got = run(ids, labels=ids, use_cache=False)
    want = model(ids, labels=ids, use_cache=False)
    close(got.logits, want.logits)
    close(got.loss, want.loss)
    got.loss.backward()
    want.loss.backward()
    for (name, p), q in zip(scanned.named_parameters(), model.parameters()):
        assert p.grad is not None, name
        close(p.grad, q.grad, 2e-5)


def one_node_of_one_graph(report):
    return (report.graph_breaks == 0 and not report.break_reasons
            and [g.kind for g in report.graphs] == ["forward", "backward"]
            and all(g.ops["scan"] == 1 and not g.fallbacks for g in report.graphs))


def stack_of(layers):
    """A function that runs a scan_layers list as a model's forward loops over its layers."""
    def run(x, mask):
        for stack in layers:
            x = stack(x, mask=mask)
        return x
    return run


@pytest.mark.parametrize("x_needs_grad", [True, False])
def test_under_torch_compile_scanned_layers_are_one_node_and_match_the_written_out_loop(
        x_needs_grad):
    # Without a gradient to x the first layer runs before the loop (torch's scan op would drop
    # the gradient of a carry whose init needs none): still one graph, one scan node.
    torch.manual_seed(11)
    blocks = [Block() for _ in range(4)]
    layers = st.scan_layers(blocks)
    x = torch.randn(3, 6, requires_grad=x_needs_grad)
    mask = (torch.rand(3, 6) > 0.3).float()
    run = stack_of(layers)
    report = st.explain(lambda x, mask: run(x, mask).square().sum(), x, mask)
    assert one_node_of_one_graph(report), report
    st.reset()
    leaves = ([x] if x_needs_grad else []) + list(layers.parameters())
    got = torch.compile(run, backend="strata")(x, mask)
    got_grads = torch.autograd.grad(got.square().sum(), leaves)
    want = unrolled(blocks, x, mask=mask)
    want_grads = torch.autograd.grad(want.square().sum(), leaves)
    close(got, want)
    for g, w in zip(got_grads, want_grads):
        close(g, w)


class DropBlock(Block):
    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x, mask=None):
        return self.drop(super().forward(x, mask))


@pytest.mark.parametrize("case, reason", [
    ("a list", "its layers are not a scan_layers list"),
    ("dropout", "a layer draws random numbers"),
])
def test_under_torch_compile_what_the_loop_cannot_be_is_a_graph_break_that_says_why(
        case, reason):
    torch.manual_seed(12)
    blocks = [DropBlock() if case == "dropout" else Block() for _ in range(3)]
    x = torch.randn(2, 6, requires_grad=True)
    mask = torch.ones(2, 6)
    run = (lambda x, mask: st.apply_layers(blocks, x, mask=mask)) if case == "a list" else \
        stack_of(st.scan_layers(blocks))
    report = st.explain(lambda x, mask: run(x, mask).sum(), x, mask)
    assert report.graph_breaks >= 1 and reason in "\n".join(report.break_reasons), report
    st.reset()
    got = torch.compile(run, backend="strata")(x, mask)
    if case == "a list":
        close(got, unrolled(blocks, x, mask=mask))
    assert got.shape == x.shape and got.requires_grad


def test_under_torch_compile_layers_that_differ_are_named_as_in_eager():
    run = stack_of(st.scan_layers([Block(), Block(), Block(act="relu")]))
    with pytest.raises(strata.Error, match="layer 2 differs from layer 0: its traced forward"):
        torch.compile(run, backend="strata")(torch.randn(2, 6), None)


def test_a_key_value_cache_cannot_go_through_the_scan():
    model = llama(2)
    model.model.layers = st.scan_layers(model.model.layers)
    ids = torch.randint(0, 96, (1, 5))
    with pytest.raises(strata.Error, match="use_cache=False"):
        model(ids, past_key_values=DynamicCache(), use_cache=True)


def test_scanned_layers_keep_the_list_s_indexing():
    blocks = [Block() for _ in range(3)]
    scanned = st.scan_layers(blocks, remat="dots")
    assert len(scanned) == 3 and scanned[1] is blocks[1]
    assert st.scan_layers(scanned) is scanned
    with pytest.raises(strata.Error, match="remat"):
        st.scan_layers(blocks, remat="everything")


def test_a_layer_changed_after_a_call_is_checked_again():
    layers = [Block(), Block()]
    x = torch.randn(2, 6)
    close(st.apply_layers(layers, x), unrolled(layers, x))
    layers[1].act = "relu"  # the proof of the first call no longer holds
    with pytest.raises(strata.Error, match="layer 1 differs from layer 0: its traced forward"):
        st.apply_layers(layers, x)


def test_a_later_call_uses_its_own_arguments_and_parameters():
    # The second call reuses the first one's traced body: its mask, its x and the parameters
    # as they are now must be what it computes with.
    torch.manual_seed(5)
    layers = [Block() for _ in range(3)]
    for mask_seed in (0, 1):
        torch.manual_seed(mask_seed)
        x = torch.randn(2, 6, requires_grad=True)
        mask = (torch.rand(2, 6) > 0.5).float()
        got, got_grads = grads_of(layers, x, st.apply_layers, mask)
        want, want_grads = grads_of(layers, x, unrolled, mask)
        close(got, want)
        for g, w in zip(got_grads, want_grads):
            close(g, w)
        with torch.no_grad():
            layers[0].fc.weight.mul_(0.5)  # an optimizer's update between calls
    close(st.apply_layers(layers, x, mask), unrolled(layers, x, mask))


def count_traces(monkeypatch):
    """How many layers the proof traces on its own, beyond the loop body's one trace."""
    from strata.torch import _layers
    traced = []
    real = _layers._traced_body

    def counting(layer, *rest):
        traced.append(layer)
        return real(layer, *rest)

    monkeypatch.setattr(_layers, "_traced_body", counting)
    return traced


def test_a_hugging_face_model_s_layers_are_proven_alike_without_tracing_each(monkeypatch):
    # Its decoder layers differ in layer_idx, which a forward without a key-value cache never
    # reads: the one trace of layer 0 (the loop's body) proves all of them.
    traced = count_traces(monkeypatch)
    model = llama(8)
    torch.manual_seed(3)
    ids = torch.randint(0, 96, (2, 6))
    want = model(ids, use_cache=False).logits
    model.model.layers = st.scan_layers(model.model.layers)
    close(model(ids, use_cache=False).logits, want)
    assert traced == []


class Tagged(Block):
    """A Block with a Python attribute its forward never reads, and one it reads."""

    def __init__(self, tag, gain=1.0):
        super().__init__()
        self.tag = tag
        self.gain = gain

    def forward(self, x, mask=None):
        return super().forward(x, mask) * self.gain


def test_an_attribute_the_forward_never_reads_may_differ(monkeypatch):
    traced = count_traces(monkeypatch)
    torch.manual_seed(1)
    layers = [Tagged(tag=f"layer {i}") for i in range(5)]
    x = torch.randn(3, 6, requires_grad=True)
    got, got_grads = grads_of(layers, x, st.apply_layers)
    want, want_grads = grads_of(layers, x, unrolled)
    close(got, want)
    for g, w in zip(got_grads, want_grads):
        close(g, w)
    assert traced == []


def test_an_attribute_the_forward_reads_is_proven_by_tracing_the_layer(monkeypatch):
    traced = count_traces(monkeypatch)
    layers = [Tagged("a"), Tagged("b"), Tagged("c", gain=2.0)]
    # gain is read, and differs in layer 2: traced, the constant differs, so the body does.
    with pytest.raises(strata.Error, match="layer 2 differs from layer 0: its traced forward"):
        st.apply_layers(layers, torch.randn(2, 6))
    assert traced == [layers[0], layers[2]]
    # Equal plain values held in two objects are the same to the forward: no trace.
    traced.clear()
    layers = [Tagged("a", gain=float("2.5")), Tagged("b", gain=float("2.5"))]
    x = torch.randn(2, 6)
    close(st.apply_layers(layers, x), unrolled(layers, x))
    assert traced == []
    # Two objects of a class the proof cannot compare are traced, and pass when they trace
    # alike.
    traced.clear()
    layers = [Tagged("a", gain=Gain(0.5)), Tagged("b", gain=Gain(0.5))]
    close(st.apply_layers(layers, x), unrolled(layers, x))
    assert traced == [layers[0], layers[1]]


class Gain:
    def __init__(self, value):
        self.value = value

    def __rmul__(self, t):
        return t * self.value


class HoldsATensor(Block):
    """A Block that keeps a tensor as a plain attribute, neither a parameter nor a buffer."""

    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    def forward(self, x, mask=None):
        return super().forward(x, mask) + self.offset


def test_a_plain_tensor_attribute_that_differs_is_refused_by_name():
    # The loop runs layer 0's forward: layer 1's own offset would be silently replaced by
    # layer 0's, so the proof refuses and says to make it a buffer.
    layers = [HoldsATensor(torch.zeros(6)), HoldsATensor(torch.ones(6))]
    with pytest.raises(strata.Error, match="layer 1 differs from layer 0: its offset is a "
                                           "tensor that is not a parameter or buffer"):
        st.apply_layers(layers, torch.randn(2, 6))
    same = [HoldsATensor(torch.ones(6)), HoldsATensor(torch.ones(6))]
    x = torch.randn(2, 6)
    close(st.apply_layers(same, x), unrolled(same, x))


class ReadsItsDict(Block):
    """A Block whose forward reads its attributes through __dict__, which the proof cannot
    follow attribute by attribute."""

    def forward(self, x, mask=None):
        h = self.fc(x) * self.scale
        return x + (torch.tanh(h) if self.__dict__["act"] == "tanh" else torch.relu(h))


def test_a_forward_that_reads_its_dict_has_every_attribute_count(monkeypatch):
    traced = count_traces(monkeypatch)
    layers = [ReadsItsDict(), ReadsItsDict(act="relu")]
    with pytest.raises(strata.Error, match="layer 1 differs from layer 0: its traced forward"):
        st.apply_layers(layers, torch.randn(2, 6))
    assert traced == [layers[0], layers[1]]


def test_an_instance_attribute_over_a_class_one_is_traced():
    class Scaled(Block):
        factor = 1.0

        def forward(self, x, mask=None):
            return super().forward(x, mask) * self.factor

    layers = [Scaled(), Scaled()]
    layers[1].factor = 3.0  # only layer 1 holds its own; layer 0 reads the class's
    with pytest.raises(strata.Error, match="layer 1 differs from layer 0: its traced forward"):
        st.apply_layers(layers, torch.randn(2, 6))
