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
