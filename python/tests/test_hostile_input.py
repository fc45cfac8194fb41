"""Inputs a hostile but ordinary user tries (issue 50): each once crashed the
process, answered wrongly or raised an unclear error. References are NumPy
and PyTorch, or the value worked out by hand."""
import json
import struct

import numpy as np
import pytest
import torch

import strata
from conftest import close

INTS = [np.int64, np.int32, np.uint8]


# ---- bitwise ops: PyTorch's semantics ---------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS)
def test_and_or_xor_invert_on_integers_are_bitwise(dtype):
    a = np.array([2, 6, 12, 255], dtype=dtype)
    b = np.array([1, 3, 10, 15], dtype=dtype)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    sa, sb = strata.tensor(a), strata.tensor(b)
    close(sa & sb, ta & tb)
    close(sa | sb, ta | tb)
    close(sa ^ sb, ta ^ tb)
    close(~sa, ~ta)
    close(strata.bitwise_and(sa, sb), torch.bitwise_and(ta, tb))
    close(strata.bitwise_or(sa, 4), torch.bitwise_or(ta, 4))
    close(strata.bitwise_xor(sa, sb), torch.bitwise_xor(ta, tb))
    close(strata.bitwise_not(sa), torch.bitwise_not(ta))
    close(sa & 3, ta & 3)
    close(5 | sa, 5 | ta)
    x = strata.tensor(a)
    x &= sb
    close(x, ta & tb)


def test_the_issues_example_gives_torchs_answer():
    assert (strata.tensor([2, 6]) & strata.tensor([1, 3])).tolist() == [0, 2]


def test_on_bools_bitwise_ops_are_logical():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    sa, sb = strata.tensor(a), strata.tensor(b)
    for got, want in [(sa & sb, a & b), (sa | sb, a | b), (sa ^ sb, a ^ b), (~sa, ~a)]:
        assert got.dtype == strata.bool
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("name", ["and", "or", "xor", "invert", "bitwise_and"])
def test_bitwise_ops_on_floats_are_refused_as_torch_refuses_them(name):
    ops = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
           "invert": lambda a, b: ~a}
    torch_op = ops.get(name, lambda a, b: torch.bitwise_and(b, a))
    strata_op = ops.get(name, lambda a, b: strata.bitwise_and(b, a))
    with pytest.raises((RuntimeError, TypeError)):  # torch's own answer
        torch_op(torch.tensor([1.0, 2.0]), torch.tensor([1, 2]))
    with pytest.raises(strata.Error, match="only defined for integer and bool tensors"):
        strata_op(strata.tensor([1.0, 2.0]), strata.tensor([1, 2]))


# ---- index checks ----------------------------------------------------------------------------

def test_index_add_with_an_index_out_of_range_is_an_error_not_a_dropped_row():
    x = strata.zeros(3, 2)
    with pytest.raises(strata.Error, match=r"index_add.*out of range|out of range.*index_add"):
        strata.index_add(x, 0, strata.tensor([0, 3]), strata.ones(2, 2)).numpy()
    # In range it adds, as torch does.
    want = torch.zeros(3, 2).index_add(0, torch.tensor([0, 2, 0]), torch.ones(3, 2))
    close(strata.index_add(x, 0, strata.tensor([0, 2, 0]), strata.ones(3, 2)), want)


def test_negative_list_and_tensor_indices_count_from_the_end_as_in_numpy():
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    x = strata.tensor(a)
    close(x[[0, -1]], a[[0, -1]])
    close(x[:, [-4, 1, -1]], a[:, [-4, 1, -1]])
    close(x[strata.tensor([[-1, -2], [0, 1]])], a[np.array([[-1, -2], [0, 1]])])
    with pytest.raises(strata.Error, match="out of range"):
        x[[0, -6]].numpy()


# ---- Python integers beyond 64 bits ----------------------------------------------------------

def test_integers_beyond_64_bits_are_a_clear_error():
    x = strata.ones(2, 3)
    with pytest.raises(strata.Error, match="9223372036854775808 does not fit in a 64-bit integer"):
        x.reshape(2**63, -1)
    with pytest.raises(strata.Error, match="does not fit in a 64-bit integer"):
        strata.zeros(2**64)
    with pytest.raises(IndexError, match="1180591620717411303424 is out of bounds"):
        x[2**70]
    with pytest.raises(IndexError, match="out of bounds"):
        x[-2**70]
    # Slice bounds clamp, as Python's own do.
    close(x[: 2**70], np.ones((2, 3), np.float32))
    close(x[-2**70:], np.ones((2, 3), np.float32))


# ---- sizes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2**61,), (2**40, 2**22), (2**62, 2), (2**31, 2**31, 4)])
def test_shapes_whose_bytes_overflow_are_refused(shape):
    with pytest.raises(strata.Error, match="too large"):
        strata.zeros(*shape)


def test_zero_size_views_compile_and_run():
    # reshape -> flip -> reshape of an empty tensor once divided by zero at compile.
    for shape in [(0,), (0, 6), (3, 0), (2, 0, 4)]:
        a = np.zeros(shape, np.float32)
        x = strata.tensor(a)
        y = strata.exp(strata.flip(x.reshape(0, 5), [0, 1]).reshape(shape)) + x
        close(y, np.exp(a) + a)


LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32,
         "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "torch_dtype": "float32", "tie_word_embeddings": False}


@pytest.mark.parametrize("mode", ["scan", "unrolled"])
@pytest.mark.parametrize("shape", [(1, 0), (0, 5), (0, 0)])
def test_llama_on_an_empty_sequence_or_batch_gives_empty_logits(shape, mode):
    model = strata.nn.LlamaForCausalLM(LLAMA, key=strata.random_key(3))
    model.layer_mode = mode
    logits = model(strata.tensor(np.zeros(shape, np.int64)))
    assert logits.numpy().shape == (*shape, LLAMA["vocab_size"])


# ---- modules ---------------------------------------------------------------------------------

def test_linear_with_no_features_is_what_torch_makes():
    for n_in, n_out in [(0, 0), (0, 3), (3, 0)]:
        layer = strata.nn.Linear(n_in, n_out)
        ref = torch.nn.Linear(n_in, n_out)
        x = np.ones((2, n_in), np.float32)
        assert layer.weight.numpy().shape == tuple(ref.weight.shape)
        got = layer(strata.tensor(x)).numpy()
        assert got.shape == (2, n_out)
        if n_in == 0:  # x W^T is all zeros and the bias bound is 0, as in torch
            np.testing.assert_array_equal(got, np.zeros((2, n_out), np.float32))


# ---- files -----------------------------------------------------------------------------------

def safetensors_bytes(header, data):
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    return struct.pack("<Q", len(text)) + text + data


def test_a_bool_tensor_holding_bytes_other_than_0_and_1_is_refused_on_load(tmp_path):
    path = tmp_path / "bools.safetensors"
    header = {"mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}
    path.write_bytes(safetensors_bytes(header, bytes([1, 0, 1])))
    assert strata.load_safetensors(str(path))["mask"].tolist() == [True, False, True]
    path.write_bytes(safetensors_bytes(header, bytes([1, 2, 1])))
    with pytest.raises(strata.Error, match=r"BOOL tensor 'mask' holds byte 2 at element 1"):
        strata.load_safetensors(str(path))


def test_a_name_that_is_not_utf8_keeps_its_message(tmp_path):
    path = tmp_path / "names.safetensors"
    header = b'{"w\xff": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    path.write_bytes(safetensors_bytes(header, b"\0\0\0\0"))
    with pytest.raises(strata.Error) as raised:
        strata.load_safetensors(str(path))
    assert str(raised.value).startswith("[safetensors]"), repr(str(raised.value))
    assert "names.safetensors" in str(raised.value)


def test_a_bad_path_in_save_pretrained_is_a_strata_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model = strata.nn.LlamaForCausalLM(LLAMA, key=strata.random_key(3))
    with pytest.raises(strata.Error):
        model.save_pretrained(str(blocker / "model"))


# ---- Python numbers that do not fit the dtype (the second probe) -----------------------------

@pytest.mark.parametrize("data,dtype", [([300], "int8"), ([256], "uint8"), ([2**40], "int32"),
                                        ([1.5e10], "int32"), ([float("nan")], "int32")])
def test_python_data_that_does_not_fit_the_dtype_is_refused_as_torch_refuses_it(data, dtype):
    with pytest.raises(RuntimeError, match="overflow"):
        torch.tensor(data, dtype=getattr(torch, dtype))
    with pytest.raises(strata.Error, match=f"does not fit in {dtype}|cannot be converted to {dtype}"):
        strata.tensor(data, dtype=dtype)


def test_a_negative_int_into_an_unsigned_dtype_is_refused():
    # torch wraps -1 into uint8 as 255 here (NumPy 2 refuses it): a clear
    # error is preferred over the guess.
    with pytest.raises(strata.Error, match=r"-1 does not fit in uint8 \(its range is \[0, 255\]"):
        strata.tensor([-1], dtype="uint8")
    with pytest.raises(strata.Error, match=r"-1 does not fit in uint8"):
        strata.full((2,), -1, dtype="uint8")


def test_python_data_that_fits_converts_as_torch_converts_it():
    for data, dtype in [([127, -128], "int8"), ([255, 0], "uint8"), ([1.9, -1.9], "int32"),
                        ([True, False], "int64"), ([2**63 - 1], "int64")]:
        want = torch.tensor(data, dtype=getattr(torch, dtype)).numpy()
        got = strata.tensor(data, dtype=dtype).numpy()
        assert got.dtype == want.dtype and (got == want).all(), (data, dtype, got, want)
    # A NumPy array converts as NumPy converts it (wrapping), as torch.tensor(array) does.
    a = np.array([300])
    assert strata.tensor(a, dtype="int8").numpy().tolist() == \
        torch.tensor(a, dtype=torch.int8).tolist() == [44]


@pytest.mark.parametrize("value,dtype", [(float("nan"), "int32"), (300, "int8"),
                                         (float("inf"), "int64"), (256, "uint8")])
def test_full_refuses_a_fill_value_the_dtype_cannot_hold(value, dtype):
    with pytest.raises(RuntimeError, match="overflow"):
        torch.full((2,), value, dtype=getattr(torch, dtype))
    with pytest.raises(strata.Error, match=dtype):
        strata.full((2,), value, dtype=dtype)


def test_full_is_exact_for_every_int64_and_infers_the_dtype_as_torch():
    big = 2**62 + 1  # no double holds it
    assert strata.full((2,), big, dtype="int64").numpy().tolist() == [big, big]
    for value in (3, 2.5, True):
        want = torch.full((2,), value)
        got = strata.full((2,), value)
        assert str(got.dtype).removeprefix("strata.") == str(want.dtype).removeprefix("torch.")
        assert got.numpy().tolist() == want.tolist()
    assert strata.full((2,), 2.9, dtype="int32").numpy().tolist() == \
        torch.full((2,), 2.9, dtype=torch.int32).tolist()


@pytest.mark.parametrize("dtype,value", [("uint8", 256), ("uint8", 300), ("int8", 1000),
                                         ("int16", -70000), ("int64", 2**62 + 1)])
def test_a_python_int_next_to_an_integer_tensor_wraps_as_in_torch(dtype, value):
    t = torch.tensor([1, 7], dtype=getattr(torch, dtype))
    s = strata.tensor([1, 7], dtype=dtype)
    for op in (lambda a: a + value, lambda a: a - value, lambda a: value + a, lambda a: a * value):
        assert op(s).numpy().tolist() == op(t).tolist()


def test_arange_into_a_narrow_integer_dtype_wraps_as_torch():
    for args, dtype in [((0, 300), "int8"), ((250, 260), "uint8"), ((-5, 5, 3), "uint8")]:
        want = torch.arange(*args, dtype=getattr(torch, dtype)).tolist()
        assert strata.arange(*args, dtype=dtype).numpy().tolist() == want, (args, dtype)


def test_integers_to_negative_integer_powers_are_refused_as_in_torch():
    x = strata.tensor([2, 3])
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.tensor([2, 3]) ** -1
    with pytest.raises(strata.Error, match="negative integer powers"):
        x ** -1
    with pytest.raises(strata.Error, match="negative integer powers"):
        strata.pow(x, -2)
    # A negative float exponent promotes, and tensor exponents follow torch.
    close(x ** -1.0, torch.tensor([2, 3]) ** -1.0)
    assert (x ** strata.tensor([-1, 2])).numpy().tolist() == \
        (torch.tensor([2, 3]) ** torch.tensor([-1, 2])).tolist()


# ---- integer division by zero: torch's ZeroDivisionError ------------------------------------

@pytest.mark.parametrize("op", ["remainder", "floor_divide", "trunc_divide"])
def test_integer_division_by_zero_is_an_error_from_the_sync(op):
    a, b = strata.tensor([5, 6]), strata.tensor([2, 0])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(torch.tensor([5, 6]), torch.tensor([2, 0]))
    y = getattr(strata, op)(a, b)
    with pytest.raises(strata.Error, match=r"integer division by zero.*at \[1\] of the divisor"):
        y.numpy()
    with pytest.raises(strata.Error, match="integer division by zero"):
        getattr(strata, op)(a, 0).numpy()


def test_floor_and_trunc_division_match_torch_on_every_sign():
    a = [7, -7, 7, -7, 6, -6, 0, 2**62]
    b = [2, 2, -2, -2, 3, 3, 5, -1]
    ta, tb = torch.tensor(a), torch.tensor(b)
    sa, sb = strata.tensor(a), strata.tensor(b)
    assert strata.floor_divide(sa, sb).numpy().tolist() == torch.floor_divide(ta, tb).tolist()
    assert (sa // sb).numpy().tolist() == (ta // tb).tolist()
    assert strata.trunc_divide(sa, sb).numpy().tolist() == \
        torch.div(ta, tb, rounding_mode="trunc").tolist()
    assert strata.remainder(sa, sb).numpy().tolist() == torch.remainder(ta, tb).tolist()
    # INT64_MIN // -1 overflows: torch's CPU kernel dies of SIGFPE there; strata
    # wraps, as NumPy does.
    with np.errstate(over="ignore"):
        want = (np.array([-(2**63)]) // np.array([-1])).tolist()
    assert strata.floor_divide(strata.tensor([-(2**63)]), strata.tensor([-1])).numpy().tolist() \
        == want
    fa, fb = torch.tensor([7.5, -7.5, 1.0]), torch.tensor([2.0, 2.0, 0.0])
    close(strata.floor_divide(strata.tensor(fa.numpy()), strata.tensor(fb.numpy())),
          torch.floor_divide(fa, fb))


def test_a_float_divisor_of_zero_is_not_an_error():
    # inf and NaN, as torch: only integer division raises.
    close(strata.remainder(strata.tensor([5.0]), 0.0), torch.remainder(torch.tensor([5.0]), 0.0))
    close(strata.remainder(strata.tensor([5]), strata.tensor([0.0])),
          torch.remainder(torch.tensor([5]), torch.tensor([0.0])))


def test_compiled_integer_division_by_zero_raises_as_eager_torch():
    def f(x, y):
        return x // y, torch.remainder(x, y)

    fn = torch.compile(f, backend="strata", fullgraph=True)
    x = torch.tensor([7, -7, 9])
    for y in (torch.tensor([2, -3, 4]), torch.tensor([-2, 2, 5])):
        for got, want in zip(fn(x, y), f(x, y)):
            assert got.tolist() == want.tolist()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(x, torch.tensor([0, 1, 1]))
    with pytest.raises(Exception, match="integer division by zero"):
        fn(x, torch.tensor([0, 1, 1]))


def test_compiled_softmax_of_integers_raises_as_eager_torch():
    def f(x):
        return torch.softmax(x, -1)

    x = torch.tensor([[1, 2, 3]])
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        f(x)
    with pytest.raises(Exception, match="not implemented for 'Long'"):
        torch.compile(f, backend="strata")(x)


def test_grad_of_an_integer_output_is_an_error_not_zeros():
    x = strata.tensor([1.0, -2.0])
    with pytest.raises(strata.Error, match="only a floating-point output has gradients"):
        strata.grad(lambda v: strata.sum(v > 0))(x)
    with pytest.raises(strata.Error, match="only a floating-point output has gradients"):
        strata.grad(lambda v: strata.sum(v.astype(strata.int32)))(x)


def test_vjp_of_a_function_with_only_integer_outputs_is_an_error_as_torch_func():
    x = strata.tensor([1.0, -2.0, 3.0])
    with pytest.raises(RuntimeError, match="floating-point"):
        torch.func.vjp(lambda v: v.to(torch.int32), torch.tensor([1.0, -2.0, 3.0]))
    with pytest.raises(strata.Error, match=r"\[vjp\] every output .* integer or bool"):
        strata.vjp(lambda v: v.astype(strata.int32), x)
    # an integer output beside a floating one gets no gradient (JAX's rule)
    (y, n), pullback = strata.vjp(lambda v: (v * v, (v > 0).astype(strata.int32)), x)
    (g,) = pullback((strata.ones_like(y), strata.ones_like(n)))
    np.testing.assert_allclose(np.asarray(g), [2.0, -4.0, 6.0])


# ---- clear errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("data,match", [
    ([2**64], "the integer 18446744073709551616 at \\[0\\] does not fit in 64 bits"),
    ([1, [2**70]], "1180591620717411303424"),
    ([1.0, None], "the element at \\[1\\] is None of type NoneType, not a number"),
    ([[1, 2], [3]], "ragged"),
    (["a"], "not a number"),
])
def test_python_data_numpy_reads_as_objects_says_which_element(data, match):
    with pytest.raises((strata.Error, TypeError), match=match):
        strata.tensor(data)


def test_an_int64_index_list_beyond_64_bits_says_so():
    with pytest.raises(strata.Error, match="does not fit in 64 bits"):
        strata.zeros(3, 4)[[2**65]]


def test_a_0d_tensor_is_not_iterable_and_others_iterate_their_rows():
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(torch.tensor(3))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(strata.tensor(3))
    rows = list(strata.tensor([[1, 2], [3, 4]]))
    assert [r.numpy().tolist() for r in rows] == [[1, 2], [3, 4]]


def test_mesh_and_mark_sharding_name_the_argument_that_is_wrong():
    with pytest.raises(TypeError, match="axis_names must be strings, got 5 at position 0"):
        strata.Mesh([0, 1], [2], (5,))
    with pytest.raises(TypeError, match="mesh_shape must be ints, got 2.0 at position 0"):
        strata.Mesh([0, 1], [2.0], ("a",))
    mesh = strata.Mesh([0, 1], [2], ("a",))
    with pytest.raises(TypeError, match="takes a strata.Tensor .* got ndarray"):
        strata.mark_sharding(np.ones(4), mesh, ("a",))


def test_a_nul_byte_in_a_path_keeps_the_whole_message(tmp_path):
    with pytest.raises(strata.Error) as e:
        strata.load_safetensors(str(tmp_path / "a\0b.safetensors"))
    assert "\\x00b.safetensors" in str(e.value)


# ---- strata.torch.scan misuse ----------------------------------------------------------------

def test_item_in_a_torch_scan_body_says_why_it_cannot_be():
    from strata.torch import scan
    with pytest.raises(strata.Error, match=r"reads a tensor's value as a Python number \(.item\(\)"):
        scan(lambda c, x: (c + x.item(), None), torch.zeros(()), torch.arange(3.0))


def test_a_torch_scan_nested_in_a_scan_body_runs_with_y_left_out():
    from strata.torch import scan

    def outer(c, x):
        inner, none = scan(lambda c2, x2: (c2 + x2, None), c, x)
        assert none is None
        return inner, None

    got, ys = scan(outer, torch.zeros(()), torch.ones(3, 2))
    assert float(got) == 6.0 and ys is None
    # A plain scan still runs after it.
    got, _ = scan(lambda c, x: (c + x, None), torch.zeros(()), torch.arange(4.0))
    assert float(got) == 6.0


# ---- the third probe (python/tests/probe_hostile_round3.py) ----------------------------------

def test_a_tensor_is_never_half_made():
    with pytest.raises(TypeError):
        strata.Tensor.__new__(strata.Tensor)
    with pytest.raises(TypeError):
        strata.Tensor()
    assert strata.Tensor([1.0, 2.0]).numpy().tolist() == [1.0, 2.0]


def test_data_nested_too_deep_is_an_error_not_a_crash():
    deep = [1.0]
    for _ in range(100000):
        deep = [deep]
    with pytest.raises(strata.Error, match="nested more than 64 levels"):
        strata.tensor(deep)


def test_a_long_chain_of_scalar_operands_compiles_in_linear_time():
    # 20000 ops, each with a Python scalar (a program parameter): the fused
    # loop's translation once looked at every parameter for each one.
    x = strata.zeros(4)
    for _ in range(20000):
        x = x + 1.0
    assert x.numpy().tolist() == [20000.0] * 4


def test_float_floor_division_and_integer_powers_match_torch():
    a, b = [5.0, -5.0, 7.5, -7.5, 1.0, 0.0], [float("inf"), float("inf"), 2.0, 2.0, 0.0, -3.0]
    close(strata.floor_divide(strata.tensor(a), strata.tensor(b)),
          torch.floor_divide(torch.tensor(a), torch.tensor(b)))
    base, exp = [2, 1, -1, -1, 3], [-1, -2, -3, -2, 2]
    assert (strata.tensor(base) ** strata.tensor(exp)).numpy().tolist() == \
        (torch.tensor(base) ** torch.tensor(exp)).tolist()


@pytest.mark.parametrize("dtype,value", [("int32", 2**40), ("int8", 200), ("int64", float("nan")),
                                         ("int32", float("inf"))])
def test_setitem_refuses_a_number_the_integer_tensor_cannot_hold(dtype, value):
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=getattr(torch, dtype))[0] = value
    x = strata.zeros(2, dtype=dtype)
    with pytest.raises(strata.Error, match=f"does not fit in {dtype}|cannot be converted to {dtype}"):
        x[0] = value


def test_bool_tensors_refuse_arithmetic_torch_refuses():
    b = strata.tensor([True, False])
    for op in (lambda t: +t, strata.floor, strata.relu):
        with pytest.raises(strata.Error, match="bool"):
            op(b)


def test_switch_case_clamps_an_unsigned_index_beyond_int64_to_the_last_branch():
    out = strata.switch_case(strata.tensor(np.uint64(2**64 - 1)),
                             [lambda x: x * 0.0, lambda x: x * 0.0 + 1.0], (strata.tensor([5.0]),))
    assert out.numpy().tolist() == [1.0]


def test_optimizers_refuse_what_torch_refuses():
    p = strata.nn.Linear(2, 2)
    for make in (lambda: strata.optim.AdamW(p.parameters(), lr=float("nan")),
                 lambda: strata.optim.AdamW(p.parameters(), betas=(float("nan"), 0.9)),
                 lambda: strata.optim.AdamW([]), lambda: strata.optim.SGD([], lr=0.1)):
        with pytest.raises(strata.Error):
            make()
    with pytest.raises(strata.Error, match="floating-point"):
        strata.optim.clip_grad_norm_([strata.tensor([3, 4])], 1.0)


def test_norms_over_several_trailing_dims_match_torch():
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3) % 7
    close(strata.nn.LayerNorm((2, 3))(strata.tensor(x)),
          torch.nn.LayerNorm((2, 3))(torch.tensor(x)), atol=1e-5)
    close(strata.nn.RMSNorm((2, 3), eps=1e-6)(strata.tensor(x)),
          torch.nn.RMSNorm((2, 3), eps=1e-6)(torch.tensor(x)), atol=1e-5)
    with pytest.raises(strata.Error, match="at least one dimension"):
        strata.layer_norm(strata.tensor(1.0))
    with pytest.raises(strata.Error, match="kernel_size must be positive"):
        strata.nn.Conv2d(2, 3, 0)


def test_python_conversions_and_arguments_say_what_is_wrong():
    assert int(strata.tensor(1.9)) == int(torch.tensor(1.9)) == 1
    with pytest.raises(ValueError, match="NaN"):
        int(strata.tensor(float("nan")))
    with pytest.raises(TypeError, match="fusion must be a bool"):
        strata.set_config(fusion="yes")
    with pytest.raises(TypeError, match="dump_dir must be a str"):
        strata.set_config(dump_dir=None)
    with pytest.raises(TypeError, match="takes strata.Tensors"):
        strata.sync(3)
    with pytest.raises(TypeError, match="takes strata.Tensors"):
        strata.hlo_text(np.ones(2))
    with pytest.raises(TypeError, match="must be numbers"):
        strata.arange("5")
    with pytest.raises(strata.Error, match=r"\[-2\^63, 2\^64\)"):
        strata.random_key(2**64)
    assert strata.random_key(-1).numpy().tolist() == [2**64 - 1, 0]
    with pytest.raises(TypeError, match="missing|nothing"):
        strata.ones(2).reshape()
    with pytest.raises(TypeError, match="bool"):
        strata.ones(2).reshape(True, 2)
    with pytest.raises(TypeError, match="deletion"):
        del strata.ones(2)[0]
    with pytest.raises(strata.Error, match="output path is empty"):
        strata.save_safetensors("", {"a": strata.ones(1)})
    assert strata.tensor([1, 2], dtype=float).dtype == strata.float64  # torch's float
    assert strata.Mesh(np.arange(2), [2], ("a",)).device_ids == [0, 1]
    lo, hi = torch.tensor([0.0, 2.0, 0.0]), torch.tensor([1.0, 3.0, 0.5])
    close(strata.ones(3).clamp(strata.tensor(lo.numpy()), strata.tensor(hi.numpy())),
          torch.ones(3).clamp(lo, hi))


def test_module_lookups_name_what_is_missing():
    m = strata.nn.ModuleList([strata.nn.Linear(2, 2)])
    with pytest.raises(IndexError, match=r"\[ModuleList\] index 3 is out of range for a ModuleList of 1"):
        m[3]
    with pytest.raises(strata.Error, match="no parameter or buffer named 'zz'"):
        with m._using({"zz": strata.ones(1)}):
            pass
    lin = strata.nn.Linear(2, 2)
    state = {k: np.asarray(v.numpy()) + 1 for k, v in lin.state_dict().items()}
    lin.load_state_dict(state)
    close(lin.weight, state["weight"])


def test_torch_scan_layers_and_scan_bodies_say_what_is_wrong():
    from strata.torch import scan, scan_layers
    with pytest.raises(TypeError, match="takes a torch.nn.ModuleList"):
        scan_layers(torch.nn.Linear(2, 2))
    const = torch.ones(2)
    with pytest.raises(strata.Error, match="traced once for every step"):
        scan(lambda c, x: (c * float(const.sum() * x), None), torch.zeros(()), torch.arange(3.0))


def test_negative_tensor_indices_count_from_the_end_in_int64_and_errors_name_them():
    x = np.arange(600, dtype=np.float32).reshape(300, 2)
    idx = np.array([-1, -300, 5], np.int8)
    close(strata.tensor(x)[strata.tensor(idx)], torch.tensor(x)[torch.tensor(idx, dtype=torch.int64)])
    with pytest.raises(strata.Error, match="index -4 is out of range"):
        strata.zeros(3, 4)[strata.tensor(np.array([-4], np.int8))].numpy()


# ---- the third probe, what was left ----------------------------------------------------------

def test_python_data_with_numpy_float64_keeps_float64_as_torch():
    assert strata.tensor([np.array(1.5), np.array(2.5)]).dtype == strata.float64  # as NumPy
    for data in ([np.float64(1.5), np.float64(2.5)], [1.0, np.float64(2.0)], np.float64(3.0),
                 [np.float32(1.0)], [1.0, 2.0]):
        assert strata.tensor(data).dtype.name == str(torch.tensor(data).dtype).split(".")[1]
        np.testing.assert_array_equal(np.asarray(strata.tensor(data)), torch.tensor(data).numpy())


def test_compiled_one_hot_of_a_class_out_of_range_raises_as_eager_torch():
    f = torch.compile(lambda x: torch.nn.functional.one_hot(x, 3), backend="strata")
    ids = torch.tensor([2, 0, 1])
    torch.testing.assert_close(f(ids), torch.nn.functional.one_hot(ids, 3))
    for bad in ([3], [-1]):
        with pytest.raises(RuntimeError):
            torch.nn.functional.one_hot(torch.tensor(bad), 3)
        with pytest.raises(strata.Error, match=r"one_hot.*out of range \[0, 3\)"):
            f(torch.tensor(bad))


def test_compiled_in_place_write_to_an_expanded_tensor_raises_as_eager_torch():
    def overlapping(x):
        y = x.expand(3, 2)
        y.add_(1)
        return y

    with pytest.raises(RuntimeError, match="more than one element"):
        overlapping(torch.zeros(1, 2))
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.compile(overlapping, backend="strata")(torch.zeros(1, 2))

    def cloned(x):  # the same write to a clone is fine, and a row of it read back
        y = x.expand(3, 2).clone()
        y.add_(1)
        y[0] += 2
        return y * y[0]

    x = torch.tensor([[1.0, 5.0]])
    torch.testing.assert_close(torch.compile(cloned, backend="strata")(x), cloned(x))
