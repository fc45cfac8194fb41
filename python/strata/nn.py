"""strata.nn: modules with dotted parameter names (PyTorch's nn.Module), the
basic layers with PyTorch's initialization, apply_layers, and the functions
of torch.nn.functional (strata.nn.functional)."""
import contextlib
import math
import types

from . import _strata
from ._strata import Tensor
from ._strata.nn import LlamaForCausalLM  # noqa: F401  the C++ model

functional = types.ModuleType("strata.nn.functional", "torch.nn.functional's functions")
for _name in ["linear", "relu", "gelu", "silu", "softmax", "log_softmax", "mse_loss",
              "cross_entropy", "rms_norm", "layer_norm", "dropout", "one_hot",
              "scaled_dot_product_attention", "sigmoid", "tanh", "conv1d", "conv2d",
              "conv3d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
              "avg_pool3d"]:
    setattr(functional, _name, getattr(_strata, _name))

_seed = [0, 0]  # (seed, draws): where modules made without a key take their keys from


def manual_seed(seed):
    """Seeds the keys of modules made without one (torch.manual_seed)."""
    _seed[0], _seed[1] = int(seed), 0


def _next_key(key):
    if key is not None:
        return key
    _seed[1] += 1
    return _strata.split_key(_strata.random_key(_seed[0]), _seed[1] + 1)[_seed[1]]


class Module:
    """A PyTorch-style module: tensors and modules assigned as attributes are
    its parameters and submodules, named with dots ("layers.0.weight")."""

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise _strata.Error(f"[module] {type(self).__name__}.__init__ must call "
                                f"super().__init__() before assigning {name!r}")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Tensor):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name, tensor):
        """A tensor that is state but not a parameter (not trained)."""
        self._parameters.pop(name, None)
        self._buffers[name] = tensor
        object.__setattr__(self, name, tensor)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self, prefix=""):
        for path, module in self.named_modules(prefix):
            for name, tensor in module._parameters.items():
                yield (f"{path}.{name}" if path else name), tensor

    def named_buffers(self, prefix=""):
        for path, module in self.named_modules(prefix):
            for name, tensor in module._buffers.items():
                yield (f"{path}.{name}" if path else name), tensor

    def parameters(self):
        return [t for _, t in self.named_parameters()]

    def state_dict(self):
        return dict(list(self.named_parameters()) + list(self.named_buffers()))

    def _slot(self, name):
        *path, leaf = name.split(".")
        module = self
        for part in path:
            if part not in module._modules:
                raise _strata.Error(f"[{type(self).__name__}] no parameter or buffer named "
                                    f"{name!r} (no submodule {part!r})")
            module = module._modules[part]
        if leaf not in module._parameters and leaf not in module._buffers:
            raise _strata.Error(f"[{type(self).__name__}] no parameter or buffer named {name!r}")
        return module, leaf

    def load_state_dict(self, state, strict=True):
        """Rebinds each named tensor to state's (same shape and dtype, or an Error)."""
        own = self.state_dict()
        if strict:
            missing = sorted(set(own) - set(state))
            unexpected = sorted(set(state) - set(own))
            if missing or unexpected:
                raise _strata.Error(f"[load_state_dict] missing keys {missing}, "
                                    f"unexpected keys {unexpected}")
        for name, value in state.items():
            if name not in own:
                continue
            if not isinstance(value, _strata.Tensor):
                value = _strata.tensor(value)  # a NumPy array or a torch tensor, copied
            mine = own[name]
            if tuple(value.shape) != tuple(mine.shape) or value.dtype != mine.dtype:
                raise _strata.Error(f"[load_state_dict] {name}: expected shape {tuple(mine.shape)} "
                                    f"{mine.dtype!r}, got {tuple(value.shape)} {value.dtype!r}")
            mine.copy_(value)

    def train(self, mode=True):
        for _, module in self.named_modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    @contextlib.contextmanager
    def _using(self, tensors):
        """Runs with the named tensors replaced (functional_call), then restores them."""
        saved = []
        try:
            for name, value in tensors.items():
                module, leaf = self._slot(name)
                table = module._parameters if leaf in module._parameters else module._buffers
                saved.append((module, table, leaf, table[leaf]))
                table[leaf] = value
                object.__setattr__(module, leaf, value)
            yield
        finally:
            for module, table, leaf, value in reversed(saved):
                table[leaf] = value
                object.__setattr__(module, leaf, value)

    def __repr__(self):
        children = "".join(f"\n  ({n}): " + repr(m).replace("\n", "\n  ")
                           for n, m in self._modules.items())
        return f"{type(self).__name__}({self.extra_repr()}{children}{chr(10) if children else ''})"

    def extra_repr(self):
        return ""


class ModuleList(Module):
    """Modules named by position: "layers.0", "layers.1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module):
        setattr(self, str(len(self._modules)), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i):
        modules = list(self._modules.values())
        if isinstance(i, int) and not -len(modules) <= i < len(modules):
            raise IndexError(f"[ModuleList] index {i} is out of range for a ModuleList of "
                             f"{len(modules)} modules")
        return modules[i]


def _init_bound(fan_in):
    """PyTorch's default bound 1/sqrt(fan_in); 0 for a layer with no inputs
    (nn.Linear(0, n) holds an empty weight and a zero bias, as in torch)."""
    if not isinstance(fan_in, int) or fan_in < 0:
        raise _strata.Error(f"[nn] the number of input features must be a non-negative int, "
                            f"got {fan_in!r}")
    return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0


class Linear(Module):
    """y = x W^T + b; weight [out, in] and bias [out] ~ U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True, key=None, dtype=None):
        super().__init__()
        dtype = dtype or _strata.float32
        bound = _init_bound(in_features)
        kw, kb = _strata.split_key(_next_key(key), 2)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _strata.uniform(kw, (out_features, in_features), -bound, bound, dtype=dtype)
        self.bias = _strata.uniform(kb, (out_features,), -bound, bound, dtype=dtype) if bias else None

    def forward(self, x):
        return _strata.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}"


class _ConvNd(Module):
    """torch.nn.ConvNd: weight [out, in / groups, *kernel] and bias [out], both
    ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * prod(kernel)
    (PyTorch's default initialization)."""

    _rank = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, key=None, dtype=None):
        super().__init__()
        dtype = dtype or _strata.float32
        kernel = (kernel_size,) * self._rank if isinstance(kernel_size, int) else tuple(kernel_size)
        if any(not isinstance(k, int) or k <= 0 for k in kernel):
            raise _strata.Error(f"[Conv{self._rank}d] kernel_size must be positive, got "
                                f"{kernel_size!r}")
        if in_channels % groups or out_channels % groups:
            raise _strata.Error(f"[Conv{self._rank}d] in_channels ({in_channels}) and "
                                f"out_channels ({out_channels}) must divide by groups ({groups})")
        fan_in = in_channels // groups * math.prod(kernel)
        bound = _init_bound(fan_in)
        kw, kb = _strata.split_key(_next_key(key), 2)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = _strata.uniform(kw, (out_channels, in_channels // groups, *kernel), -bound,
                                      bound, dtype=dtype)
        self.bias = _strata.uniform(kb, (out_channels,), -bound, bound, dtype=dtype) if bias else None

    def forward(self, x):
        conv = getattr(_strata, f"conv{self._rank}d")
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


class Conv1d(_ConvNd):
    _rank = 1


class Conv2d(_ConvNd):
    _rank = 2


class Conv3d(_ConvNd):
    _rank = 3


class MaxPool2d(Module):
    """torch.nn.MaxPool2d."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = (kernel_size, stride, padding,
                                                                      dilation)
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        return _strata.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                  ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool2d(Module):
    """torch.nn.AvgPool2d."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x):
        return _strata.avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                                  ceil_mode=self.ceil_mode,
                                  count_include_pad=self.count_include_pad,
                                  divisor_override=self.divisor_override)


class Embedding(Module):
    """Rows of weight [num, dim] ~ N(0, 1), looked up by integer ids."""

    def __init__(self, num_embeddings, embedding_dim, key=None, dtype=None):
        super().__init__()
        self.weight = _strata.normal(_next_key(key), (num_embeddings, embedding_dim),
                                     dtype=dtype or _strata.float32)

    def forward(self, ids):
        return _strata.index_select(self.weight, 0, _strata.reshape(ids, -1)).reshape(
            *ids.shape, self.weight.shape[1])


def _normalized(dim):
    """A normalized shape, an int or a sequence of them (torch's), as a tuple."""
    shape = (dim,) if isinstance(dim, int) else tuple(dim)
    if not shape or any(not isinstance(d, int) or d < 0 for d in shape):
        raise _strata.Error(f"[nn] normalized_shape must be a non-empty tuple of non-negative ints, "
                            f"got {dim!r}")
    return shape


def _over_last(x, shape, fn):
    """fn over x's last len(shape) dims taken as one (torch's normalized_shape)."""
    if len(shape) == 1:
        return fn(x)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise _strata.Error(f"[nn] normalized_shape {shape} does not end the input's shape "
                            f"{tuple(x.shape)}")
    lead = tuple(x.shape[:x.ndim - len(shape)])
    return fn(x.reshape(*lead, math.prod(shape))).reshape(*lead, *shape)


class RMSNorm(Module):
    """Hugging Face's LlamaRMSNorm: x / rms(x) * weight, weight ones [dim]
    (dim an int, or a tuple of the last dims, as torch.nn.RMSNorm)."""

    def __init__(self, dim, eps=1e-6, dtype=None):
        super().__init__()
        self.eps = eps
        self.normalized_shape = _normalized(dim)
        self.weight = _strata.ones(*self.normalized_shape, dtype=dtype or _strata.float32)

    def forward(self, x):
        w = self.weight.reshape(-1)
        return _over_last(x, self.normalized_shape, lambda h: _strata.rms_norm(h, w, self.eps))


class LayerNorm(Module):
    """torch.nn.LayerNorm over the last dimensions (normalized_shape, an int or
    a tuple): weight ones, bias zeros."""

    def __init__(self, dim, eps=1e-5, dtype=None):
        super().__init__()
        self.eps = eps
        self.normalized_shape = _normalized(dim)
        self.weight = _strata.ones(*self.normalized_shape, dtype=dtype or _strata.float32)
        self.bias = _strata.zeros(*self.normalized_shape, dtype=dtype or _strata.float32)

    def forward(self, x):
        w, b = self.weight.reshape(-1), self.bias.reshape(-1)
        return _over_last(x, self.normalized_shape,
                          lambda h: _strata.layer_norm(h, w, b, self.eps))


class Dropout(Module):
    """Inverted dropout while training (bits from `key`, or the module seed), identity in eval."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise _strata.Error(f"[dropout] p must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x, key=None):
        if not self.training or self.p == 0:
            return x
        return _strata.dropout(x, self.p, _next_key(key), True)


def functional_call(module, tensors, *args, **kwargs):
    """module(*args, **kwargs) with the named tensors in place of its own
    (torch.func.functional_call): what strata.grad differentiates a module
    through, with the module left as it was."""
    with module._using(tensors):
        return module(*args, **kwargs)


def apply_layers(layers, x, forward=None, remat="carries"):
    """Runs layers of one structure one after another as one strata.scan over
    their stacked parameters (PyTorch/XLA's scan_layers): the layer's forward
    traces once, whatever the number of layers. forward(layer, x) defaults to
    layer(x). Layers that differ (type, parameter names, shapes, dtypes or
    mode) are an Error naming the first difference."""
    layers = list(layers)
    if not layers:
        return x
    forward = forward or (lambda layer, h: layer(h))
    first = layers[0]
    signature = [(n, tuple(t.shape), t.dtype) for n, t in first.state_dict().items()]
    for i, layer in enumerate(layers[1:], 1):
        if type(layer) is not type(first):
            raise _strata.Error(f"[apply_layers] layer {i} is a {type(layer).__name__}, "
                                f"layer 0 a {type(first).__name__}")
        mine = [(n, tuple(t.shape), t.dtype) for n, t in layer.state_dict().items()]
        if mine != signature:
            diff = next((a, b) for a, b in zip(mine + [None] * len(signature),
                                               signature + [None] * len(mine)) if a != b)
            raise _strata.Error(f"[apply_layers] layer {i} differs from layer 0: {diff[0]} vs {diff[1]}")
        modes = [m.training for _, m in layer.named_modules()]
        if modes != [m.training for _, m in first.named_modules()]:
            raise _strata.Error(f"[apply_layers] layer {i}'s train/eval modes differ from layer 0's")
    names = [n for n, _, _ in signature]
    stacked = {n: _strata.stack([layer.state_dict()[n] for layer in layers]) for n in names}

    def body(h, tensors):
        with first._using(tensors):
            return forward(first, h), None

    out, _ = _strata.scan(body, x, stacked, remat=remat)
    return out
