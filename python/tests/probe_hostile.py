"""A fresh adversarial probe (issue 50): hostile but ordinary inputs through the Python API,
the PyTorch front end and the CLI, each with an outcome worked out independently (a value
from NumPy or eager PyTorch on the CPU, or a clear error).

    python probe_hostile.py [--family F] [--id ID] [--json out.json] [--list]

Cases run one after another in a worker subprocess; a worker that dies is restarted and its
case recorded as CRASH, one silent for 60 s is killed and its case recorded as HANG. Outcomes:
ok-value, ok-error, CRASH, HANG, WRONG (a value unlike the reference, or a value where the
reference refuses), UNCLEAR (an error that does not say what was wrong), REFUSED (a clear
error where the reference gives a value). Not named test_*: CI's pytest glob skips it.
The harness (case table, classifier, worker, summary) is probe_harness.py."""
import functools
import json
import os
import re
import struct
import threading

import numpy as np
import strata
import torch

import probe_harness
from probe_harness import (
    CASES, F32, HLO_ADD, SD, TD, TMP, S, V, WrongValue, add, ar, check_value, err, leak_from_scan,
    llama_dir, main, mesh, save_inputs, shard, st_bytes, tmp, token_file, train_args, tt, write)

probe_harness.use_rules(probe_harness.HOSTILE_RULES)
# the CLI's own timeout stays under the worker's 60 s, so that a hung CLI is its case's HANG
cli = functools.partial(probe_harness.cli, timeout=55)

# ---- shapes: zero-size and size-1 dims, broadcasting, huge shapes, negative dims --------------

def _binary_bcast(sa, sb):
    a, b = ar(*sa), ar(*sb, start=1)
    return V(S(a) * S(b) + S(b), a * b + b)


for i, (sa, sb) in enumerate([((0, 1), (1, 0)), ((3, 1, 0), (1, 4, 1)), ((1,), (0,)),
                              ((), (0, 2)), ((1, 1, 1), (5,)), ((2, 1, 3), (4, 1)),
                              ((0,), ()), ((1, 0, 1), (2, 1, 3))]):
    add("shapes", f"shapes.bcast.{i}", lambda sa=sa, sb=sb: _binary_bcast(sa, sb))

for i, (sa, sb) in enumerate([((2, 3), (3, 2)), ((0,), (2,)), ((2, 0), (3, 1, 2)),
                              ((4, 1), (3,))]):
    if (sa, sb) == ((4, 1), (3,)):
        continue  # broadcastable: (4,3)
    err("shapes", f"shapes.bcast_bad.{i}", lambda sa=sa, sb=sb: S(ar(*sa)) + S(ar(*sb)),
        match=r"broadcast|shape")

add("shapes", "shapes.where3_bcast", lambda: V(
    strata.where(S(ar(2, 1, 1) > 0), S(ar(1, 3, 1)), S(ar(1, 1, 4, start=2))),
    np.where(ar(2, 1, 1) > 0, ar(1, 3, 1), ar(1, 1, 4, start=2))))
add("shapes", "shapes.where_empty", lambda: V(
    strata.where(S(np.zeros((0, 3), bool)), S(ar(3)), 1.0), np.zeros((0, 3), F32)))
err("shapes", "shapes.reshape_0_minus1", lambda: S(np.zeros((0, 4), F32)).reshape(0, -1),
    match=r"-1|infer|ambig|unspecified")
err("shapes", "shapes.reshape_two_minus1", lambda: S(ar(6)).reshape(-1, -1),
    match=r"-1|one|infer")
err("shapes", "shapes.reshape_minus2", lambda: S(ar(6)).reshape(-2, -3), match=r"-2|-3|negative|invalid")
add("shapes", "shapes.reshape_0d_to_111", lambda: V(S(np.float32(4)).reshape(1, 1, 1),
                                                    np.full((1, 1, 1), 4, F32)))
add("shapes", "shapes.reshape_minus1_empty_with_sizes", lambda: V(
    S(np.zeros((0, 4), F32)).reshape(-1, 2), np.zeros((0, 2), F32)))
err("shapes", "shapes.zeros_negative", lambda: strata.zeros(3, -1), match=r"-1|negative")
err("shapes", "shapes.full_negative", lambda: strata.full((2, -3), 1.0), match=r"-3|negative")
err("shapes", "shapes.ones_tuple_negative", lambda: strata.ones((-2,)), match=r"-2|negative")
add("shapes", "shapes.full_0d", lambda: V(strata.full((), 2.5), np.float32(2.5)))
add("shapes", "shapes.full_empty_shape_list", lambda: V(strata.full([], 1.0), np.float32(1)))
add("shapes", "shapes.eye_0", lambda: V(strata.eye(0), np.eye(0, dtype=F32)))
err("shapes", "shapes.eye_negative", lambda: strata.eye(-2), match=r"-2|negative")
add("shapes", "shapes.expand_1_to_0", lambda: V(S(ar(1, 3)).expand(0, 3), np.zeros((0, 3), F32)))
err("shapes", "shapes.expand_new_dim_minus1", lambda: S(ar(3)).expand(-1, 3),
    match=r"-1|new|leading|expand")
err("shapes", "shapes.expand_2_to_4", lambda: S(ar(2, 1)).expand(4, 3), match=r"2|expand")
add("shapes", "shapes.broadcast_to_0", lambda: V(strata.broadcast_to(S(ar(3)), (0, 3)),
                                                 np.zeros((0, 3), F32)))
err("shapes", "shapes.broadcast_to_fewer_dims", lambda: strata.broadcast_to(S(ar(2, 3)), (3,)),
    match=r"broadcast|shape|rank|dim")
add("shapes", "shapes.sum_empty_dim", lambda: V(S(np.zeros((3, 0), F32)).sum(1), np.zeros(3, F32)))
add("shapes", "shapes.mean_empty_is_nan", lambda: V(S(np.zeros((0,), F32)).mean(),
                                                    np.float32(np.nan)))
err("shapes", "shapes.amax_empty", lambda: strata.amax(S(np.zeros((0, 3), F32)), 0),
    match=r"empty|zero|0|identity")
add("shapes", "shapes.amax_empty_other_dim", lambda: V(strata.amax(S(np.zeros((0, 3), F32)), 1),
                                                       np.zeros((0,), F32)))
err("shapes", "shapes.argmax_empty", lambda: strata.argmax(S(np.zeros((0,), F32))),
    match=r"empty|zero|0")
add("shapes", "shapes.softmax_0x5", lambda: V(strata.softmax(S(np.zeros((0, 5), F32)), -1),
                                              np.zeros((0, 5), F32)))
add("shapes", "shapes.softmax_5x0", lambda: V(strata.softmax(S(np.zeros((5, 0), F32)), -1),
                                              np.zeros((5, 0), F32)))
add("shapes", "shapes.matmul_0k_k0", lambda: V(S(np.zeros((0, 3), F32)) @ S(np.zeros((3, 0), F32)),
                                               np.zeros((0, 0), F32)))
add("shapes", "shapes.matmul_inner_0", lambda: V(S(np.zeros((3, 0), F32)) @ S(np.zeros((0, 4), F32)),
                                                 np.zeros((3, 4), F32)))
add("shapes", "shapes.matmul_vec_vec_0", lambda: V(S(np.zeros(0, F32)) @ S(np.zeros(0, F32)),
                                                   np.float32(0)))
add("shapes", "shapes.matmul_batched_bcast", lambda: V(S(ar(2, 1, 3, 4)) @ S(ar(5, 4, 2)),
                                                       ar(2, 1, 3, 4) @ ar(5, 4, 2)))
add("shapes", "shapes.matmul_vec_mat", lambda: V(S(ar(3)) @ S(ar(2, 3, 4)), ar(3) @ ar(2, 3, 4)))
err("shapes", "shapes.matmul_0d", lambda: S(np.float32(2)) @ S(ar(3)), match=r"0-d|scalar|dim|rank")
err("shapes", "shapes.matmul_batch_mismatch", lambda: S(ar(2, 3, 4)) @ S(ar(3, 4, 5)),
    match=r"broadcast|batch|2.*3|shape")
err("shapes", "shapes.transpose_dim_oob", lambda: strata.transpose(S(ar(2, 3)), 0, 2),
    match=r"2|range|dim")
err("shapes", "shapes.permute_dup", lambda: S(ar(2, 3)).permute(0, 0), match=r"repeat|dup|perm|twice")
err("shapes", "shapes.permute_short", lambda: S(ar(2, 3, 4)).permute(1, 0), match=r"perm|dims|3|2")
add("shapes", "shapes.permute_negative", lambda: V(S(ar(2, 3, 4)).permute(-1, 0, -2),
                                                   ar(2, 3, 4).transpose(2, 0, 1)))
add("shapes", "shapes.squeeze_non1", lambda: V(S(ar(2, 3)).squeeze(0), ar(2, 3)))
err("shapes", "shapes.squeeze_oob", lambda: S(ar(2, 1)).squeeze(2), match=r"2|range|dim")
err("shapes", "shapes.unsqueeze_oob", lambda: S(ar(2, 3)).unsqueeze(3), match=r"3|range|dim")
add("shapes", "shapes.unsqueeze_neg3", lambda: V(S(ar(2, 3)).unsqueeze(-3), ar(1, 2, 3)))
add("shapes", "shapes.unsqueeze_0d", lambda: V(S(np.float32(1)).unsqueeze(-1), np.ones(1, F32)))
add("shapes", "shapes.flatten_0d", lambda: V(S(np.float32(3)).flatten(), np.full(1, 3, F32)))
err("shapes", "shapes.flatten_start_after_end", lambda: strata.flatten(S(ar(2, 3, 4)), 2, 1),
    match=r"start|end|flatten")
err("shapes", "shapes.cat_rank_mismatch", lambda: strata.cat([S(ar(2, 3)), S(ar(3))]),
    match=r"dim|rank|shape")
err("shapes", "shapes.cat_empty_list", lambda: strata.cat([]), match=r"empty|at least|no tensor|list")
err("shapes", "shapes.stack_mismatch", lambda: strata.stack([S(ar(2)), S(ar(3))]),
    match=r"shape|same|2|3")
err("shapes", "shapes.stack_empty", lambda: strata.stack([]), match=r"empty|at least|no tensor|list")
add("shapes", "shapes.stack_dim_neg", lambda: V(strata.stack([S(ar(2, 3)), S(ar(2, 3))], -1),
                                                np.stack([ar(2, 3), ar(2, 3)], -1)))
err("shapes", "shapes.stack_dim_oob", lambda: strata.stack([S(ar(2)), S(ar(2))], 3),
    match=r"3|range|dim")
err("shapes", "shapes.split_size_0", lambda: strata.split(S(ar(4)), 0), match=r"0|positive|size")
err("shapes", "shapes.chunk_0", lambda: strata.chunk(S(ar(4)), 0), match=r"0|positive|chunk")
add("shapes", "shapes.chunk_empty_dim", lambda: [V(c, tc) for c, tc in zip(
    strata.chunk(S(np.zeros((0, 2), F32)), 3), torch.chunk(torch.zeros(0, 2), 3))]
    if len(strata.chunk(S(np.zeros((0, 2), F32)), 3)) == len(torch.chunk(torch.zeros(0, 2), 3))
    else V(np.zeros(len(strata.chunk(S(np.zeros((0, 2), F32)), 3))),
           np.zeros(len(torch.chunk(torch.zeros(0, 2), 3)))))
add("shapes", "shapes.split_uneven", lambda: [V(a, b) for a, b in zip(
    strata.split(S(ar(7, 2)), 3), torch.split(tt(ar(7, 2)), 3))])
err("shapes", "shapes.flip_dup_dims", lambda: strata.flip(S(ar(2, 3)), [0, 0]),
    match=r"repeat|dup|twice|flip")
add("shapes", "shapes.cumsum_size1", lambda: V(strata.cumsum(S(ar(1, 4)), 0), ar(1, 4)))
err("shapes", "shapes.topk_k_too_big", lambda: strata.topk(S(ar(3)), 4), match=r"4|k|range|3")
add("shapes", "shapes.topk_k0", lambda: [V(strata.topk(S(ar(3)), 0)[0], np.zeros(0, F32))])
err("shapes", "shapes.topk_k_negative", lambda: strata.topk(S(ar(3)), -1), match=r"-1|k|negative|range")
add("shapes", "shapes.sort_0d", lambda: V(strata.sort(S(np.float32(2)))[0], np.float32(2)))
add("shapes", "shapes.arange_empty", lambda: V(strata.arange(0), np.arange(0)))
err("shapes", "shapes.arange_step0", lambda: strata.arange(0, 4, 0), match=r"step|zero|0")
add("shapes", "shapes.arange_float_len", lambda: V(strata.arange(0.0, 1.0, 0.1),
                                                   torch.arange(0.0, 1.0, 0.1)))
add("shapes", "shapes.arange_neg_step", lambda: V(strata.arange(5, 0, -2), np.arange(5, 0, -2)))
add("shapes", "shapes.pad_zero_size", lambda: V(strata.pad(S(np.zeros((0, 2), F32)), [1, 0], [1, 1], 5.0),
                                                np.pad(np.zeros((0, 2), F32), ((1, 1), (0, 1)),
                                                       constant_values=5)))
err("shapes", "shapes.pad_wrong_len", lambda: strata.pad(S(ar(2, 2)), [1], [1]),
    match=r"pad|dim|rank|2|1")
add("shapes", "shapes.softmax_0d", lambda: V(strata.softmax(S(np.float32(3)), -1),
                                             torch.softmax(torch.tensor(3.0), -1)))
err("shapes", "shapes.sum_dim_neg_oob", lambda: S(ar(2, 3)).sum(-3), match=r"-3|range|dim")
add("shapes", "shapes.sum_dims_tuple_neg", lambda: V(S(ar(2, 3, 4)).sum((-1, 0)),
                                                     ar(2, 3, 4).sum((2, 0))))
err("shapes", "shapes.sum_dims_dup", lambda: S(ar(2, 3)).sum((1, -1)), match=r"repeat|dup|twice|1")
add("shapes", "shapes.mean_keepdim_0d", lambda: V(S(np.float32(3)).mean(0, True),
                                                  torch.tensor(3.0).mean(0, True)))
add("shapes", "shapes.one_hot_0_classes_empty", lambda: V(
    strata.one_hot(S(np.zeros(0, np.int64)), 0), np.zeros((0, 0), np.int64)))
err("shapes", "shapes.huge_reshape_zero_elements", lambda: S(np.zeros(0, F32)).reshape(2**62, 4, 0),
    match=r"large|overflow|fit")
add("shapes", "shapes.huge_broadcast_refused", lambda: strata.broadcast_to(S(ar(1)), (2**40, 2**40)),
    "error")
CASES[-1].match = r"large|overflow|too"
add("shapes", "shapes.expand_then_slice", lambda: V(
    strata.broadcast_to(S(ar(1)), (1000, 1000))[:3, 998:], np.full((3, 2), ar(1)[0], F32)))
add("shapes", "shapes.layer_norm_empty_batch", lambda: V(
    strata.layer_norm(S(np.zeros((0, 4), F32)), [4]) if True else None, np.zeros((0, 4), F32)),
    "either")
add("shapes", "shapes.size1_everywhere", lambda: V(
    (S(ar(1, 1, 1)) * S(ar(1, 1)) + S(ar(1))).sum((0, 2)), (ar(1, 1, 1) * ar(1, 1) + ar(1)).sum((0, 2))))
add("shapes", "shapes.transpose_0size", lambda: V(strata.transpose(S(np.zeros((0, 3, 1), F32)), 0, 2),
                                                  np.zeros((1, 3, 0), F32)))
add("shapes", "shapes.cumprod_zero_len", lambda: V(strata.cumprod(S(np.zeros((2, 0), F32)), 1),
                                                   np.zeros((2, 0), F32)))
add("shapes", "shapes.logcumsumexp_size1", lambda: V(strata.logcumsumexp(S(ar(3, 1)), 1), ar(3, 1)))
add("shapes", "shapes.argsort_0size", lambda: V(strata.argsort(S(np.zeros((0, 3), F32)), 0),
                                                np.zeros((0, 3), np.int64)))
add("shapes", "shapes.max_pool_exact", lambda: V(
    strata.max_pool2d(S(ar(1, 1, 4, 4)), 2) if True else None,
    torch.nn.functional.max_pool2d(tt(ar(1, 1, 4, 4)), 2)), "either")
err("shapes", "shapes.conv_channel_mismatch", lambda: strata.conv2d(S(ar(1, 3, 5, 5)), S(ar(2, 4, 3, 3))),
    match=r"channel|3|4|shape")
err("shapes", "shapes.conv_kernel_bigger_than_input", lambda: strata.conv2d(S(ar(1, 1, 2, 2)), S(ar(1, 1, 3, 3))),
    match=r"kernel|size|small|3|2|shape")

# ---- dtypes: bool, int8..int64, uint8..uint64, f16, bf16, f32, f64 and mixes -----------------

def st(values, dtype):
    """The same values as a strata tensor and a torch tensor of `dtype`."""
    t = torch.tensor(values, dtype=TD[dtype])
    return S(t.float().numpy() if dtype == "bfloat16" else t.numpy()).astype(SD[dtype]), t


def both(f, values, dtype, g=None, **kw):
    s, t = st(values, dtype)
    return V(f(s), (g or f)(t), **kw)


def both2(f, va, da, vb, db, g=None, **kw):
    sa, ta = st(va, da)
    sb, tb = st(vb, db)
    return V(f(sa, sb), (g or f)(ta, tb), **kw)


# wrap-around of fixed-width integers, as torch (and C) do
add("dtypes", "dtypes.int8_add_wraps", lambda: both2(lambda a, b: a + b, [127, -128], "int8", [1, -1], "int8"))
add("dtypes", "dtypes.uint8_sub_wraps", lambda: both2(lambda a, b: a - b, [0, 5], "uint8", [1, 6], "uint8"))
add("dtypes", "dtypes.int16_mul_wraps", lambda: both2(lambda a, b: a * b, [300, -300], "int16", [300, 300], "int16"))
add("dtypes", "dtypes.int32_neg_min", lambda: both(lambda a: -a, [-2**31, 5], "int32"))
add("dtypes", "dtypes.int8_abs_min", lambda: both(lambda a: a.abs(), [-128, -3], "int8"))
add("dtypes", "dtypes.uint8_plus_int8", lambda: both2(lambda a, b: a + b, [200, 1], "uint8", [-1, 100], "int8"))
add("dtypes", "dtypes.int8_times_uint8_promotes", lambda: both2(lambda a, b: a * b, [-2, 3], "int8", [250, 2], "uint8"))
add("dtypes", "dtypes.bool_plus_bool", lambda: both2(lambda a, b: a + b, [True, False, True], "bool",
                                                      [True, False, False], "bool"))
add("dtypes", "dtypes.bool_times_int8", lambda: both2(lambda a, b: a * b, [True, False], "bool", [-5, 7], "int8"))
add("dtypes", "dtypes.int32_plus_f16", lambda: both2(lambda a, b: a + b, [70000, 3], "int32", [1.5, 2.0], "float16"))
add("dtypes", "dtypes.bf16_plus_f16", lambda: both2(lambda a, b: a + b, [1.5, 3.0], "bfloat16", [0.25, 1e4], "float16"))
add("dtypes", "dtypes.f16_plus_f64", lambda: both2(lambda a, b: a + b, [1.5], "float16", [1e-10], "float64"))
add("dtypes", "dtypes.int64_div_int64", lambda: both2(lambda a, b: a / b, [7, -7, 0], "int64", [2, 2, 3], "int64"))
add("dtypes", "dtypes.int_div_by_zero_true", lambda: both2(lambda a, b: a / b, [1, -1, 0], "int32", [0, 0, 0], "int32"))
add("dtypes", "dtypes.int_remainder_negative", lambda: both2(strata.remainder, [7, -7, 7, -7], "int64",
                                                              [3, 3, -3, -3], "int64", torch.remainder))
add("dtypes", "dtypes.float_remainder_negative", lambda: both2(strata.remainder, [5.5, -5.5, 5.5], "float32",
                                                                [2.0, 2.0, -2.0], "float32", torch.remainder))
add("dtypes", "dtypes.int_remainder_by_zero", lambda: strata.remainder(S([5, 3]), S([0, 1])), "either")
CASES[-1].match = r"zero|divis"
add("dtypes", "dtypes.uint8_remainder", lambda: both2(strata.remainder, [250, 7], "uint8", [7, 250], "uint8",
                                                       torch.remainder))
add("dtypes", "dtypes.f16_overflow_inf", lambda: both(lambda a: a * 1000, [70.0, -70.0], "float16"))
add("dtypes", "dtypes.bf16_rounding", lambda: both(lambda a: a + 1, [255.0, 256.5, 1e-3], "bfloat16"))
add("dtypes", "dtypes.sum_int8_gives_int64", lambda: both(lambda a: a.sum(), [100, 100, 100], "int8"))
add("dtypes", "dtypes.sum_uint8_gives_int64", lambda: both(lambda a: a.sum(), [200, 200], "uint8"))
add("dtypes", "dtypes.sum_bool_gives_int64", lambda: both(lambda a: a.sum(), [True, True, False], "bool"))
add("dtypes", "dtypes.cumsum_bool", lambda: both(lambda a: a.cumsum(0), [True, True, False], "bool"))
add("dtypes", "dtypes.cumsum_int8", lambda: both(lambda a: a.cumsum(0), [100, 100], "int8"))
add("dtypes", "dtypes.cumprod_int16", lambda: both(lambda a: a.cumprod(0), [300, 300], "int16"))
err("dtypes", "dtypes.mean_of_int", lambda: S([1, 2]).mean(), match=r"int|float|dtype")
add("dtypes", "dtypes.mean_f16", lambda: both(lambda a: a.mean(), [60000.0, 60000.0], "float16", rtol=1e-3))
add("dtypes", "dtypes.exp_of_int", lambda: both(lambda a: a.exp(), [0, 1, 2], "int32"))
add("dtypes", "dtypes.exp_of_bool", lambda: both(lambda a: a.exp(), [True, False], "bool"))
add("dtypes", "dtypes.sqrt_negative_nan", lambda: both(lambda a: a.sqrt(), [-1.0, 4.0], "float32"))
add("dtypes", "dtypes.log_zero", lambda: both(lambda a: a.log(), [0.0, -0.0, -1.0], "float64"))
add("dtypes", "dtypes.pow_int_neg_exp", lambda: strata.pow(S([2, 3]), -1), "error")
CASES[-1].match = r"negative|integer"
add("dtypes", "dtypes.pow_int_int", lambda: both2(strata.pow, [2, -3, 0], "int64", [10, 3, 0], "int64", torch.pow))
add("dtypes", "dtypes.pow_int_by_float", lambda: both(lambda a: a ** 0.5, [4, 9], "int64"))
add("dtypes", "dtypes.pow_float_neg_base_frac", lambda: both(lambda a: a ** 0.5, [-4.0], "float32"))
add("dtypes", "dtypes.pow_inf", lambda: both(lambda a: a ** 0, [float("inf"), float("nan")], "float32"))
add("dtypes", "dtypes.sign_uint8", lambda: both(lambda a: a.sign(), [0, 200], "uint8"))
# torch's sign(nan) is 0, NumPy's nan: NumPy's is taken (see the report)
add("dtypes", "dtypes.sign_nan", lambda: V(S(np.array([np.nan, -0.0], F32)).sign(), np.sign(np.array([np.nan, -0.0], F32))))
add("dtypes", "dtypes.maximum_nan", lambda: both2(strata.maximum, [float("nan"), 1.0], "float32",
                                                   [0.0, float("nan")], "float32", torch.maximum))
add("dtypes", "dtypes.minimum_nan_f16", lambda: both2(strata.minimum, [float("nan"), 1.0], "float16",
                                                       [0.0, 2.0], "float16", torch.minimum))
add("dtypes", "dtypes.amax_nan", lambda: both(lambda a: a.amax(), [1.0, float("nan"), 3.0], "float32",
                                               lambda t: t.amax()))
add("dtypes", "dtypes.argmax_nan", lambda: both(lambda a: a.argmax(), [1.0, float("nan"), 3.0], "float32",
                                                 lambda t: t.argmax()))
add("dtypes", "dtypes.clamp_nan", lambda: both(lambda a: strata.clamp(a, 0.0, 1.0), [float("nan"), 2.0],
                                                "float32", lambda t: t.clamp(0.0, 1.0)))
add("dtypes", "dtypes.clamp_int_by_int", lambda: both(lambda a: strata.clamp(a, -1, 1), [-5, 5, 0],
                                                       "int8", lambda t: t.clamp(-1, 1)))
add("dtypes", "dtypes.clamp_min_gt_max", lambda: both(lambda a: strata.clamp(a, 2.0, 1.0), [0.0, 5.0],
                                                       "float32", lambda t: t.clamp(2.0, 1.0)))
add("dtypes", "dtypes.sort_nan", lambda: both(lambda a: strata.sort(a)[0], [3.0, float("nan"), -1.0],
                                               "float32", lambda t: torch.sort(t)[0]))
add("dtypes", "dtypes.sort_int8_desc", lambda: both(lambda a: strata.sort(a, descending=True)[0],
                                                     [-128, 127, 0], "int8",
                                                     lambda t: torch.sort(t, descending=True)[0]))
add("dtypes", "dtypes.sort_bool", lambda: both(lambda a: strata.sort(a)[0], [True, False, True], "bool",
                                                lambda t: torch.sort(t)[0]))
add("dtypes", "dtypes.eq_f16_f32", lambda: both2(lambda a, b: a == b, [0.1], "float16", [0.1], "float32"))
# torch wraps -1 to 255 first; the exact answer (NumPy 2's) is taken
add("dtypes", "dtypes.lt_uint8_negative_scalar", lambda: both(lambda a: a < -1, [0, 255], "uint8"))
add("dtypes", "dtypes.uint8_plus_256", lambda: both(lambda a: a + 256, [1], "uint8"), "either")
add("dtypes", "dtypes.int8_plus_float_scalar", lambda: both(lambda a: a + 0.5, [1, -1], "int8"))
add("dtypes", "dtypes.bool_plus_float_scalar", lambda: both(lambda a: a + 1.5, [True, False], "bool"))
add("dtypes", "dtypes.f16_plus_int_scalar_big", lambda: both(lambda a: a + 100000, [1.0], "float16"))
add("dtypes", "dtypes.bf16_matmul", lambda: both2(lambda a, b: a @ b, [[1.0, 2.0]], "bfloat16",
                                                   [[3.0], [4.0]], "bfloat16"))
add("dtypes", "dtypes.int8_matmul", lambda: both2(lambda a, b: a @ b, [[100, 100]], "int8",
                                                   [[2], [1]], "int8"))
add("dtypes", "dtypes.int64_matmul_big", lambda: both2(lambda a, b: a @ b, [[2**40, 3]], "int64",
                                                        [[2**20], [5]], "int64"))
add("dtypes", "dtypes.f64_precision_kept", lambda: both(lambda a: (a + 1e-12) - a, [1.0], "float64"))
add("dtypes", "dtypes.int64_exact_beyond_2p53", lambda: both(lambda a: a + 1, [2**53 + 1, -2**62], "int64"))
add("dtypes", "dtypes.int64_max_sum", lambda: both(lambda a: a.sum(), [2**62, 2**62], "int64"))

# astype: float to int truncates toward zero; to bool is != 0; to narrow ints wraps
add("dtypes", "dtypes.astype_f32_to_bool", lambda: both(lambda a: a.astype(strata.bool), [0.0, -0.0, 0.1, float("nan")],
                                                         "float32", lambda t: t.to(torch.bool)))
add("dtypes", "dtypes.astype_f32_to_int32_trunc", lambda: both(lambda a: a.astype(strata.int32), [-1.7, 1.7, -0.5],
                                                                "float32", lambda t: t.to(torch.int32)))
add("dtypes", "dtypes.astype_int64_to_int8_wraps", lambda: both(lambda a: a.astype(strata.int8), [300, -129],
                                                                 "int64", lambda t: t.to(torch.int8)))
add("dtypes", "dtypes.astype_int_to_f16_inf", lambda: both(lambda a: a.astype(strata.float16), [70000, 65504],
                                                            "int32", lambda t: t.to(torch.float16)))
add("dtypes", "dtypes.astype_bool_to_bf16", lambda: both(lambda a: a.astype(strata.bfloat16), [True, False],
                                                          "bool", lambda t: t.to(torch.bfloat16)))
add("dtypes", "dtypes.astype_int64_big_to_f32", lambda: both(lambda a: a.astype(strata.float32), [2**60 + 1],
                                                              "int64", lambda t: t.to(torch.float32)))
add("dtypes", "dtypes.astype_uint8_to_int8", lambda: both(lambda a: a.astype(strata.int8), [255, 128],
                                                           "uint8", lambda t: t.to(torch.int8)))
err("dtypes", "dtypes.astype_bad_name", lambda: S([1.0]).astype("float33"), match=r"float33|dtype")
err("dtypes", "dtypes.astype_numpy_complex", lambda: S([1.0]).astype(np.complex64), match=r"complex|dtype")
add("dtypes", "dtypes.astype_numpy_dtype_ok", lambda: V(S([1.5]).astype(np.float64), np.array([1.5])), "either")
add("dtypes", "dtypes.astype_torch_dtype", lambda: V(S([1.5]).astype(torch.float64), np.array([1.5])), "either")

# unsigned wider types: NumPy is the reference
def _np_case(f, a, b=None):
    if b is None:
        return V(f(S(a)), f(a))
    return V(f(S(a), S(b)), f(a, b))


U64 = np.array([2**64 - 1, 2**63, 5], np.uint64)
add("dtypes", "dtypes.u64_add_wraps", lambda: _np_case(lambda a, b: a + b, U64, np.array([1, 2**63, 1], np.uint64)))
add("dtypes", "dtypes.u64_compare_above_2p63", lambda: _np_case(lambda a, b: a > b, U64, np.array([1, 1, 1], np.uint64)))
add("dtypes", "dtypes.u64_max_astype_f64", lambda: V(S(U64).astype(strata.float64), U64.astype(np.float64)))
add("dtypes", "dtypes.u32_sub_wraps", lambda: _np_case(lambda a, b: a - b, np.array([0, 1], np.uint32), np.array([1, 1], np.uint32)))
add("dtypes", "dtypes.u16_mul_wraps", lambda: _np_case(lambda a, b: a * b, np.array([300, 2], np.uint16), np.array([300, 2], np.uint16)))
add("dtypes", "dtypes.u32_sum", lambda: V(S(np.array([2**31, 2**31], np.uint32)).sum(),
                                           np.int64(2**32), dtype=False))
add("dtypes", "dtypes.u64_sort", lambda: V(strata.sort(S(U64))[0], np.sort(U64)))
add("dtypes", "dtypes.u64_argmax", lambda: V(S(U64).argmax(), np.int64(np.argmax(U64))))
add("dtypes", "dtypes.u16_max", lambda: V(S(np.array([65535, 3], np.uint16)).amax(), np.uint16(65535)))
add("dtypes", "dtypes.u32_div", lambda: V(S(np.array([7, 4000000000], np.uint32)) / S(np.array([2, 2], np.uint32)),
                                           np.array([3.5, 2e9], F32)))
add("dtypes", "dtypes.u8_bitwise_not", lambda: _np_case(lambda a: ~a, np.array([0, 255, 15], np.uint8)))
add("dtypes", "dtypes.i16_xor", lambda: _np_case(lambda a, b: a ^ b, np.array([-1, 5], np.int16), np.array([7, 3], np.int16)))

# creation with a dtype
err("dtypes", "dtypes.tensor_int8_overflow", lambda: S([300], dtype=strata.int8), match=r"300|int8|range|overflow|fit")
add("dtypes", "dtypes.tensor_uint8_negative", lambda: V(S([-1], dtype=strata.uint8), torch.tensor([-1], dtype=torch.uint8)), "either")
err("dtypes", "dtypes.tensor_2p64", lambda: S([2**64]), match=r"18446744073709551616|64|fit|overflow")
add("dtypes", "dtypes.tensor_2p64m1_uint64", lambda: V(S([2**64 - 1], dtype=strata.uint64), np.array([2**64 - 1], np.uint64)),
    "either")
add("dtypes", "dtypes.tensor_mixed_bool_float", lambda: V(S([True, 1.5]), torch.tensor([True, 1.5])))
add("dtypes", "dtypes.tensor_mixed_int_bool", lambda: V(S([True, 2]), torch.tensor([True, 2])))
add("dtypes", "dtypes.tensor_float_to_int_dtype", lambda: V(S([1.9, -1.9], dtype=strata.int32),
                                                            torch.tensor([1.9, -1.9], dtype=torch.int32)), "either")
err("dtypes", "dtypes.tensor_strings", lambda: S(["a", "b"]), match=r"str|type")
err("dtypes", "dtypes.tensor_none_element", lambda: S([1.0, None]), match=r"None|type")
err("dtypes", "dtypes.tensor_complex", lambda: S([1 + 2j]), match=r"complex")
err("dtypes", "dtypes.tensor_ragged", lambda: S([[1, 2], [3]]), match=r"ragged|shape|length|sequence")
err("dtypes", "dtypes.tensor_dict", lambda: S({"a": 1}), match=r"dict|type")
err("dtypes", "dtypes.tensor_dtype_string_bad", lambda: S([1], dtype="int33"), match=r"int33|dtype")
add("dtypes", "dtypes.tensor_nan_inf_f16", lambda: V(S([float("nan"), float("inf"), 1e6], dtype=strata.float16),
                                                    torch.tensor([float("nan"), float("inf"), 1e6], dtype=torch.float16)))
add("dtypes", "dtypes.tensor_np_scalar_types", lambda: V(S([np.int8(3), np.float16(2.5)]), torch.tensor([3.0, 2.5]), dtype=False),
    "either")
add("dtypes", "dtypes.full_float_into_int", lambda: V(strata.full((2,), 3.7, dtype=strata.int32),
                                                      torch.full((2,), 3.7).to(torch.int32)), "either")
err("dtypes", "dtypes.full_nan_into_int", lambda: strata.full((2,), float("nan"), dtype=strata.int32),
    match=r"nan|int")
add("dtypes", "dtypes.arange_int8", lambda: V(strata.arange(0, 5, dtype=strata.int8),
                                              torch.arange(0, 5, dtype=torch.int8)))
add("dtypes", "dtypes.arange_int8_overflow", lambda: V(strata.arange(0, 300, dtype=strata.int8),
                                                       torch.arange(0, 300, dtype=torch.int8)), "either")
add("dtypes", "dtypes.arange_float_to_int", lambda: V(strata.arange(0.5, 3.0, dtype=strata.int64),
                                                      torch.arange(0.5, 3.0, dtype=torch.int64)), "either")
add("dtypes", "dtypes.scalar_int_dtype", lambda: V(strata.scalar(3, dtype=strata.int64) + S([1]),
                                                   np.array([4])))
add("dtypes", "dtypes.where_int_float", lambda: both2(lambda a, b: strata.where(a > 0, a, b), [1, -1], "int8",
                                                       [0.5, 0.5], "float16",
                                                       lambda a, b: torch.where(a > 0, a, b)))
add("dtypes", "dtypes.where_pred_int_refused", lambda: strata.where(S([1, 0]), S([1.0, 2.0]), S([3.0, 4.0])),
    "either")
add("dtypes", "dtypes.softmax_f16", lambda: both(lambda a: strata.softmax(a, -1), [10.0, 11.0, -60000.0], "float16",
                                                  lambda t: torch.softmax(t.float(), -1).half(), rtol=1e-3, atol=1e-3))
add("dtypes", "dtypes.softmax_int_refused", lambda: strata.softmax(S([1, 2]), -1), "either")
add("dtypes", "dtypes.logical_not_float", lambda: both(lambda a: strata.logical_not(a), [0.0, 2.0, float("nan")],
                                                        "float32", torch.logical_not))
add("dtypes", "dtypes.logical_and_int", lambda: both2(strata.logical_and, [0, 3], "int8", [5, 5], "uint8",
                                                       torch.logical_and))
add("dtypes", "dtypes.floor_int", lambda: both(strata.floor, [3, -3], "int32", torch.floor))
add("dtypes", "dtypes.erf_f64", lambda: both(strata.erf, [0.5, -3.0], "float64", torch.erf))
add("dtypes", "dtypes.atan2_int", lambda: both2(strata.atan2, [1, -1], "int32", [0, 0], "int32", torch.atan2))
add("dtypes", "dtypes.tan_f16", lambda: both(strata.tan, [1.5], "float16", torch.tan, rtol=1e-3))
add("dtypes", "dtypes.cbrt_negative", lambda: V(strata.cbrt(S(np.array([-8.0, 27.0], F32))), np.cbrt(np.array([-8.0, 27.0], F32))))
add("dtypes", "dtypes.expm1_tiny_f64", lambda: both(strata.expm1, [1e-300], "float64", torch.expm1))
add("dtypes", "dtypes.log1p_minus1", lambda: both(strata.log1p, [-1.0, -2.0], "float32", torch.log1p))
add("dtypes", "dtypes.rsqrt_zero", lambda: both(strata.rsqrt, [0.0, -0.0], "float32", torch.rsqrt))
add("dtypes", "dtypes.relu_int8", lambda: both(strata.relu, [-5, 5], "int8", torch.relu))
add("dtypes", "dtypes.gelu_f64", lambda: both(strata.gelu, [0.5, -2.0], "float64", torch.nn.functional.gelu))
add("dtypes", "dtypes.silu_bf16", lambda: both(strata.silu, [0.5, -2.0], "bfloat16", torch.nn.functional.silu, rtol=1e-2))
add("dtypes", "dtypes.cross_entropy_f64", lambda: V(
    strata.cross_entropy(S(ar(3, 4, dtype=np.float64)), S([0, 3, 1])),
    torch.nn.functional.cross_entropy(tt(ar(3, 4, dtype=np.float64)), torch.tensor([0, 3, 1]))))
add("dtypes", "dtypes.cross_entropy_int32_target", lambda: V(
    strata.cross_entropy(S(ar(3, 4)), S(np.array([0, 3, 1], np.int32))),
    torch.nn.functional.cross_entropy(tt(ar(3, 4)), torch.tensor([0, 3, 1]))), "either")
err("dtypes", "dtypes.cross_entropy_float_target_shape", lambda: strata.cross_entropy(S(ar(3, 4)), S(ar(3))),
    match=r"target|int|dtype|shape")
add("dtypes", "dtypes.mse_int_refused", lambda: strata.mse_loss(S([1, 2]), S([1, 3])), "either")
add("dtypes", "dtypes.linear_mixed", lambda: V(strata.linear(S(ar(2, 3, dtype=np.float64)), S(ar(4, 3))),
                                              ar(2, 3, dtype=np.float64) @ ar(4, 3).T.astype(np.float64)),
    "either")
add("dtypes", "dtypes.index_add_int_source_into_float", lambda: V(
    strata.index_add(strata.zeros(3), 0, S([0, 0]), S([1, 2])),
    torch.zeros(3).index_add(0, torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))), "either")
add("dtypes", "dtypes.scatter_add_dtype_mismatch", lambda: strata.scatter_add(strata.zeros(3), 0, S([0]), S([1])),
    "either")

# ---- indices: out of range, negative, wrong dtype, beyond 64 bits, steps, boolean masks ------

A34 = ar(3, 4)
A234 = ar(2, 3, 4)


def gi(a, idx, sidx=None):
    return V(S(a)[idx if sidx is None else sidx], a[idx])


def si(a, idx, value, svalue=None):
    x = S(a)
    x[idx] = value if svalue is None else svalue
    b = a.copy()
    b[idx] = value
    return V(x, b)


GOOD = {
    "ellipsis_none": (..., None), "none_ellipsis_none": (None, ..., None), "step2": np.s_[::2, 1::2],
    "neg_start_step": np.s_[-2::2], "stop_before_start": np.s_[3:1], "empty_slice": np.s_[1:1, :],
    "big_step": np.s_[::2**40], "huge_stop": np.s_[: 2**63 - 1], "int_then_list": (1, [0, 3, -1]),
    "paired_lists": ([0, 2], [1, 3]), "list_slice_list_3d": ([0, 1], slice(None), [3, 0]),
    "nested_list": [[0, 1], [2, 0]], "np_int64": np.int64(2), "np_uint8_scalar": np.uint8(1),
    "np_array_idx": np.array([2, 0, 2]), "bool_mask_full": None, "tuple_in_tuple": (0, (1, 2)),
    "none_middle": np.s_[:, None, 1], "neg_int_neg_int": (-1, -4), "ellipsis_int": (..., -1),
    "list_with_dup": [1, 1, 1], "empty_list": [], "mask_all_false": None, "0d_bool_true": True,
    "0d_bool_false": False, "list_of_bools": [True, False, True], "slice_neg_stop": np.s_[:-5],
}


def _good_idx(name, a):
    idx = GOOD[name]
    if name == "bool_mask_full":
        return a > 0
    if name == "mask_all_false":
        return a > 100
    if name == "list_of_bools" and a.shape[0] != 3:
        return [True] * (a.shape[0] - 1) + [False]
    return idx


LIMITS = {"paired_lists", "list_slice_list_3d", "bool_mask_full", "mask_all_false", "0d_bool_true",
          "0d_bool_false", "list_of_bools"}  # strata refuses these by design, clearly
for name in GOOD:
    arr = A234 if name in ("list_slice_list_3d", "tuple_in_tuple") else A34
    if name == "tuple_in_tuple":
        continue  # ambiguous in NumPy itself
    add("indices", f"indices.get.{name}", lambda name=name, arr=arr: gi(arr, _good_idx(name, arr)),
        "either" if name in LIMITS else "value", r"not supported|boolean mask")

add("indices", "indices.get.strata_int8_index", lambda: V(S(A34)[S(np.array([2, 0], np.int8))],
                                                         A34[np.array([2, 0], np.int8)]), "either")
add("indices", "indices.get.strata_int32_neg_index", lambda: V(S(A34)[S(np.array([-1, -3], np.int32))],
                                                              A34[np.array([-1, -3])]))
add("indices", "indices.get.strata_uint8_index", lambda: S(A34)[S(np.array([1, 0, 1], np.uint8))], "either")
add("indices", "indices.get.strata_bool_mask_row", lambda: V(S(A34)[S(np.array([True, False, True]))],
                                                            A34[np.array([True, False, True])]), "either", r"not supported|boolean mask")
add("indices", "indices.get.strata_bool_mask_0size", lambda: V(S(np.zeros((0, 3), F32))[S(np.zeros(0, bool))],
                                                              np.zeros((0, 3), F32)), "either", r"not supported|boolean mask")
add("indices", "indices.get.torch_index", lambda: V(S(A34)[torch.tensor([2, 0])], A34[[2, 0]]), "either")
add("indices", "indices.get.slice_on_0d_tensor_index", lambda: V(S(A34)[S(np.int64(1))], A34[1]))
add("indices", "indices.get.int_index_into_0size_dim_slice", lambda: V(S(np.zeros((0, 3), F32))[:, 1],
                                                                      np.zeros(0, F32)))
add("indices", "indices.get.mask_then_index_bool_tensor2d", lambda: V(S(A34)[S(A34 > 0)], A34[A34 > 0]), "either", r"not supported|boolean mask")
add("indices", "indices.get.list_index_on_empty_tensor_empty_list", lambda: V(S(np.zeros(0, F32))[[]],
                                                                             np.zeros(0, F32)))

BAD = {
    "int_oob": (3, r"3|out of|range|bound"), "neg_oob": (-4, r"-4|out of|range|bound"),
    "second_dim_oob": ((0, 4), r"4|out of|range|bound"), "too_many": ((0, 0, 0), r"too many|3|dim"),
    "two_ellipses": ((..., 0, ...), r"ellipsis|\.\.\."), "float_index": (1.0, r"float|int|index"),
    "float_list": ([1.0, 0.0], r"float|int|index"), "str_index": ("a", r"str|index"),
    "step_zero": (np.s_[::0], r"step|zero"), "list_oob": ([0, 3], r"3|out of|range|bound"),
    "nested_list_oob": ([[0], [7]], r"7|out of|range|bound"), "mask_wrong_shape": (None, r"mask|shape|match"),
    "mask_too_long_list": ([True, False, True, True], r"mask|shape|match|4|3"),
    "neg_step": (np.s_[::-1], r"step|negative"), "dict_index": ({0: 1}, r"dict|index"),
    "list_mixed_types": ([0, "a"], r"str|int|index"), "int_beyond_64": (2**64 + 1, r"out of|bound|fit|64"),
    "list_beyond_64": ([2**65], r"fit|64|out of|bound|overflow"), "np_float_array": (np.array([0.5]), r"float|int|index"),
    "index_0size_dim": (None, r"0|out of|range|bound"),
}
for name, (idx, match) in BAD.items():
    def f(name=name, idx=idx):
        if name == "mask_wrong_shape":
            return S(A34)[S(np.ones((4, 3), bool))]
        if name == "index_0size_dim":
            return S(np.zeros((0, 3), F32))[0]
        return S(A34)[idx]
    # NumPy reverses on a negative step; torch refuses: either is fine if clear
    add("indices", f"indices.get_bad.{name}", f, "either" if name == "neg_step" else "error", match)
CASES[[c.id for c in CASES].index("indices.get_bad.neg_step")].fn = lambda: gi(A34, np.s_[::-1])
CASES[[c.id for c in CASES].index("indices.get_bad.neg_step")].expect = "either"
err("indices", "indices.get_bad.strata_float_index", lambda: S(A34)[S(np.array([0.0, 1.0], F32))],
    match=r"float|int|index")
err("indices", "indices.get_bad.strata_int_tensor_oob", lambda: S(A34)[S(np.array([0, 5]))],
    match=r"5|out of|range|bound")
err("indices", "indices.get_bad.strata_int_tensor_neg_oob", lambda: S(A34)[S(np.array([-4]))],
    match=r"-4|out of|range|bound")
err("indices", "indices.get_bad.paired_lists_mismatch", lambda: S(A34)[[0, 1], [0, 1, 2]],
    match=r"broadcast|shape|2|3|not supported")

# setitem
add("indices", "indices.set.step_slice_scalar", lambda: si(A34, np.s_[::2, 1::2], 9.0), "either", r"not supported|boolean mask")
add("indices", "indices.set.mask_scalar", lambda: si(A34, A34 > 0, -1.0, None), "either", r"not supported|boolean mask")
add("indices", "indices.set.list_rows_bcast", lambda: si(A34, [0, 2], np.arange(4, dtype=F32), S(np.arange(4, dtype=F32))), "either", r"not supported|boolean mask")
add("indices", "indices.set.neg_list", lambda: si(A34, [-1], 5.0), "either", r"not supported|boolean mask")
add("indices", "indices.set.ellipsis_col", lambda: si(A34, (..., 1), np.ones(3, F32), S(np.ones(3, F32))))
add("indices", "indices.set.int_into_float", lambda: si(A34, 0, 7, None))
add("indices", "indices.set.float_into_int_trunc", lambda: (
    lambda x: (x.__setitem__(0, 2.7), V(x, torch.tensor([2, 2]).index_put_((torch.tensor([0]),), torch.tensor(2.7).long())))[1]
)(S([1, 2])))
add("indices", "indices.set.duplicates_last_wins_or_any", lambda: (
    lambda x: (x.__setitem__([0, 0], S([1.0, 1.0])), V(x, np.array([1.0, 0.0], F32)))[1])(strata.zeros(2)), "either", r"not supported|boolean mask")
add("indices", "indices.set.empty_slice", lambda: si(A34, np.s_[2:2], 4.0))
add("indices", "indices.set.0size_tensor", lambda: (lambda x: (x.__setitem__(..., 1.0), V(x, np.zeros((0, 2), F32)))[1])(
    S(np.zeros((0, 2), F32))))
add("indices", "indices.set.bool_mask_tensor_values", lambda: si(A34, A34[:, 0] > -1, np.full(4, 3.0, F32), S(np.full(4, 3.0, F32))), "either", r"not supported|boolean mask")
add("indices", "indices.set.nan_into_int", lambda: (lambda x: x.__setitem__(0, float("nan")) or x)(S([1, 2])), "either")
err("indices", "indices.set_bad.wrong_shape", lambda: S(A34).__setitem__(0, S(np.ones(3, F32))),
    match=r"shape|broadcast|3|4")
err("indices", "indices.set_bad.oob", lambda: (lambda x: (x.__setitem__(3, 1.0), x)[1])(S(A34)),
    match=r"3|out of|range|bound")
err("indices", "indices.set_bad.list_oob", lambda: (lambda x: (x.__setitem__([0, 9], 1.0), x)[1])(S(A34)),
    match=r"9|out of|range|bound|not supported")
err("indices", "indices.set_bad.str_value", lambda: S(A34).__setitem__(0, "x"), match=r"str|value|float|type")
err("indices", "indices.set_bad.float_into_bool_mask_shape", lambda: S(A34).__setitem__(S(np.ones(5, bool)), 1.0),
    match=r"mask|shape|5|3")
add("indices", "indices.set.neg_step", lambda: si(A34, np.s_[::-1], np.arange(4, dtype=F32), S(np.arange(4, dtype=F32))),
    "either")
CASES[-1].match = r"step|negative"

# gathers and scatters
err("indices", "indices.index_select_neg", lambda: strata.index_select(S(A34), 0, S([-1])),
    match=r"-1|out of|range|bound")
err("indices", "indices.index_select_float_index", lambda: strata.index_select(S(A34), 0, S([0.0])),
    match=r"float|int|index")
err("indices", "indices.index_select_2d_index", lambda: strata.index_select(S(A34), 0, S([[0]])),
    match=r"1-d|dim|index|vector|rank")
err("indices", "indices.take_along_dim_oob", lambda: strata.take_along_dim(S(A34), S(np.array([[4]] * 3)), 1),
    match=r"4|out of|range|bound")
err("indices", "indices.scatter_add_oob", lambda: strata.scatter_add(strata.zeros(3), 0, S([3]), S([1.0])),
    match=r"3|out of|range|bound")
err("indices", "indices.scatter_add_neg", lambda: strata.scatter_add(strata.zeros(3), 0, S([-1]), S([1.0])),
    match=r"-1|out of|range|bound")
add("indices", "indices.scatter_add_dups", lambda: V(strata.scatter_add(strata.zeros(3), 0, S([1, 1, 1]), S([1.0, 2.0, 3.0])),
                                                    torch.zeros(3).scatter_add(0, torch.tensor([1, 1, 1]), torch.tensor([1.0, 2.0, 3.0]))))
err("indices", "indices.one_hot_negative", lambda: strata.one_hot(S([-1, 0]), 3), match=r"-1|negative|range|class")
err("indices", "indices.one_hot_too_big", lambda: strata.one_hot(S([3]), 3), match=r"3|range|class")
err("indices", "indices.one_hot_float", lambda: strata.one_hot(S([1.0]), 3), match=r"float|int|index")
add("indices", "indices.one_hot_bool_index", lambda: strata.one_hot(S([True, False]), 2), "either")
add("indices", "indices.dynamic_slice_clamps", lambda: V(strata.dynamic_slice(S(ar(6)), [5], [3]), ar(6)[3:6]))
add("indices", "indices.dynamic_slice_neg_clamps", lambda: V(strata.dynamic_slice(S(ar(6)), [-4], [2]), ar(6)[0:2]))
add("indices", "indices.dynamic_slice_tensor_start", lambda: V(strata.dynamic_slice(S(ar(6)), [S(np.int64(2))], [2]), ar(6)[2:4]),
    "either")
err("indices", "indices.dynamic_slice_size_too_big", lambda: strata.dynamic_slice(S(ar(6)), [0], [7]),
    match=r"7|6|size|larger")
err("indices", "indices.dynamic_slice_wrong_rank", lambda: strata.dynamic_slice(S(ar(2, 3)), [0], [1]),
    match=r"start|rank|dim|2|1")
err("indices", "indices.dynamic_slice_negative_size", lambda: strata.dynamic_slice(S(ar(6)), [0], [-1]),
    match=r"-1|negative|size")
err("indices", "indices.dynamic_update_slice_too_big", lambda: strata.dynamic_update_slice(S(ar(3)), S(ar(4)), [0]),
    match=r"4|3|size|larger|update")
add("indices", "indices.dynamic_update_slice_clamps", lambda: V(strata.dynamic_update_slice(S(ar(5)), S(np.ones(2, F32)), [4]),
                                                               np.concatenate([ar(5)[:3], np.ones(2, F32)])))
add("indices", "indices.dynamic_update_dtype_mismatch", lambda: strata.dynamic_update_slice(S(ar(5)), S([1, 2]), [0]),
    "either")
add("indices", "indices.strata_slice_step3", lambda: V(strata.slice(S(ar(10)), 0, 1, None, 3), ar(10)[1::3]))
err("indices", "indices.strata_slice_step0", lambda: strata.slice(S(ar(10)), 0, 1, None, 0), match=r"step|zero|0")
err("indices", "indices.strata_slice_dim_oob", lambda: strata.slice(S(ar(10)), 1, 0, 1), match=r"dim|range|1")
add("indices", "indices.strata_slice_start_past_end", lambda: V(strata.slice(S(ar(10)), 0, 20, 30), ar(10)[20:30]))
add("indices", "indices.strata_slice_neg_bounds", lambda: V(strata.slice(S(ar(10)), 0, -3, -1), ar(10)[-3:-1]))
err("indices", "indices.index_add_wrong_source_shape", lambda: strata.index_add(strata.zeros(3, 2), 0, S([0]), strata.ones(1, 3)),
    match=r"shape|source|3|2")
err("indices", "indices.index_add_float_index", lambda: strata.index_add(strata.zeros(3), 0, S([0.0]), strata.ones(1)),
    match=r"float|int|index")
err("indices", "indices.cross_entropy_target_oob", lambda: strata.cross_entropy(S(ar(2, 3)), S([0, 3])),
    match=r"3|out of|range|bound|class")
err("indices", "indices.cross_entropy_target_neg", lambda: strata.cross_entropy(S(ar(2, 3)), S([0, -5])),
    match=r"-5|out of|range|bound|class")
err("indices", "indices.embedding_oob", lambda: strata.nn.Embedding(4, 2)(S([4])), match=r"4|out of|range|bound")
err("indices", "indices.embedding_neg", lambda: strata.nn.Embedding(4, 2)(S([-1])), match=r"-1|out of|range|bound")
err("indices", "indices.embedding_float_ids", lambda: strata.nn.Embedding(4, 2)(S([1.0])), match=r"float|int|index")
add("indices", "indices.take_along_dim_neg_in_range", lambda: V(strata.take_along_dim(S(A34), S(np.array([[-1]] * 3)), 1),
                                                                np.take_along_axis(A34, np.array([[3]] * 3), 1)), "either")
err("indices", "indices.split_bad_dim", lambda: strata.split(S(A34), 2, 5), match=r"5|dim|range")
err("indices", "indices.topk_bad_dim", lambda: strata.topk(S(A34), 1, 2), match=r"2|dim|range")
err("indices", "indices.cumsum_bad_dim", lambda: strata.cumsum(S(A34), -3), match=r"-3|dim|range")
err("indices", "indices.softmax_bad_dim", lambda: strata.softmax(S(A34), 2), match=r"2|dim|range")
err("indices", "indices.argmax_bad_dim", lambda: strata.argmax(S(A34), 2), match=r"2|dim|range")
err("indices", "indices.index_select_dim_oob", lambda: strata.index_select(S(A34), 2, S([0])), match=r"2|dim|range")
err("indices", "indices.reshape_beyond_64", lambda: S(A34).reshape(-1, 2**64), match=r"fit|64|18446744073709551616")
err("indices", "indices.permute_beyond_64", lambda: S(A34).permute(0, 2**64), match=r"fit|64|range")
err("indices", "indices.sum_dim_beyond_64", lambda: S(A34).sum(2**70), match=r"fit|64|range")
err("indices", "indices.slice_step_beyond_64_zero_like", lambda: strata.slice(S(ar(5)), 0, 0, 5, 2**64),
    match=r"fit|64|step")

# ---- scan / cond / switch / grad / vjp / checkpoint misuse -----------------------------------

def _cumsum_body(c, x):
    c = c + x
    return c, c * 2


X52 = ar(5, 2)


def _scan_ref(xs, init, reverse=False):
    c, ys = init.copy(), []
    for x in (xs[::-1] if reverse else xs):
        c = c + x
        ys.append(c * 2)
    ys = np.stack(ys) if ys else np.zeros((0,) + init.shape, init.dtype)
    return c, (ys[::-1] if reverse else ys)


add("control", "control.scan_reverse", lambda: (lambda out, ref: [V(out[0], ref[0]), V(out[1], ref[1])])(
    strata.scan(_cumsum_body, S(np.zeros(2, F32)), S(X52), reverse=True), _scan_ref(X52, np.zeros(2, F32), True)))
add("control", "control.scan_unroll_big", lambda: (lambda out, ref: [V(out[0], ref[0]), V(out[1], ref[1])])(
    strata.scan(_cumsum_body, S(np.zeros(2, F32)), S(X52), unroll=100), _scan_ref(X52, np.zeros(2, F32))))
err("control", "control.scan_unroll_0", lambda: strata.scan(_cumsum_body, S(np.zeros(2, F32)), S(X52), unroll=0),
    match=r"unroll")
err("control", "control.scan_unroll_neg", lambda: strata.scan(_cumsum_body, S(np.zeros(2, F32)), S(X52), unroll=-2),
    match=r"unroll")
add("control", "control.scan_xs_empty", lambda: (lambda out: [V(out[0], np.ones(2, F32)), V(out[1], np.zeros((0, 2), F32))])(
    strata.scan(_cumsum_body, S(np.ones(2, F32)), S(np.zeros((0, 2), F32)))))
add("control", "control.scan_length_only", lambda: (lambda out: V(out[0], np.float32(3)))(
    strata.scan(lambda c, x: (c + 1, None), S(np.float32(0)), None, length=3)))
add("control", "control.scan_length_0_only", lambda: (lambda out: V(out[0], np.float32(7)))(
    strata.scan(lambda c, x: (c + 1, c), S(np.float32(7)), None, length=0)))
err("control", "control.scan_length_negative", lambda: strata.scan(lambda c, x: (c, None), S(np.float32(0)), None, length=-1),
    match=r"length|-1|negative")
err("control", "control.scan_no_xs_no_length", lambda: strata.scan(lambda c, x: (c, None), S(np.float32(0))),
    match=r"length|xs")
err("control", "control.scan_length_mismatch", lambda: strata.scan(_cumsum_body, S(np.zeros(2, F32)), S(X52), length=4),
    match=r"length|4|5")
err("control", "control.scan_xs_lengths_differ", lambda: strata.scan(lambda c, x: (c + x[0] + x[1], None), S(np.float32(0)),
                                                                     (S(ar(3)), S(ar(4)))), match=r"length|3|4|differ")
err("control", "control.scan_xs_0d", lambda: strata.scan(_cumsum_body, S(np.float32(0)), S(np.float32(1))),
    match=r"0-d|leading|dim|scalar")
err("control", "control.scan_carry_shape_changes", lambda: strata.scan(lambda c, x: (c.reshape(1, 2), None),
                                                                       S(np.zeros(2, F32)), S(X52)),
    match=r"carry|shape|\[2\]|\[1, ?2\]|1,2")
err("control", "control.scan_carry_dtype_changes", lambda: strata.scan(lambda c, x: (c.astype(strata.float64), None),
                                                                       S(np.zeros(2, F32)), S(X52)),
    match=r"carry|dtype|f32|f64|float")
err("control", "control.scan_carry_dict_extra_key", lambda: strata.scan(lambda c, x: ({"a": c["a"], "b": x}, None),
                                                                        {"a": S(np.zeros(2, F32))}, S(X52)),
    match=r"carry|key|structure|b")
err("control", "control.scan_body_returns_tensor", lambda: strata.scan(lambda c, x: c + x, S(np.zeros(2, F32)), S(X52)),
    match=r"pair|tuple|\(carry, ?y\)|return")
err("control", "control.scan_body_returns_triple", lambda: strata.scan(lambda c, x: (c, x, x), S(np.zeros(2, F32)), S(X52)),
    match=r"pair|tuple|\(carry, ?y\)|return|2")
err("control", "control.scan_body_returns_list_carry_len", lambda: strata.scan(lambda c, x: ([c[0]], None),
                                                                               [S(np.zeros(2, F32)), S(np.zeros(2, F32))], S(X52)),
    match=r"carry|structure|length|2|1")
err("control", "control.scan_carry_python_float", lambda: strata.scan(lambda c, x: (c + 1, None), 0.5, S(X52)),
    match=r"float|tensor|carry|init")
err("control", "control.scan_fn_not_callable", lambda: strata.scan(3, S(np.zeros(2, F32)), S(X52)), match=r"call|function|int")
err("control", "control.scan_bad_remat", lambda: strata.scan(_cumsum_body, S(np.zeros(2, F32)), S(X52), remat="some"),
    match=r"remat|some")


class _UserError(Exception):
    pass


def _raise_in_body(c, x):
    raise _UserError("from the body")


add("control", "control.scan_body_raises_propagates", lambda: strata.scan(_raise_in_body, S(np.zeros(2, F32)), S(X52)),
    "error", r"from the body", (_UserError,))


def _use_leak():
    return (leak_from_scan(lambda c, x: x) + 1).numpy()


err("control", "control.scan_leaked_tracer_used", _use_leak, match=r"scan|body|trac|leak|outside|escap")
err("control", "control.scan_body_reads_value", lambda: strata.scan(lambda c, x: (c + float(x.sum().item()), None),
                                                                    S(np.zeros(2, F32)), S(X52)),
    match=r"scan|body|trac|value|item|read")
err("control", "control.scan_body_numpy", lambda: strata.scan(lambda c, x: (c + S(x.numpy()), None),
                                                              S(np.zeros(2, F32)), S(X52)),
    match=r"scan|body|trac|value|numpy|read")
add("control", "control.scan_closure_const", lambda: (lambda k: V(strata.scan(lambda c, x: (c + x * k, None), S(np.zeros(2, F32)),
                                                                             S(X52))[0], (X52 * ar(2)).sum(0)))(S(ar(2))))
add("control", "control.scan_nested", lambda: V(strata.scan(
    lambda c, x: (strata.scan(lambda c2, x2: (c2 + x2, None), c, x.reshape(2, 1))[0], None),
    S(np.zeros(1, F32)), S(X52))[0], X52.sum().reshape(1)))
add("control", "control.scan_ys_none_tree", lambda: (lambda out: V(out[1]["b"], X52 * 2))(
    strata.scan(lambda c, x: (c, {"a": None, "b": x * 2}), S(np.zeros(2, F32)), S(X52))))
add("control", "control.scan_int_carry", lambda: V(strata.scan(lambda c, x: (c + x, None), S(np.int32(0)),
                                                               S(np.arange(5, dtype=np.int32)))[0], np.int32(10)))
add("control", "control.scan_bool_carry", lambda: V(strata.scan(lambda c, x: (strata.logical_or(c, x), None), S(np.bool_(False)),
                                                                S(np.array([False, True, False])))[0], np.bool_(True)))
add("control", "control.scan_0size_carry", lambda: V(strata.scan(lambda c, x: (c * 2, None), S(np.zeros((0, 3), F32)),
                                                                 S(X52))[0], np.zeros((0, 3), F32)))
add("control", "control.scan_grad_through", lambda: V(strata.grad(lambda w: strata.scan(lambda c, x: (c * w + x, None),
                                                                                         S(np.float32(1)), S(ar(3)))[0])(S(np.float32(2))),
                                                      torch.func.grad(lambda w: _tscan(w))(torch.tensor(2.0))))


def _tscan(w):
    c = torch.tensor(1.0)
    for x in tt(ar(3)):
        c = c * w + x
    return c


# cond
err("control", "control.cond_pred_vector", lambda: strata.cond(S([True, False]), lambda: S(1.0), lambda: S(2.0)),
    match=r"pred|scalar|shape|0-d")
add("control", "control.cond_pred_int", lambda: V(strata.cond(S(np.int32(2)), lambda: S(np.float32(1)), lambda: S(np.float32(2))),
                                                  np.float32(1)), "either")
add("control", "control.cond_pred_float_nan", lambda: strata.cond(S(np.float32(np.nan)), lambda: S(np.float32(1)),
                                                                  lambda: S(np.float32(2))), "either")
err("control", "control.cond_branch_shapes_differ", lambda: strata.cond(S(True), lambda: S(ar(2)), lambda: S(ar(3))),
    match=r"branch|shape|\[2\]|\[3\]|differ")
err("control", "control.cond_branch_dtypes_differ", lambda: strata.cond(S(True), lambda: S(ar(2)), lambda: S([1, 2])),
    match=r"branch|dtype|f32|i64|differ|int")
err("control", "control.cond_branch_structures_differ", lambda: strata.cond(S(True), lambda: (S(ar(2)), S(ar(2))),
                                                                            lambda: S(ar(2))), match=r"branch|structure|differ|tuple")
add("control", "control.cond_branch_returns_none", lambda: strata.cond(S(True), lambda: None, lambda: None), "either")
err("control", "control.cond_pred_python_bool", lambda: strata.cond(True, lambda: S(ar(2)), lambda: S(ar(2))),
    match=r"pred|Tensor|bool|argument")
add("control", "control.cond_operands_single_tensor", lambda: V(strata.cond(S(False), lambda x: x + 1, lambda x: x - 1, S(ar(2))),
                                                               ar(2) - 1), "either")
add("control", "control.cond_false_value", lambda: V(strata.cond(S(np.array(False)), lambda x, y: x * y, lambda x, y: x - y,
                                                                 (S(ar(3)), S(ar(3, start=2)))), ar(3) - ar(3, start=2)))
add("control", "control.cond_0size", lambda: V(strata.cond(S(True), lambda x: x + 1, lambda x: x, (S(np.zeros((0, 2), F32)),)),
                                               np.zeros((0, 2), F32)))
add("control", "control.cond_branch_raises", lambda: strata.cond(S(True), _raise_in_body, lambda: S(1.0)), "error",
    r"from the body|argument", (_UserError, TypeError))
add("control", "control.cond_grad_unselected_nan", lambda: V(strata.grad(lambda x: strata.cond(x > 0, lambda v: v * 2,
                                                                                                 lambda v: strata.sqrt(v), (x,)))(
    S(np.float32(4))), np.float32(2)))
err("control", "control.cond_wrong_arity", lambda: strata.cond(S(True), lambda a, b: a, lambda a, b: b, (S(ar(2)),)),
    match=r"argument|positional|missing")
# switch_case
add("control", "control.switch_index_clamped_high", lambda: V(strata.switch_case(S(np.int32(9)), [lambda: S(np.float32(0)),
                                                                                                  lambda: S(np.float32(1))]),
                                                              np.float32(1)))
add("control", "control.switch_index_clamped_neg", lambda: V(strata.switch_case(S(np.int64(-5)), [lambda: S(np.float32(0)),
                                                                                                 lambda: S(np.float32(1))]),
                                                             np.float32(0)))
err("control", "control.switch_no_branches", lambda: strata.switch_case(S(np.int32(0)), []), match=r"branch|empty|at least")
err("control", "control.switch_index_float", lambda: strata.switch_case(S(np.float32(0.5)), [lambda: S(1.0), lambda: S(2.0)]),
    match=r"index|int|float|dtype")
err("control", "control.switch_index_vector", lambda: strata.switch_case(S([0, 1]), [lambda: S(1.0), lambda: S(2.0)]),
    match=r"index|scalar|shape|0-d")
err("control", "control.switch_shapes_differ", lambda: strata.switch_case(S(np.int32(0)), [lambda: S(ar(2)), lambda: S(ar(3))]),
    match=r"branch|shape|differ")
add("control", "control.switch_one_branch", lambda: V(strata.switch_case(S(np.int32(3)), [lambda x: x * 3], (S(ar(2)),)),
                                                      ar(2) * 3))
err("control", "control.switch_branch_not_callable", lambda: strata.switch_case(S(np.int32(0)), [1, 2]),
    match=r"call|function|int|branch")
# grad / vjp / value_and_grad / checkpoint / gradients
err("control", "control.grad_nonscalar_output", lambda: strata.grad(lambda x: x * 2)(S(ar(3))), match=r"scalar|shape|\[3\]")
err("control", "control.grad_int_output", lambda: strata.grad(lambda x: (x * 2).sum().astype(strata.int32))(S(ar(3))),
    match=r"int|float|dtype")
err("control", "control.grad_int_input", lambda: strata.grad(lambda x: (x * 2).sum())(S([1, 2])),
    match=r"int|float|dtype|differentiable")
err("control", "control.grad_argnums_oob", lambda: strata.grad(lambda x: x.sum(), argnums=1)(S(ar(3))),
    match=r"argnums|1|range|argument")
add("control", "control.grad_argnums_negative", lambda: V(strata.grad(lambda x, y: (x * y).sum(), argnums=-1)(S(ar(3)), S(ar(3, start=1))),
                                                          ar(3)), "either")
add("control", "control.grad_argnums_dup", lambda: strata.grad(lambda x, y: (x * y).sum(), argnums=(0, 0))(S(ar(3)), S(ar(3))), "either")
err("control", "control.grad_has_aux_not_pair", lambda: strata.grad(lambda x: x.sum(), has_aux=True)(S(ar(3))),
    match=r"aux|pair|tuple")
err("control", "control.grad_returns_python_float", lambda: strata.grad(lambda x: 1.0)(S(ar(3))), match=r"float|tensor|scalar|return")
err("control", "control.grad_fn_returns_none", lambda: strata.grad(lambda x: None)(S(ar(3))), match=r"None|tensor|return")
add("control", "control.grad_independent_is_zero", lambda: V(strata.grad(lambda x, y: y.sum())(S(ar(3)), S(ar(3))),
                                                              np.zeros(3, F32)))
add("control", "control.grad_abs_at_0", lambda: V(strata.grad(lambda x: x.abs().sum())(S(np.zeros(2, F32))),
                                                  torch.func.grad(lambda x: x.abs().sum())(torch.zeros(2))))
add("control", "control.grad_sqrt_at_0", lambda: V(strata.grad(lambda x: x.sqrt().sum())(S(np.zeros(1, F32))),
                                                   torch.func.grad(lambda x: x.sqrt().sum())(torch.zeros(1))))
add("control", "control.grad_where_nan_branch", lambda: V(
    strata.grad(lambda x: strata.where(x > 0, x, strata.sqrt(x)).sum())(S(np.array([-1.0, 4.0], F32))),
    torch.func.grad(lambda x: torch.where(x > 0, x, torch.sqrt(x)).sum())(torch.tensor([-1.0, 4.0]))))
add("control", "control.grad_amax_ties", lambda: V(strata.grad(lambda x: x.amax())(S(np.array([2.0, 2.0, 1.0], F32))),
                                                   torch.func.grad(lambda x: x.amax())(torch.tensor([2.0, 2.0, 1.0]))))
add("control", "control.grad_through_astype_int", lambda: V(strata.grad(lambda x: x.astype(strata.int32).astype(strata.float32).sum())(
    S(ar(3))), np.zeros(3, F32)), "either")
add("control", "control.grad_f16_input", lambda: V(strata.grad(lambda x: (x * x).sum())(S(np.array([1.5, 2.0], np.float16))),
                                                   np.array([3.0, 4.0], np.float16)))
add("control", "control.grad_0size", lambda: V(strata.grad(lambda x: (x * x).sum())(S(np.zeros((0, 3), F32))),
                                               np.zeros((0, 3), F32)))
add("control", "control.grad_of_grad", lambda: V(strata.grad(strata.grad(lambda x: (x ** 3).sum()))(S(np.float32(2))),
                                                 np.float32(12)), "either")
add("control", "control.grad_cumprod_with_zero", lambda: V(strata.grad(lambda x: strata.cumprod(x, 0).sum())(S(np.array([2.0, 0.0, 3.0], F32))),
                                                           torch.func.grad(lambda x: torch.cumprod(x, 0).sum())(torch.tensor([2.0, 0.0, 3.0]))))
add("control", "control.grad_logcumsumexp_neg_inf", lambda: V(
    strata.grad(lambda x: strata.logcumsumexp(x, 0).sum())(S(np.array([-np.inf, 0.0, 1.0], F32))),
    # by hand: d/dx0 = 1 (out0 = x0) + 0 + 0; torch answers nan there
    np.array([1.0, 1 / (1 + np.e) + 1, np.e / (1 + np.e)], F32)))
add("control", "control.grad_sort", lambda: V(strata.grad(lambda x: (strata.sort(x)[0] * S(np.array([1.0, 2.0, 3.0], F32))).sum())(
    S(np.array([3.0, 1.0, 2.0], F32))), np.array([3.0, 1.0, 2.0], F32)))
add("control", "control.grad_index_dup", lambda: V(strata.grad(lambda x: x[[0, 0, 1]].sum())(S(ar(3))), np.array([2, 1, 0], F32)))
add("control", "control.grad_pow_neg_base", lambda: V(strata.grad(lambda x: (x ** 2.0).sum())(S(np.array([-3.0], F32))),
                                                      np.array([-6.0], F32)))
err("control", "control.vjp_cotangent_wrong_shape", lambda: strata.vjp(lambda x: x * 2, S(ar(3)))[1](S(ar(4))),
    match=r"cotangent|shape|\[3\]|\[4\]")
# torch.autograd.grad casts an int64 grad_output to the output's dtype
add("control", "control.vjp_cotangent_wrong_dtype", lambda: V(strata.vjp(lambda x: x * 2, S(ar(3)))[1](S([1, 2, 3]))[0],
                                                              np.array([2.0, 4.0, 6.0], F32)), "either")
add("control", "control.vjp_pullback_twice", lambda: (lambda out: [V(out[1](S(np.ones(3, F32)))[0], np.full(3, 2, F32)),
                                                                   V(out[1](S(np.ones(3, F32)))[0], np.full(3, 2, F32))])(
    strata.vjp(lambda x: x * 2, S(ar(3)))))
err("control", "control.vjp_cotangent_wrong_structure", lambda: strata.vjp(lambda x: (x, x), S(ar(3)))[1](S(ar(3))),
    match=r"cotangent|structure|tuple|2")
err("control", "control.vjp_non_tensor_arg", lambda: strata.vjp(lambda x: x * 2, 3.0), match=r"float|tensor|argument")
add("control", "control.vjp_int_arg", lambda: strata.vjp(lambda x: x * 2, S([1, 2])), "either")
add("control", "control.checkpoint_tuple_out", lambda: V(strata.grad(lambda x: sum(t.sum() for t in strata.checkpoint(
    lambda a: (a.sin(), a.cos()), x)))(S(ar(3))), np.cos(ar(3)) - np.sin(ar(3))))
add("control", "control.checkpoint_non_tensor_arg", lambda: strata.checkpoint(lambda a: a, "x"), "either")
add("control", "control.checkpoint_python_scalar_arg", lambda: V(strata.checkpoint(lambda a, k: a * k, S(ar(3)), 2.0),
                                                                 ar(3) * 2), "either")
add("control", "control.checkpoint_raises", lambda: strata.checkpoint(_raise_in_body, S(ar(3))), "error",
    r"from the body|argument", (_UserError, TypeError))
err("control", "control.gradients_nonscalar", lambda: strata.gradients(S(ar(3), requires_grad=True) * 2, [S(ar(3))]),
    match=r"scalar|shape")
add("control", "control.gradients_unrelated_input", lambda: (lambda x, y: V(strata.gradients((x * 2).sum(), [y])[0], np.zeros(3, F32)))(
    S(ar(3), requires_grad=True), S(ar(3), requires_grad=True)), "either")
err("control", "control.requires_grad_int", lambda: S([1, 2], requires_grad=True), match=r"int|float|grad")
err("control", "control.backward_nonscalar", lambda: (S(ar(3), requires_grad=True) * 2).backward(), match=r"scalar|shape|grad")
add("control", "control.backward_accumulates", lambda: (lambda x: ((x * 2).sum().backward(), (x * 3).sum().backward(),
                                                                   V(x.grad, np.full(3, 5, F32)))[2])(S(ar(3), requires_grad=True)))
add("control", "control.no_grad_blocks", lambda: (lambda x: V(strata.grad(lambda v: (v * _nograd_mul(v)).sum())(x), ar(3)))(S(ar(3))),
    "either")


def _nograd_mul(v):
    with strata.no_grad():
        return v * 1

# ---- sharding: meshes, specs, wrong axes --------------------------------------------------------

err("sharding", "sharding.mesh_dup_ids", lambda: mesh((0, 0, 1, 2)), match=r"duplicate|repeat|twice|0")
err("sharding", "sharding.mesh_id_beyond_devices", lambda: shard(ar(4, 4), ("a", "b"), mesh((0, 1, 2, 99))) * 2, match=r"99|device|range")
err("sharding", "sharding.mesh_negative_id", lambda: mesh((0, 1, 2, -1)), match=r"-1|device|range|negative")
err("sharding", "sharding.mesh_dup_names", lambda: mesh(names=("a", "a")), match=r"duplicate|repeat|twice|'a'|name")
err("sharding", "sharding.mesh_names_count", lambda: mesh(names=("a",)), match=r"name|axis|axes|2|1")
err("sharding", "sharding.mesh_zero_dim", lambda: strata.Mesh([], [0], ("a",)), match=r"0|empty|device|size")
err("sharding", "sharding.mesh_negative_dim", lambda: strata.Mesh([0, 1], [-2], ("a",)), match=r"-2|negative|size|shape")
err("sharding", "sharding.mesh_name_not_str", lambda: strata.Mesh([0, 1], [2], (5,)), match=r"name|str|int")
add("sharding", "sharding.mesh_no_names", lambda: V(strata.mark_sharding(S(ar(4, 2)), strata.Mesh([0, 1], [2]), (0, None)) * 2,
                                                    ar(4, 2) * 2), "either")
err("sharding", "sharding.spec_same_axis_twice", lambda: shard(ar(4, 4), ("a", "a")), match=r"'a'|twice|repeat|more than once|dup")
err("sharding", "sharding.spec_too_long", lambda: shard(ar(4), ("a", "b")), match=r"spec|dim|rank|entr|2|1")
add("sharding", "sharding.spec_axis_index_negative", lambda: shard(ar(4, 4), (-1, None)), "either")
err("sharding", "sharding.spec_bad_type", lambda: shard(ar(4, 4), (1.5, None)), match=r"float|spec|axis|str|int")
add("sharding", "sharding.spec_tuple_of_axes", lambda: V(shard(ar(8, 2), (("a", "b"), None)).sum(0), ar(8, 2).sum(0)), "either")
add("sharding", "sharding.spec_list_not_tuple", lambda: V(shard(ar(4, 2), ["a", None]) + 1, ar(4, 2) + 1), "either")
add("sharding", "sharding.uneven_rows", lambda: V(shard(ar(5, 3), ("a", None)) * 3, ar(5, 3) * 3), "either")
add("sharding", "sharding.uneven_then_sum", lambda: V(shard(ar(5, 3), ("a", "b")).sum(), ar(5, 3).sum()), "either")
add("sharding", "sharding.0d_empty_spec", lambda: V(shard(np.float32(3), ()) + 1, np.float32(4)), "either")
add("sharding", "sharding.0size_dim", lambda: V(shard(np.zeros((0, 4), F32), ("a", "b")) + 1, np.zeros((0, 4), F32)), "either")
add("sharding", "sharding.sum_over_sharded", lambda: V(shard(ar(4, 6), ("a", "b")).sum(1), ar(4, 6).sum(1)))
add("sharding", "sharding.softmax_sharded_dim", lambda: V(strata.softmax(shard(ar(4, 6), (None, "a")), -1),
                                                           torch.softmax(tt(ar(4, 6)), -1)))
add("sharding", "sharding.cumsum_sharded_dim", lambda: V(strata.cumsum(shard(ar(8, 2), ("a", None)), 0), np.cumsum(ar(8, 2), 0)))
add("sharding", "sharding.sort_sharded_dim", lambda: V(strata.sort(shard(ar(8), ("a",)))[0], np.sort(ar(8))))
add("sharding", "sharding.transpose_sharded", lambda: V(strata.transpose(shard(ar(4, 6), ("a", "b")), 0, 1) @ S(ar(4, 2)),
                                                         ar(4, 6).T @ ar(4, 2), rtol=1e-5))
add("sharding", "sharding.reshape_across_shards", lambda: V(shard(ar(4, 6), ("a", "b")).reshape(6, 4), ar(4, 6).reshape(6, 4)))
add("sharding", "sharding.argmax_sharded", lambda: V(strata.argmax(shard(ar(4, 6, start=1) * np.arange(24).reshape(4, 6).astype(F32), (None, "a")), 1),
                                                      np.argmax(ar(4, 6, start=1) * np.arange(24).reshape(4, 6).astype(F32), 1)))
add("sharding", "sharding.index_sharded", lambda: V(shard(ar(8, 2), ("a", None))[[7, 0, 3]], ar(8, 2)[[7, 0, 3]]))
add("sharding", "sharding.int_tensor_sharded", lambda: V(shard(np.arange(8, dtype=np.int8), ("a",)) * 40, np.arange(8, dtype=np.int8) * np.int8(40)))
add("sharding", "sharding.bool_sharded", lambda: V(strata.logical_not(shard(np.array([True, False] * 4), ("b",))), np.array([False, True] * 4)))
add("sharding", "sharding.two_meshes_one_expr", lambda: V(shard(ar(4), ("a",)) + strata.mark_sharding(S(ar(4)), mesh((3, 2, 1, 0)), ("b",)),
                                                           ar(4) * 2), "either")
add("sharding", "sharding.mark_twice_different", lambda: V(strata.mark_sharding(shard(ar(4, 4), ("a", None)), mesh(), (None, "a")) + 0,
                                                            ar(4, 4)), "either")
err("sharding", "sharding.mark_non_tensor", lambda: strata.mark_sharding(np.ones(4), mesh(), ("a",)), match=r"tensor|ndarray|type")
err("sharding", "sharding.mark_mesh_not_mesh", lambda: strata.mark_sharding(S(ar(4)), "mesh", ("a",)), match=r"Mesh|str|argument")
add("sharding", "sharding.clear_unsharded", lambda: V(strata.clear_sharding(S(ar(3))), ar(3)))
add("sharding", "sharding.sharding_of_unsharded", lambda: V(np.array(strata.sharding_of(S(ar(3))) is None), np.array(True)))
add("sharding", "sharding.partition_report_unsharded", lambda: V(np.array(isinstance(strata.partition_report(S(ar(3)) * 2), (str, type(None)))),
                                                                np.array(True)), "either")
add("sharding", "sharding.grad_sharded", lambda: V(strata.grad(lambda w: (shard(ar(4, 2), ("a", None)) @ w).sum())(
    strata.mark_sharding(S(ar(2, 3)), mesh(), (None, "b"))), np.repeat(ar(4, 2).sum(0)[:, None], 3, 1)))
add("sharding", "sharding.scan_over_sharded", lambda: V(strata.scan(lambda c, x: (c + x, None), S(np.zeros(4, F32)),
                                                                    shard(ar(6, 4), (None, "a")))[0], ar(6, 4).sum(0)), "either")
add("sharding", "sharding.mesh_1x4_sharded_on_size1", lambda: V(strata.mark_sharding(S(ar(4, 4)), mesh(shape=(1, 4)), ("a", "b")) * 2,
                                                               ar(4, 4) * 2))
add("sharding", "sharding.mesh_subset_devices", lambda: V(strata.mark_sharding(S(ar(4)), strata.Mesh([2, 3], [2], ("x",)), ("x",)) + 1,
                                                           ar(4) + 1), "either")
add("sharding", "sharding.bf16_sharded_matmul", lambda: V(shard(ar(4, 4), ("a", None)).astype(strata.bfloat16) @ S(ar(4, 2)).astype(strata.bfloat16),
                                                           (tt(ar(4, 4)).bfloat16() @ tt(ar(4, 2)).bfloat16())))
add("sharding", "sharding.mesh_repr_3d", lambda: V(np.array(repr(strata.Mesh([0, 1, 2, 3], [1, 2, 2], ("x", "y", "z"))) == "mesh[x=1,y=2,z=2]"),
                                                    np.array(True)), "either")

# ---- files: safetensors headers / offsets / dtypes, HLO text through `strata run`, config.json --

def load_bytes(name, header, data=b""):
    return strata.load_safetensors(write(name, st_bytes(header, data)))


def one(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"t": {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


SAFE_BAD = {
    "header_len_beyond_file": (lambda: strata.load_safetensors(write("f1.safetensors", struct.pack("<Q", 1000) + b"{}")),
                               r"header|length|1000|size|truncat"),
    "header_len_huge": (lambda: strata.load_safetensors(write("f2.safetensors", struct.pack("<Q", 2**63 + 5) + b"{}")),
                        r"header|length|size|large"),
    "header_len_zero": (lambda: strata.load_safetensors(write("f3.safetensors", struct.pack("<Q", 0))), r"header|empty|json|0"),
    "file_7_bytes": (lambda: strata.load_safetensors(write("f4.safetensors", b"\x01" * 7)), r"short|small|header|8|truncat"),
    "empty_file": (lambda: strata.load_safetensors(write("f5.safetensors", b"")), r"short|small|empty|header|8|truncat"),
    "header_not_json": (lambda: load_bytes("f6.safetensors", b"{not json", b""), r"json|parse|header"),
    "header_json_array": (lambda: load_bytes("f7.safetensors", b"[1,2,3]"), r"object|json|header|array"),
    "header_json_number": (lambda: load_bytes("f8.safetensors", b"42"), r"object|json|header"),
    "dtype_unknown": (lambda: load_bytes("f9.safetensors", one("F8"), b"\0" * 8), r"F8|dtype"),
    "dtype_lowercase": (lambda: load_bytes("f10.safetensors", one("f32"), b"\0" * 8), r"f32|dtype"),
    "dtype_not_string": (lambda: load_bytes("f11.safetensors", {"t": {"dtype": 5, "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
                         r"dtype|string|5"),
    "shape_negative": (lambda: load_bytes("f12.safetensors", one(shape=(-2,)), b"\0" * 8), r"shape|-2|negative"),
    "shape_float": (lambda: load_bytes("f13.safetensors", {"t": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}}, b"\0" * 8),
                    r"shape|2.5|integer"),
    "shape_string": (lambda: load_bytes("f14.safetensors", {"t": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, b"\0" * 8),
                     r"shape|list|array|string"),
    "offsets_reversed": (lambda: load_bytes("f15.safetensors", one(offsets=(8, 0)), b"\0" * 8), r"offset|8|0|begin|end|revers"),
    "offsets_beyond_data": (lambda: load_bytes("f16.safetensors", one(offsets=(0, 800)), b"\0" * 8), r"offset|800|beyond|size|truncat|bytes"),
    "offsets_size_mismatch": (lambda: load_bytes("f17.safetensors", one(shape=(3,)), b"\0" * 8), r"offset|shape|12|8|bytes|size"),
    "offsets_three": (lambda: load_bytes("f18.safetensors", {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}}, b"\0" * 8),
                      r"offset|two|2|pair"),
    "offsets_negative": (lambda: load_bytes("f19.safetensors", one(offsets=(-8, 0)), b"\0" * 8), r"offset|-8|negative"),
    "offsets_missing": (lambda: load_bytes("f20.safetensors", {"t": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), r"offset|data_offsets|missing"),
    "offsets_overlap": (lambda: load_bytes("f21.safetensors", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12),
                        r"overlap|offset|hole|contig"),
    "shape_overflow": (lambda: load_bytes("f22.safetensors", one(shape=(2**62, 2**62)), b"\0" * 8), r"shape|overflow|large|size|offset"),
    "metadata_non_string": (lambda: load_bytes("f23.safetensors", {"__metadata__": {"a": 5}, **one()}, b"\0" * 8), "either"),
    "entry_not_object": (lambda: load_bytes("f24.safetensors", {"t": 5}, b""), r"t|object|entry|dtype"),
    "directory_path": (lambda: strata.load_safetensors(TMP), r"director|safetensors|index|" + re.escape(TMP)),
    "missing_path": (lambda: strata.load_safetensors(tmp("nope.safetensors")), r"nope|not found|no such|exist"),
    "nul_in_path": (lambda: strata.load_safetensors(tmp("a\0b.safetensors")), r"nul|null|\\0|\\x00|embedded|path"),
    "index_missing_shard": (lambda: strata.load_safetensors(write("idx/model.safetensors.index.json",
                                                                  json.dumps({"weight_map": {"w": "model-00001.safetensors"}}))),
                            r"model-00001|shard|not found|no such|exist"),
    "index_bad_json": (lambda: strata.load_safetensors(write("idx2/model.safetensors.index.json", "{weight_map")),
                       r"json|parse|index"),
    "index_weight_map_list": (lambda: strata.load_safetensors(write("idx3/model.safetensors.index.json", json.dumps({"weight_map": [1]}))),
                              r"weight_map|object|index"),
    "bool_dtype_size": (lambda: load_bytes("f25.safetensors", one("BOOL", (3,), (0, 2)), b"\1\0"), r"offset|shape|3|2|bytes|size"),
    "f16_odd_bytes": (lambda: load_bytes("f26.safetensors", one("F16", (1,), (0, 3)), b"\0\0\0"), r"offset|shape|3|2|bytes|size"),
    "data_padding_after": (lambda: load_bytes("f27.safetensors", one(), b"\0" * 12), "either"),
}
for name, (fn, match) in SAFE_BAD.items():
    add("files", f"files.safetensors.{name}", fn, "either" if match == "either" else "error", None if match == "either" else match)
add("files", "files.safetensors.header_trailing_spaces", lambda: V(load_bytes("g1.safetensors", json.dumps(one()).encode() + b"    ",
                                                                            np.array([1.5, -2], F32).tobytes())["t"],
                                                                 np.array([1.5, -2], F32)))
add("files", "files.safetensors.zero_size_tensor", lambda: V(load_bytes("g2.safetensors", one(shape=(0, 3), offsets=(0, 0)))["t"],
                                                           np.zeros((0, 3), F32)))
add("files", "files.safetensors.0d_tensor", lambda: V(load_bytes("g3.safetensors", one(shape=(), offsets=(0, 4)),
                                                               np.array(7.0, F32).tobytes())["t"], np.float32(7)))
add("files", "files.safetensors.bf16", lambda: V(load_bytes("g4.safetensors", one("BF16", (2,), (0, 4)),
                                                          torch.tensor([1.5, -3.0], dtype=torch.bfloat16).view(torch.int16).numpy().tobytes())["t"],
                                               torch.tensor([1.5, -3.0], dtype=torch.bfloat16)))
add("files", "files.safetensors.u16", lambda: V(load_bytes("g5.safetensors", one("U16", (2,), (0, 4)),
                                                         np.array([65535, 1], np.uint16).tobytes())["t"], np.array([65535, 1], np.uint16)))
add("files", "files.safetensors.i8", lambda: V(load_bytes("g6.safetensors", one("I8", (3,), (0, 3)), np.array([-128, 0, 127], np.int8).tobytes())["t"],
                                             np.array([-128, 0, 127], np.int8)))
add("files", "files.safetensors.unaligned_offset", lambda: V(load_bytes("g7.safetensors", {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                                                                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]}},
                                                                      b"\x07" + np.array([2.5], F32).tobytes())["b"], np.array([2.5], F32)))
add("files", "files.safetensors.f8_e4m3", lambda: load_bytes("g8.safetensors", one("F8_E4M3", (2,), (0, 2)), b"\x38\x40"), "either")
add("files", "files.safetensors.roundtrip_odd", lambda: (lambda d: [V(d["b"], np.array([True, False])), V(d["e"], np.zeros((2, 0), np.int16)),
                                                                    V(d["s"], np.float64(3)), V(d["u"], np.array([2**63], np.uint64))])(
    _roundtrip({"b": S(np.array([True, False])), "e": S(np.zeros((2, 0), np.int16)), "s": S(np.float64(3)),
                "u": S(np.array([2**63], np.uint64))})))


def _roundtrip(d, **kw):
    path = tmp("rt.safetensors")
    strata.save_safetensors(path, d, **kw)
    return strata.load_safetensors(path)


add("files", "files.safetensors.roundtrip_empty_name", lambda: V(_roundtrip({"": S(ar(2))})[""], ar(2)), "either")
add("files", "files.safetensors.roundtrip_unicode_name", lambda: V(_roundtrip({"вес.π": S(ar(2))})["вес.π"], ar(2)))
add("files", "files.safetensors.roundtrip_non_contiguous_view", lambda: V(_roundtrip({"t": S(ar(3, 4)).T})["t"], ar(3, 4).T))
add("files", "files.safetensors.roundtrip_metadata_key", lambda: V(_roundtrip({"t": S(ar(2))}, metadata={"format": "pt", "x": ""})["t"], ar(2)))
err("files", "files.safetensors.save_reserved_name", lambda: strata.save_safetensors(tmp("r.safetensors"), {"__metadata__": S(ar(2))}),
    match=r"__metadata__|reserved|name")
err("files", "files.safetensors.save_unwritable", lambda: strata.save_safetensors("/proc/strata-probe.safetensors", {"t": S(ar(2))}),
    match=r"/proc/strata-probe|write|open|permission|denied")
err("files", "files.safetensors.save_into_missing_dir", lambda: strata.save_safetensors(tmp("no/such/dir/x.safetensors"), {"t": S(ar(2))}),
    match=r"no/such|write|open|director|exist")
add("files", "files.safetensors.save_numpy_value", lambda: (strata.save_safetensors(tmp("n.safetensors"), {"t": np.ones(2)}),
                                                          V(strata.load_safetensors(tmp("n.safetensors"))["t"], np.ones(2)))[1], "either")
err("files", "files.safetensors.save_int_key", lambda: strata.save_safetensors(tmp("n2.safetensors"), {3: S(ar(2))}),
    match=r"str|key|int|name")
err("files", "files.safetensors.save_metadata_non_str", lambda: strata.save_safetensors(tmp("n3.safetensors"), {"t": S(ar(2))}, metadata={"a": 1}),
    match=r"metadata|str|int")
err("files", "files.safetensors.save_path_is_dir", lambda: strata.save_safetensors(TMP, {"t": S(ar(2))}),
    match=r"director|write|open|" + re.escape(TMP))

# HLO text through `strata run`
def _inputs(name="in.safetensors", **tensors):
    return save_inputs(name, **tensors)


def run_hlo(text, inputs=None, out="out.safetensors", expect="error", match=None, extra=(), path=None):
    prog = path or write("prog.hlo", text)
    if inputs is None:
        inputs = _inputs(x=np.ones(3, F32), y=np.arange(3, dtype=F32))
    return cli(["run", prog, "--inputs", inputs, "--output", tmp(out), *extra], expect, match)


def _check_out(name, want):
    def check(_output):
        got = strata.load_safetensors(tmp(name))["output"]
        check_value(V(got, want))
    return check


add("files", "files.run.ok_add", lambda: run_hlo(HLO_ADD, expect=_check_out("out.safetensors", np.array([1, 2, 3], F32))))
add("files", "files.run.syntax_error", lambda: run_hlo(HLO_ADD.replace("add(x, y)", "add(x, y")), "error", r"line|expect|\)|parse")
add("files", "files.run.unknown_opcode", lambda: run_hlo(HLO_ADD.replace("add(x, y)", "frobnicate(x, y)")), "error", r"frobnicate|opcode|unknown")
add("files", "files.run.shape_mismatch_in_op", lambda: run_hlo(HLO_ADD.replace("y = f32[3] parameter(1)", "y = f32[4] parameter(1)")
                                                              .replace("y: f32[3]", "y: f32[4]")), "error", r"shape|f32\[4\]|f32\[3\]|add")
add("files", "files.run.declared_shape_wrong", lambda: run_hlo(HLO_ADD.replace("ROOT add.0 = f32[3]", "ROOT add.0 = f32[5]")),
    "error", r"shape|f32\[5\]|f32\[3\]|add")
add("files", "files.run.parameter_missing_from_inputs", lambda: run_hlo(HLO_ADD, _inputs("in2.safetensors", x=np.ones(3, F32))),
    "error", r"'?y'?|parameter|missing")
add("files", "files.run.input_dtype_mismatch", lambda: run_hlo(HLO_ADD, _inputs("in3.safetensors", x=np.ones(3, F32), y=np.ones(3, np.int32))),
    "error", r"y|dtype|s32|i32|f32|int32")
add("files", "files.run.input_shape_mismatch", lambda: run_hlo(HLO_ADD, _inputs("in4.safetensors", x=np.ones(3, F32), y=np.ones(4, F32))),
    "error", r"y|shape|\[4\]|\[3\]")
add("files", "files.run.extra_input", lambda: run_hlo(HLO_ADD, _inputs("in5.safetensors", x=np.ones(3, F32), y=np.ones(3, F32), z=np.ones(1, F32)),
                                                      expect="error", match=r"z|extra|unused|parameter"), "either")
add("files", "files.run.empty_program", lambda: run_hlo(""), "error", r"empty|HloModule|expect|ENTRY")
add("files", "files.run.binary_program", lambda: run_hlo(None, path=write("bin.hlo", bytes(range(256)) * 4)), "error", r"HloModule|expect|parse|line|character")
add("files", "files.run.missing_program", lambda: run_hlo(None, path=tmp("missing.hlo")), "error", r"missing.hlo|not found|no such|exist")
add("files", "files.run.missing_inputs_file", lambda: run_hlo(HLO_ADD, tmp("missing.safetensors")), "error",
    r"missing.safetensors|not found|no such|exist")
add("files", "files.run.output_unwritable", lambda: run_hlo(HLO_ADD, out="no/such/dir/out.safetensors"), "error",
    r"no/such|write|open|director|exist")
add("files", "files.run.no_root", lambda: run_hlo(HLO_ADD.replace("ROOT ", "")), "either")
# XLA's parser takes the last computation as the entry when none is marked
add("files", "files.run.no_entry", lambda: run_hlo(HLO_ADD.replace("ENTRY ", "")), "either")
add("files", "files.run.undefined_operand", lambda: run_hlo(HLO_ADD.replace("add(x, y)", "add(x, q)")), "error", r"'?q'?|undefined|unknown|operand")
add("files", "files.run.duplicate_name", lambda: run_hlo(HLO_ADD.replace("y = f32[3] parameter(1)", "x = f32[3] parameter(1)")),
    "error", r"duplicate|x|twice|already|parameter")
add("files", "files.run.parameter_index_gap", lambda: run_hlo(HLO_ADD.replace("parameter(1)", "parameter(5)")), "error",
    r"parameter|5|index")
add("files", "files.run.cycle", lambda: run_hlo(HLO_ADD.replace("ROOT add.0 = f32[3] add(x, y)",
                                                                 "a = f32[3] add(x, b)\n  b = f32[3] add(a, y)\n  ROOT c = f32[3] add(a, b)")),
    "error", r"'?b'?|undefined|unknown|before|cycle|operand")
add("files", "files.run.int_div_by_zero", lambda: run_hlo(
    "HloModule m\n\nENTRY main (x: s32[2], y: s32[2]) -> s32[2] {\n  x = s32[2] parameter(0)\n  y = s32[2] parameter(1)\n"
    "  ROOT d = s32[2] divide(x, y)\n}\n", _inputs("in6.safetensors", x=np.array([7, -7], np.int32), y=np.zeros(2, np.int32)),
    expect=_check_out("out.safetensors", np.array([-1, -1], np.int32))), "either")
add("files", "files.run.negative_dim", lambda: run_hlo(HLO_ADD.replace("f32[3]", "f32[-3]")), "error", r"-3|negative|dim|shape")
add("files", "files.run.huge_constant_shape", lambda: run_hlo(
    "HloModule m\n\nENTRY main () -> f32[] {\n  c = f32[] constant(1)\n  b = f32[4611686018427387904,4] broadcast(c), dimensions={}\n"
    "  ROOT r = f32[] constant(2)\n}\n", _inputs("in7.safetensors", x=np.ones(1, F32))), "error", r"large|overflow|size|bytes")
add("files", "files.run.bad_flag", lambda: cli(["run", tmp("prog.hlo"), "--output", tmp("o.safetensors"), "--frobnicate"]),
    "error", r"frobnicate|unknown|extra|argument")
add("files", "files.run.program_is_directory", lambda: run_hlo(None, path=TMP), "error", r"director|read|" + re.escape(TMP))

# config.json and checkpoints through `strata lm` and strata.nn
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32,
         "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "torch_dtype": "float32", "tie_word_embeddings": False}


def _model_dir(name="model", **changes):
    """A saved tiny Llama (made once), with config.json changed."""
    return llama_dir(LLAMA, "model-base", name, changes)


def _tokens(name="tokens.safetensors", arr=None, key="input_ids"):
    return token_file(name, arr, key)


def lm(model, tokens=None, expect="error", match=None, extra=()):
    return cli(["lm", "--model", model, "--tokens", tokens or _tokens(), "--output", tmp("lm-out.safetensors"), *extra],
               expect, match)


def _check_logits(_output):
    from transformers import LlamaForCausalLM
    ref = LlamaForCausalLM.from_pretrained(tmp("model-base")).eval()
    out = strata.load_safetensors(tmp("lm-out.safetensors"))
    key = [k for k in out if "logit" in k][0]
    with torch.no_grad():
        want = ref(torch.tensor([[1, 5, 7, 2]])).logits
    check_value(V(out[key], want, rtol=1e-4, atol=1e-4))


add("files", "files.lm.ok_logits_vs_transformers", lambda: lm(_model_dir("model-base"), expect=_check_logits))
add("files", "files.lm.config_not_json", lambda: (lambda d: (write(os.path.relpath(os.path.join(d, "config.json"), TMP), "{oops"), lm(d))[1])(
    _model_dir("m1")), "error", r"config.json|json|parse")
add("files", "files.lm.config_missing_hidden", lambda: lm(_model_dir("m2", hidden_size=None)), "error", r"hidden_size")
add("files", "files.lm.config_heads_not_dividing", lambda: lm(_model_dir("m3", num_attention_heads=3)), "error",
    r"num_attention_heads|hidden_size|divis|3|16")
add("files", "files.lm.config_kv_not_dividing", lambda: lm(_model_dir("m4", num_key_value_heads=3)), "error",
    r"num_key_value_heads|divis|3|heads")
add("files", "files.lm.config_vocab_negative", lambda: lm(_model_dir("m5", vocab_size=-1)), "error", r"vocab_size|-1|negative|shape")
add("files", "files.lm.config_string_int", lambda: lm(_model_dir("m6", hidden_size="16")), "error", r"hidden_size|string|int|number")
add("files", "files.lm.config_model_type_gpt2", lambda: lm(_model_dir("m7", model_type="gpt2")), "error", r"gpt2|llama|model_type")
add("files", "files.lm.config_layers_more_than_weights", lambda: lm(_model_dir("m8", num_hidden_layers=3)), "error",
    r"layers\.2|missing|num_hidden_layers|3")
add("files", "files.lm.config_vocab_mismatch", lambda: lm(_model_dir("m9", vocab_size=40)), "error", r"embed|shape|40|32|vocab")
add("files", "files.lm.config_eps_string", lambda: lm(_model_dir("m10", rms_norm_eps="tiny")), "error", r"rms_norm_eps|number|string")
add("files", "files.lm.config_array", lambda: (lambda d: (write(os.path.relpath(os.path.join(d, "config.json"), TMP), "[1]"), lm(d))[1])(
    _model_dir("m11")), "error", r"config|object|json")
add("files", "files.lm.missing_model_dir", lambda: lm(tmp("no-model")), "error", r"no-model|not found|no such|exist|config.json")
add("files", "files.lm.tokens_f32", lambda: lm(_model_dir("model-base"), _tokens("t1.safetensors", np.ones((1, 4), F32))), "error",
    r"I64|int64|F32|f32|dtype")
add("files", "files.lm.tokens_out_of_vocab", lambda: lm(_model_dir("model-base"), _tokens("t2.safetensors", np.array([[1, 32]], np.int64))),
    "error", r"32|vocab|range|bound")
add("files", "files.lm.tokens_negative", lambda: lm(_model_dir("model-base"), _tokens("t3.safetensors", np.array([[1, -1]], np.int64))),
    "error", r"-1|vocab|range|bound|negative")
add("files", "files.lm.tokens_1d", lambda: lm(_model_dir("model-base"), _tokens("t4.safetensors", np.array([1, 2], np.int64))),
    "error", r"\[batch, ?seq\]|2-d|rank|shape|dim")
add("files", "files.lm.tokens_wrong_name", lambda: lm(_model_dir("model-base"), _tokens("t5.safetensors", key="ids")),
    "error", r"input_ids|ids|name|missing")
add("files", "files.lm.labels_shape_mismatch", lambda: lm(_model_dir("model-base"), extra=("--labels", _tokens("l1.safetensors", np.array([[1, 2]], np.int64), "labels"))),
    "error", r"labels|shape|\[1, ?2\]|\[1, ?4\]")
add("files", "files.lm.labels_wrong_key", lambda: lm(_model_dir("model-base"), extra=("--labels", _tokens("l2.safetensors", key="input_ids"))),
    "either")
add("files", "files.lm.bad_layers_choice", lambda: lm(_model_dir("model-base"), extra=("--layers", "loop")), "error", r"loop|scan|unrolled|layers")
add("files", "files.lm.weights_truncated", lambda: (lambda d: (_truncate(d), lm(d))[1])(_model_dir("m12")), "error",
    r"safetensors|truncat|offset|size|bytes|short")
add("files", "files.lm.weight_wrong_dtype_int", lambda: (lambda d: (_retype(d), lm(d))[1])(_model_dir("m13")), "either")


def _truncate(d):
    f = [n for n in os.listdir(d) if n.endswith(".safetensors")][0]
    p = os.path.join(d, f)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) - 100])


def _retype(d):
    f = [n for n in os.listdir(d) if n.endswith(".safetensors")][0]
    p = os.path.join(d, f)
    t = strata.load_safetensors(p)
    t = {k: (v.astype(strata.int32) if "norm" in k else v) for k, v in t.items()}
    strata.save_safetensors(p, t)


add("files", "files.nn.config_dict_missing_key", lambda: strata.nn.LlamaForCausalLM({k: v for k, v in LLAMA.items() if k != "vocab_size"}),
    "error", r"vocab_size")
add("files", "files.nn.config_dict_zero_layers", lambda: V(strata.nn.LlamaForCausalLM({**LLAMA, "num_hidden_layers": 0}, key=strata.random_key(1))(
    S(np.array([[1, 2]]))).shape == (1, 2, 32) and np.array(True), np.array(True)), "either")
add("files", "files.nn.config_dict_float_layers", lambda: strata.nn.LlamaForCausalLM({**LLAMA, "num_hidden_layers": 2.5}), "error",
    r"num_hidden_layers|int|2.5")
add("files", "files.nn.config_dict_heads_zero", lambda: strata.nn.LlamaForCausalLM({**LLAMA, "num_attention_heads": 0}), "error",
    r"num_attention_heads|0|zero|divis")

# ---- DLPack / NumPy interop: non-contiguous, read-only, odd dtypes ----------------------------

def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


NP_GOOD = {
    "transposed": lambda: ar(3, 4).T, "strided": lambda: ar(6, 4)[::2, ::3], "neg_stride": lambda: ar(5)[::-1],
    "readonly": lambda: _readonly(ar(2, 3)), "zero_stride": lambda: np.broadcast_to(ar(3), (4, 3)),
    "big_endian": lambda: ar(4).astype(">f4"), "fortran": lambda: np.asfortranarray(ar(3, 4)),
    "unaligned": lambda: np.frombuffer(b"\0" + ar(4).tobytes(), F32, 4, 1), "bool": lambda: np.array([[True, False]]),
    "uint16": lambda: np.array([65535, 0], np.uint16), "uint32": lambda: np.array([2**32 - 1], np.uint32),
    "int8_neg_stride": lambda: np.arange(-5, 5, dtype=np.int8)[::-3], "f16_transposed": lambda: ar(2, 3, dtype=np.float16).T,
    "0d": lambda: np.array(2.5, F32), "0size_strided": lambda: np.zeros((0, 6), F32)[:, ::2],
    "memmap_like_view": lambda: ar(4, 4)[1:3, 1:3], "f64_scalar_np": lambda: np.float64(1.25),
    "int_ptr_size": lambda: np.array([1, 2], np.intp),
}
for name, make in NP_GOOD.items():
    add("interop", f"interop.tensor.{name}", lambda make=make: V(S(make()), np.asarray(make()).astype(np.asarray(make()).dtype.newbyteorder("="))))
    add("interop", f"interop.from_numpy.{name}", lambda make=make: V(strata.from_numpy(np.asarray(make())),
                                                                     np.asarray(make()).astype(np.asarray(make()).dtype.newbyteorder("="))),
        "either")
NP_BAD = {
    "complex64": (lambda: np.ones(2, np.complex64), r"complex"), "longdouble": (lambda: np.ones(2, np.longdouble), r"float128|longdouble|dtype"),
    "object": (lambda: np.array([1, "a"], object), r"object|dtype"), "str": (lambda: np.array(["ab"]), r"str|<U2|unicode|dtype"),
    "datetime": (lambda: np.array(["2020-01-01"], "datetime64[D]"), r"datetime|dtype"), "structured": (lambda: np.zeros(2, "i4,f4"), r"struct|void|dtype|V"),
    "bytes": (lambda: np.array([b"ab"]), r"bytes|S2|dtype"),
}
for name, (make, match) in NP_BAD.items():
    err("interop", f"interop.tensor_bad.{name}", lambda make=make: S(make()), match=match)
    err("interop", f"interop.from_numpy_bad.{name}", lambda make=make: strata.from_numpy(make()), match=match)
err("interop", "interop.from_numpy_list", lambda: strata.from_numpy([1, 2]), match=r"ndarray|list|array")

TORCH_GOOD = {
    "transposed": lambda: tt(ar(3, 4)).t(), "sliced_offset": lambda: tt(ar(6, 4))[2:, 1:], "expanded": lambda: tt(ar(3)).expand(4, 3),
    "bool": lambda: torch.tensor([True, False]), "bf16": lambda: torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    "f16_step": lambda: tt(ar(8, dtype=np.float16))[::2], "int8": lambda: torch.tensor([-128, 127], dtype=torch.int8),
    "uint8": lambda: torch.tensor([255, 0], dtype=torch.uint8), "0d": lambda: torch.tensor(3.0),
    "0size": lambda: torch.zeros(0, 3), "channels_last": lambda: tt(ar(1, 3, 2, 2)).to(memory_format=torch.channels_last),
    "unaligned_storage_offset": lambda: tt(ar(17))[1:], "uint16": lambda: torch.tensor([65535, 1], dtype=torch.uint16),
    "int64_big": lambda: torch.tensor([2**62, -2**63]), "f64_neg_stride_like_flip": lambda: tt(ar(4, dtype=np.float64)).flip(0),
    "size1_odd_stride": lambda: torch.as_strided(tt(ar(10)), (1, 3), (7, 2)),
}
for name, make in TORCH_GOOD.items():
    add("interop", f"interop.from_dlpack.{name}", lambda make=make: V(strata.from_dlpack(make()), make()))
err("interop", "interop.from_dlpack_requires_grad", lambda: strata.from_dlpack(torch.ones(2, requires_grad=True)),
    match=r"grad|detach", types=(Exception,))
err("interop", "interop.from_dlpack_complex", lambda: strata.from_dlpack(torch.ones(2, dtype=torch.complex64)), match=r"complex|dtype")
err("interop", "interop.from_dlpack_list", lambda: strata.from_dlpack([1, 2]), match=r"dlpack|list|__dlpack__")
err("interop", "interop.from_dlpack_sparse", lambda: strata.from_dlpack(torch.eye(2).to_sparse()), match=r"sparse|strided|layout|dlpack", types=(Exception,))
err("interop", "interop.from_dlpack_meta", lambda: strata.from_dlpack(torch.ones(2, device="meta")), match=r"meta|device|cpu", types=(Exception,))
add("interop", "interop.from_dlpack_np_readonly", lambda: V(strata.from_dlpack(_readonly(ar(3))), ar(3)), "either", r"readonly",
    (Exception,))
add("interop", "interop.from_dlpack_np_neg_stride", lambda: V(strata.from_dlpack(ar(5)[::-1]), ar(5)[::-1]), "either")
add("interop", "interop.from_dlpack_np_0d", lambda: V(strata.from_dlpack(np.array(1.5, F32)), np.float32(1.5)))
add("interop", "interop.from_dlpack_np_bool", lambda: V(strata.from_dlpack(np.array([True, False])), np.array([True, False])), "either")


def _capsule_twice():
    cap = strata.to_dlpack(S(ar(3)))
    torch.utils.dlpack.from_dlpack(cap)
    return torch.utils.dlpack.from_dlpack(cap)


err("interop", "interop.to_dlpack_capsule_twice", _capsule_twice, match=r"consumed|used|capsule|dltensor", types=(Exception,))
add("interop", "interop.torch_from_dlpack_bf16", lambda: V(torch.from_dlpack(S(ar(3)).astype(strata.bfloat16)),
                                                          tt(ar(3)).bfloat16()))
add("interop", "interop.torch_from_dlpack_view", lambda: V(torch.from_dlpack(S(ar(3, 4)).T[1:]), tt(ar(3, 4)).t()[1:]))
add("interop", "interop.torch_from_dlpack_0size", lambda: V(torch.from_dlpack(S(np.zeros((0, 2), F32))), torch.zeros(0, 2)))
add("interop", "interop.torch_from_dlpack_bool", lambda: V(torch.from_dlpack(S(np.array([True, False]))), torch.tensor([True, False])))
add("interop", "interop.torch_from_dlpack_u64", lambda: V(torch.from_dlpack(S(np.array([2**63], np.uint64))).view(torch.int64),
                                                         torch.tensor([-2**63])), "either")
add("interop", "interop.numpy_of_lazy_result_is_own", lambda: (lambda x: (lambda a: (a.__setitem__(0, 99.0) if a.flags.writeable else None,
                                                                                      V(x, ar(3) * 2))[1])(x.numpy()))(S(ar(3)) * 2))
add("interop", "interop.tensor_copies_numpy", lambda: (lambda a: (lambda x: (a.__setitem__(0, 99.0), V(x, ar(3)))[1])(S(a)))(ar(3)))
add("interop", "interop.np_array_of_bf16", lambda: np.asarray(S(ar(2)).astype(strata.bfloat16)), "error")
CASES[-1].match = r"bfloat16"
add("interop", "interop.np_array_dtype_arg", lambda: V(np.array(S(ar(2)), dtype=np.float64), ar(2).astype(np.float64)))
add("interop", "interop.np_add_tensor", lambda: V(np.ones(2, F32) + S(ar(2)), np.ones(2, F32) + ar(2)))
add("interop", "interop.np_scalar_times_tensor", lambda: V(np.float64(2) * S(ar(2)), 2 * ar(2)), "either")
add("interop", "interop.torch_tensor_of_strata", lambda: V(torch.as_tensor(np.asarray(S(ar(2, 2)))), tt(ar(2, 2))))
add("interop", "interop.tensor_of_torch_tensor", lambda: V(S(torch.tensor([1.5, 2.5])), np.array([1.5, 2.5], F32)), "either")
add("interop", "interop.tensor_of_list_of_tensors", lambda: V(S([S(np.float32(1)), S(np.float32(2))]), np.array([1, 2], F32)), "either")
add("interop", "interop.tolist_0d", lambda: V(np.array(S(np.float32(2)).tolist()), np.array(2.0)))
add("interop", "interop.item_of_2_elements", lambda: S(ar(2)).item(), "error")
CASES[-1].match = r"one element|1 element|2 elements|scalar|item|shape"
add("interop", "interop.float_of_int_tensor", lambda: V(np.array(float(S([3]))), np.array(3.0)), "either")
add("interop", "interop.bool_of_2_elements", lambda: bool(S([True, False])), "error")
CASES[-1].match = r"ambiguous|one element|2 elements|more than one"
add("interop", "interop.len_of_0d", lambda: len(S(np.float32(1))), "error")
CASES[-1].match = r"0-d|len|scalar|unsized"
add("interop", "interop.index_of_float_tensor", lambda: [1, 2, 3][S(np.float32(1))], "error")
CASES[-1].match = r"integer|index|float"
add("interop", "interop.index_of_int_tensor", lambda: V(np.array([1, 2, 3][S(np.int64(1))]), np.array(2)), "either")
add("interop", "interop.iter_0d", lambda: list(S(np.float32(1))), "error")
CASES[-1].match = r"0-d|iter|scalar|len"
add("interop", "interop.np_ufunc_on_tensor", lambda: V(np.exp(S(ar(3))), np.exp(ar(3))), "either")
# Writing into the producer after from_dlpack: strata shares 64-byte-aligned
# memory and copies the rest (documented), so either value is right.
def _dlpack_then_mutate():
    t = tt(ar(3) * 1)
    s = strata.from_dlpack(t)
    t.add_(1)
    got = s.numpy()
    shared = np.array_equal(got, ar(3) + 1)
    return V(s, ar(3) + 1 if shared else ar(3))


add("interop", "interop.dlpack_shares_then_mutate", _dlpack_then_mutate, "either")

# ---- every CLI subcommand: bad flags, missing / unwritable paths, bad numbers -----------------

SMALL = ["--hidden", "16", "--num-layers", "1", "--heads", "2", "--kv-heads", "1", "--batch", "2", "--seq", "8",
         "--steps", "2", "--warmup", "1", "--eval-every", "0", "--eval-batches", "1", "--checkpoint-every", "0",
         "--sample-tokens", "4", "--quiet"]


def corpus(name="corpus.txt", text="the quick brown fox jumps over the lazy dog. " * 40):
    return write(name, text)


def train(*changes, expect="error", match=None, out=None, base=True):
    """`strata train` on SMALL (or no base flags) changed by `changes` (flag, value, ...; the
    last value of a flag counts, "" gives it alone)."""
    flags = dict(zip(changes[::2], changes[1::2]))
    args = train_args(SMALL if base else [], flags.items(), "", corpus, "run", out)
    return cli(["train", *args], expect, match)


T_BAD = {
    "steps_negative": (("--steps", "-1"), r"steps|-1|negative|positive"),
    "steps_text": (("--steps", "abc"), r"steps|abc|integer|number"),
    "steps_float": (("--steps", "2.5"), r"steps|2.5|integer"),
    "steps_overflow": (("--steps", "99999999999999999999999"), r"steps|range|overflow|integer|9999"),
    "batch_zero": (("--batch", "0"), r"batch|0|positive"),
    "seq_zero": (("--seq", "0"), r"seq|0|positive"),
    "hidden_zero": (("--hidden", "0"), r"hidden|0|positive"),
    "heads_not_dividing": (("--heads", "3"), r"heads|hidden|divis|3|16"),
    "kv_not_dividing": (("--kv-heads", "3", "--heads", "4"), r"kv-heads|kv_heads|heads|divis|3|4"),
    "kv_zero": (("--kv-heads", "0"), r"kv|0|positive"),
    "heads_negative": (("--heads", "-2"), r"heads|-2|negative|positive"),
    "lr_nan": (("--lr", "nan"), r"lr|nan|finite|learning"),
    "lr_negative": (("--lr", "-1"), r"lr|-1|negative|positive|learning"),
    "lr_inf": (("--lr", "inf"), r"lr|inf|finite|learning"),
    "heldout_above_1": (("--heldout", "1.5"), r"heldout|1.5|fraction|between|range"),
    "heldout_1": (("--heldout", "1"), r"heldout|1|fraction|between|range|train|empty|short"),
    "heldout_negative": (("--heldout", "-0.1"), r"heldout|-0.1|fraction|between|range|negative"),
    "mesh_zero": (("--mesh", "data=0"), r"mesh|data=0|0|positive"),
    "mesh_junk": (("--mesh", "junk"), r"mesh|junk|name=size|axis"),
    "mesh_no_number": (("--mesh", "data="), r"mesh|data=|size|number"),
    "mesh_dup_axis": (("--mesh", "data=1,data=1"), r"mesh|data|twice|duplicate|repeat"),
    "mesh_unknown_axis": (("--mesh", "pipeline=2"), r"mesh|pipeline|axis|data|model"),
    "devices_zero": (("--devices", "0"), r"devices|0|positive"),
    "devices_negative": (("--devices", "-1"), r"devices|-1|negative|positive"),
    "devices_and_mesh": (("--devices", "2", "--mesh", "data=2"), r"devices|mesh|both|either|exclu"),
    "tp_on_data_mesh": (("--sharding", "tp", "--mesh", "data=2"), r"tp|model|mesh|axis"),
    "tp_heads_not_split": (("--sharding", "tp", "--mesh", "model=4", "--heads", "2"), r"heads|model|divis|2|4|kv"),
    "sharding_unknown": (("--sharding", "zero3"), r"sharding|zero3|dp|fsdp"),
    "dtype_unknown": (("--dtype", "fp8"), r"dtype|fp8|f32|bf16"),
    "remat_unknown": (("--remat", "none"), r"remat|none|carries"),
    "seed_negative": (("--seed", "-1"), r"seed|-1|negative|unsigned|UINT"),
    "eval_batches_zero": (("--eval-batches", "0", "--eval-every", "1"), r"eval-batches|eval_batches|0|positive"),
    "eval_every_negative": (("--eval-every", "-5"), r"eval-every|-5|negative"),
    "checkpoint_every_negative": (("--checkpoint-every", "-1"), r"checkpoint-every|-1|negative"),
    "warmup_negative": (("--warmup", "-3"), r"warmup|-3|negative"),
    "temperature_negative": (("--temperature", "-1"), r"temperature|-1|negative|positive"),
    "temperature_nan": (("--temperature", "nan"), r"temperature|nan|finite"),
    "sample_tokens_negative": (("--sample-tokens", "-5"), r"sample-tokens|-5|negative"),
    "beta1_above_1": (("--beta1", "1.5"), r"beta1|1.5|range|between"),
    "beta2_negative": (("--beta2", "-0.5"), r"beta2|-0.5|range|between|negative"),
    "clip_negative": (("--clip", "-1"), r"clip|-1|negative"),
    "weight_decay_nan": (("--weight-decay", "nan"), r"weight-decay|weight_decay|nan|finite"),
    "min_lr_above_lr": (("--min-lr", "1", "--lr", "0.001"), r"min-lr|lr|above|greater|exceed"),
    "intermediate_negative": (("--intermediate", "-32"), r"intermediate|-32|negative"),
    "corpus_missing": (("--corpus", "/nonexistent/corpus.txt"), r"corpus|nonexistent|not found|no such|exist"),
    "corpus_empty": (("--corpus", "EMPTY"), r"corpus|empty|short|bytes|seq"),
    "corpus_shorter_than_seq": (("--corpus", "SHORT"), r"corpus|short|bytes|seq|window"),
    "corpus_is_dir": (("--corpus", "DIR"), r"corpus|director|read"),
    "out_unwritable": (("--out", "/proc/strata-probe-run"), r"/proc/strata-probe-run|write|create|permission|director"),
    "out_is_file": (("--out", "FILE"), r"out|file|director|exists|create"),
    "resume_nothing": (("--resume", ""), "either"),
    "fall_back_without_resume": (("--fall-back", ""), "either"),
    "unknown_flag": (("--frobnicate", "1"), r"frobnicate|unknown|extra"),
    "layers_unknown": (("--layers", "loop"), r"layers|loop|scan|unrolled"),
    "prompt_empty": (("--prompt", ""), "either"),
    "prompt_non_ascii": (("--prompt", "naïve ☃"), "either"),
    "batch_huge": (("--batch", "100000000000"), r"batch|large|memory|range|overflow|1000"),
    "num_layers_zero": (("--num-layers", "0"), "either"),
}


def _special(path_flag):
    return {"EMPTY": write("empty.txt", ""), "SHORT": write("short.txt", "abc"), "DIR": TMP,
            "FILE": write("a-file", "x")}.get(path_flag, path_flag)


for name, (changes, match) in T_BAD.items():
    def f(changes=changes, match=match):
        changes = [_special(c) for c in changes]
        return train(*changes, expect="error", match=None if match == "either" else match)
    add("cli", f"cli.train.{name}", f, "either" if match == "either" else "error")
add("cli", "cli.train.ok_small", lambda: train(expect="value"))
add("cli", "cli.train.ok_bf16_mesh", lambda: train("--dtype", "bf16", "--mesh", "data=2", expect="value"))


def _export_setup():
    import shutil
    run = tmp("export-run")
    if not os.path.isdir(os.path.join(run, "checkpoints")):
        shutil.rmtree(run, ignore_errors=True)
        r = train(expect="value", out=run)
        if r.outcome != "ok-value":
            raise WrongValue("could not make a checkpoint to export: " + r.detail)
    return os.path.join(run, "checkpoints")


add("cli", "cli.export.ok", lambda: cli(["export", _export_setup(), "--out", tmp("exported")], expect=lambda _output: (
    os.path.exists(os.path.join(tmp("exported"), "config.json")) or (_ for _ in ()).throw(WrongValue("no config.json")))))
add("cli", "cli.export.missing", lambda: cli(["export", tmp("no-ckpt"), "--out", tmp("e1")], match=r"no-ckpt|not found|no such|exist|checkpoint"))
add("cli", "cli.export.file_not_dir", lambda: cli(["export", write("ck-file", "x"), "--out", tmp("e2")], match=r"ck-file|director|checkpoint"))
add("cli", "cli.export.empty_dir", lambda: cli(["export", (os.makedirs(tmp("empty-ck"), exist_ok=True), tmp("empty-ck"))[1], "--out", tmp("e3")],
                                                 match=r"empty-ck|checkpoint|step|no|empty"))
add("cli", "cli.export.out_unwritable", lambda: cli(["export", _export_setup(), "--out", "/proc/strata-probe-export"],
                                                     match=r"/proc/strata-probe-export|write|create|permission|director"))
add("cli", "cli.export.no_out", lambda: cli(["export", _export_setup()], match=r"--out|required"))


def _damaged_checkpoint():
    import shutil
    src = _export_setup()
    dst = tmp("damaged-ck")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    for root, _, files in os.walk(dst):
        for n in files:
            if n.endswith(".safetensors"):
                open(os.path.join(root, n), "wb").write(b"garbage")
    return dst


add("cli", "cli.export.damaged", lambda: cli(["export", _damaged_checkpoint(), "--out", tmp("e4")],
                                              match=r"safetensors|damaged|short|header|corrupt|checkpoint"))
add("cli", "cli.train.resume_damaged", lambda: (lambda ck: train("--resume", "", "--out", os.path.dirname(ck), expect="error",
                                                                  match=r"safetensors|damaged|short|header|corrupt|checkpoint|fall-back"))(
    _damaged_checkpoint()) if False else _resume_damaged())


def _resume_damaged():
    ck = _damaged_checkpoint()
    import shutil
    out = tmp("resume-damaged")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    shutil.copytree(ck, os.path.join(out, "checkpoints"))
    return cli(["train", *SMALL, "--corpus", corpus(), "--out", out, "--resume"], "error",
               r"safetensors|damaged|short|header|corrupt|checkpoint|fall-back")


add("cli", "cli.devices.extra_arg", lambda: cli(["devices", "extra"]), "error", r"extra|unexpected|argument")
add("cli", "cli.devices.env_zero", lambda: cli(["devices"], env={"STRATA_CPU_DEVICES": "0"}), "either")
add("cli", "cli.devices.env_text", lambda: cli(["devices"], env={"STRATA_CPU_DEVICES": "many"}), "error",
    r"STRATA_CPU_DEVICES|many|integer|number")
add("cli", "cli.devices.env_negative", lambda: cli(["devices"], env={"STRATA_CPU_DEVICES": "-4"}), "error",
    r"STRATA_CPU_DEVICES|-4|negative|positive")
add("cli", "cli.devices.env_huge", lambda: cli(["devices"], env={"STRATA_CPU_DEVICES": "99999999999999999999"}), "error",
    r"STRATA_CPU_DEVICES|range|large|9999")
add("cli", "cli.demo.flag", lambda: cli(["demo", "--fast"]), "error", r"fast|unknown|extra")
add("cli", "cli.demo.env_bad_isa", lambda: cli(["demo"], env={"STRATA_ISA": "z80"}), "error", r"STRATA_ISA|z80|isa")
add("cli", "cli.demo.env_bad_fusion", lambda: cli(["demo"], env={"STRATA_FUSION": "maybe"}), "error", r"STRATA_FUSION|maybe")
add("cli", "cli.demo.env_dump_dir_unwritable", lambda: cli(["demo"], env={"STRATA_DUMP_DIR": "/proc/strata-dump"}), "either")
add("cli", "cli.no_subcommand", lambda: cli([]), "error", r"subcommand|usage|required")
add("cli", "cli.unknown_subcommand", lambda: cli(["frob"]), "error", r"frob|unknown|subcommand|extra")
add("cli", "cli.run.no_output_flag", lambda: cli(["run", tmp("prog.hlo")]), "error", r"--output|required")
add("cli", "cli.run.output_flag_without_value", lambda: cli(["run", tmp("prog.hlo"), "--output"]), "error", r"--output|argument|expected|required")
add("cli", "cli.lm.no_flags", lambda: cli(["lm"]), "error", r"--model|required")
add("cli", "cli.lm.output_unwritable", lambda: cli(["lm", "--model", _model_dir("model-base"), "--tokens", _tokens(), "--output",
                                                   "/proc/strata-probe-lm.safetensors"]), "error",
    r"/proc/strata-probe-lm|write|open|permission")
add("cli", "cli.lm.grads_without_labels", lambda: cli(["lm", "--model", _model_dir("model-base"), "--tokens", _tokens(), "--output",
                                                      tmp("lm-g.safetensors"), "--grads"]), "either")
add("cli", "cli.train.collective_timeout_env_text", lambda: train(expect="error", match=r"STRATA_COLLECTIVE_TIMEOUT_MS|abc") if False else
    cli(["train", *SMALL, "--corpus", corpus(), "--out", tmp("run-env"), "--devices", "2"], env={"STRATA_COLLECTIVE_TIMEOUT_MS": "abc"}),
    "error", r"STRATA_COLLECTIVE_TIMEOUT_MS|abc|integer")

# ---- two threads at once ------------------------------------------------------------------------

def two_threads(f, n=2):
    results, errors = [None] * n, []

    def run(i):
        try:
            results[i] = f(i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    if any(t.is_alive() for t in threads):
        raise WrongValue("HANG: a thread did not finish in 50 s")
    if errors:
        raise errors[0]
    return results


def _same_graph(i):
    return [(S(ar(64, 64)) @ S(ar(64, 64)) + i).sum(0).numpy() for _ in range(20)]


def _other_graphs(i):
    x = S(ar(32, 8 + i))
    return [strata.softmax(x * k, -1).numpy() for k in range(10)]


add("threads", "threads.same_graph", lambda: [V(r[-1], (ar(64, 64) @ ar(64, 64) + i).sum(0), rtol=1e-4) for i, r in
                                              enumerate(two_threads(_same_graph))])
add("threads", "threads.different_graphs", lambda: [V(r[-1], torch.softmax(tt(ar(32, 8 + i)) * 9, -1)) for i, r in
                                                    enumerate(two_threads(_other_graphs))])
add("threads", "threads.scan_both", lambda: [V(r, ar(50, 3).sum(0) * (i + 1)) for i, r in enumerate(two_threads(
    lambda i: strata.scan(lambda c, x: (c + x * (i + 1), None), S(np.zeros(3, F32)), S(ar(50, 3)))[0].numpy()))])
add("threads", "threads.grad_both", lambda: [V(r, 2 * ar(5) * (i + 1)) for i, r in enumerate(two_threads(
    lambda i: strata.grad(lambda x: (x * x * (i + 1)).sum())(S(ar(5))).numpy()))])
add("threads", "threads.shared_input_lazy", lambda: (lambda x: [V(r, (ar(100) * 2).sum() + i, dtype=False) for i, r in enumerate(two_threads(
    lambda i: (x.sum() + i).numpy()))])(S(ar(100)) * 2))
add("threads", "threads.error_in_one", lambda: two_threads(lambda i: (S(ar(2, 3)) @ S(ar(2, 3))).numpy() if i == 0 else
                                                           (S(ar(3)) + 1).numpy()), "error", r"matmul|shape|3|2")
add("threads", "threads.many_8", lambda: [V(r, ar(16) * i) for i, r in enumerate(two_threads(lambda i: (S(ar(16)) * i).numpy(), 8))])
add("threads", "threads.safetensors_both", lambda: [V(r, ar(4) + i) for i, r in enumerate(two_threads(
    lambda i: (strata.save_safetensors(tmp(f"th{i}.safetensors"), {"t": S(ar(4) + i)}),
               strata.load_safetensors(tmp(f"th{i}.safetensors"))["t"].numpy())[1]))])
add("threads", "threads.sharded_both", lambda: [V(r, ar(8, 4).sum() * (i + 1), dtype=False) for i, r in enumerate(two_threads(
    lambda i: (strata.mark_sharding(S(ar(8, 4)), mesh(), ("a", "b")) * (i + 1)).sum().numpy()))])
add("threads", "threads.torch_compile_both", lambda: [V(r, torch.sin(tt(ar(6))) * (i + 1)) for i, r in enumerate(two_threads(
    lambda i: _compiled_sin(tt(ar(6)), i + 1)))], "either")
add("threads", "threads.config_change_while_running", lambda: [V(r, ar(64).cumsum()) for r in two_threads(
    lambda i: (strata.set_config(fusion=bool(i)) if i else None, strata.cumsum(S(ar(64)), 0).numpy())[1])] +
    [strata.set_config(fusion=True)] * 0)
add("threads", "threads.metrics_while_running", lambda: two_threads(lambda i: strata.metrics() if i else
                                                                    (S(ar(8)) * 3).numpy())[0] is not None and V(
    two_threads(lambda i: (S(ar(8)) * 3).numpy())[0], ar(8) * 3))


def _compiled_sin(x, k):
    f = torch.compile(lambda t: torch.sin(t) * k, backend=strata.torch.backend)
    return f(x)

# ---- the PyTorch front end: torch.compile(backend=strata), scan, apply_layers, explain ----------
import strata.torch as stt  # noqa: E402


def compiled(fn, *args, clone=True):
    """(strata's result, eager's result) of fn on copies of args."""
    stt.reset()
    a1 = [x.clone() if isinstance(x, torch.Tensor) and clone else x for x in args]
    a2 = [x.clone() if isinstance(x, torch.Tensor) and clone else x for x in args]
    got = torch.compile(fn, backend=stt.backend, fullgraph=False)(*a1)
    want = fn(*a2)
    return got, want, a1, a2


def tc(fn, *args, **kw):
    got, want, a1, a2 = compiled(fn, *args)
    if isinstance(want, (tuple, list)):
        return [V(g, w, **kw) for g, w in zip(got, want)]
    return V(got, want, **kw)


def tc_mut(fn, *args):
    """fn mutates its inputs: the compiled call must leave them as eager does."""
    got, want, a1, a2 = compiled(fn, *args)
    return [V(x, y) for x, y in zip(a1, a2) if isinstance(x, torch.Tensor)] + ([V(got, want)] if isinstance(want, torch.Tensor) else [])


def tc_err(fn, *args):
    """eager refuses: so must the compiled fn (any exception type, with a clear message)."""
    try:
        fn(*[x.clone() if isinstance(x, torch.Tensor) else x for x in args])
    except Exception:  # noqa: BLE001
        pass
    else:
        raise WrongValue("the probe's reference did not refuse")
    stt.reset()
    return torch.compile(fn, backend=stt.backend)(*args)


ANY = (Exception,)
TI = lambda *s, **kw: torch.from_numpy(ar(*s, **kw))  # noqa: E731
TORCH_VALUE = {
    "empty_add": (lambda x: x + 1, [torch.zeros(0, 3)]),
    "empty_sum": (lambda x: x.sum(0), [torch.zeros(0, 3)]),
    "empty_matmul": (lambda x, y: x @ y, [torch.zeros(2, 0), torch.zeros(0, 3)]),
    "empty_softmax": (lambda x: torch.softmax(x, -1), [torch.zeros(3, 0)]),
    "int_floordiv_neg": (lambda x: x // 3, [torch.tensor([-7, 7, -1])]),
    "int_true_div": (lambda x: x / 2, [torch.tensor([7, -7])]),
    "int_remainder_neg": (lambda x: x % -3, [torch.tensor([-7, 7, 0])]),
    "int_floor_divide_tensor": (lambda x, y: torch.floor_divide(x, y), [torch.tensor([7, -7]), torch.tensor([-2, 2])]),
    "uint8_wrap": (lambda x: x + 250, [torch.tensor([10], dtype=torch.uint8)]),
    "int8_mul_wrap": (lambda x: x * x, [torch.tensor([100, -100], dtype=torch.int8)]),
    "bool_sum": (lambda x: x.sum(), [torch.tensor([True, True, False])]),
    "bool_any_all": (lambda x: (x.any(), x.all()), [torch.tensor([True, False])]),
    "bool_mul_float": (lambda x, y: x * y, [torch.tensor([True, False]), torch.tensor([2.5, 3.0])]),
    "cumsum_int32_to_int64": (lambda x: x.cumsum(0), [torch.tensor([1, 2], dtype=torch.int32)]),
    "transposed_input": (lambda x: x * 2 + 1, [TI(3, 4).t()]),
    "strided_input": (lambda x: x.exp(), [TI(8, 4)[::2, 1::2]]),
    "expanded_input": (lambda x: x.sum(0), [TI(3).expand(5, 3)]),
    "channels_last_conv": (lambda x, w: torch.nn.functional.conv2d(x, w), [TI(1, 2, 5, 5).to(memory_format=torch.channels_last), TI(3, 2, 3, 3)]),
    "f16_plus_f32": (lambda x, y: x + y, [TI(3).half(), TI(3)]),
    "bf16_matmul": (lambda x, y: x @ y, [TI(2, 3).bfloat16(), TI(3, 2).bfloat16()]),
    "int_plus_float_scalar": (lambda x: x + 1.5, [torch.tensor([1, 2])]),
    "f64_inputs": (lambda x: torch.tanh(x) * 3, [TI(4).double()]),
    "int_times_bool": (lambda x, y: x * y, [torch.tensor([3, 4], dtype=torch.int16), torch.tensor([True, False])]),
    "returns_input_as_is": (lambda x: x, [TI(3)]),
    "returns_view_of_input": (lambda x: x[1:], [TI(4)]),
    "returns_tuple_with_none": (lambda x: (x + 1, None)[0], [TI(3)]),
    "where_scalars": (lambda x: torch.where(x > 0, 1.0, 0.0), [TI(5)]),
    "masked_fill": (lambda x: x.masked_fill(x < 0, -9.0), [TI(5)]),
    "scatter_add_dups": (lambda x, i, s: x.scatter_add(0, i, s), [torch.zeros(3), torch.tensor([1, 1, 2]), torch.ones(3)]),
    "index_put_accumulate": (lambda x, i: x.index_put((i,), torch.ones(3), accumulate=True), [torch.zeros(3), torch.tensor([0, 0, 2])]),
    "argmax_keepdim": (lambda x: x.argmax(1, keepdim=True), [TI(3, 4)]),
    "embedding_padding": (lambda w, i: torch.nn.functional.embedding(i, w, padding_idx=0), [TI(5, 3), torch.tensor([0, 4, 0])]),
    "layer_norm_f64": (lambda x: torch.nn.functional.layer_norm(x, (4,)), [TI(3, 4).double()]),
    "clamp_int": (lambda x: x.clamp(-1, 1), [torch.tensor([-5, 0, 5])]),
    "pow_int_int": (lambda x: x ** 2, [torch.tensor([-3, 4])]),
    "sort_stable_ties": (lambda x: torch.sort(x, stable=True)[1], [torch.tensor([1.0, 0.0, 1.0, 0.0])]),
    "topk_int": (lambda x: torch.topk(x, 2)[0], [torch.tensor([3, 1, 4, 1, 5])]),
    "one_size_dims": (lambda x: x.squeeze().unsqueeze(0) * 2, [TI(1, 3, 1)]),
    "zero_d_input": (lambda x: x * 2, [torch.tensor(3.0)]),
    "nan_propagation": (lambda x: torch.maximum(x, torch.zeros(2)), [torch.tensor([float("nan"), 1.0])]),
    "cat_with_empty": (lambda x, y: torch.cat([x, y]), [TI(2, 3), torch.zeros(0, 3)]),
    "isnan_isinf": (lambda x: (torch.isnan(x), torch.isinf(x)), [torch.tensor([float("nan"), float("inf"), 1.0])]),
    "arange_in_graph": (lambda x: x + torch.arange(3), [TI(3)]),
    "full_like_int": (lambda x: torch.full_like(x, 7), [torch.tensor([1, 2], dtype=torch.int8)]),
    "mean_dim_f16": (lambda x: x.mean(1), [TI(2, 5).half()]),
    "amin_bool": (lambda x: x.amin(), [torch.tensor([True, False])]),
    "abs_int8_min": (lambda x: x.abs(), [torch.tensor([-128], dtype=torch.int8)]),
    "bitwise_shift": (lambda x: x << 2, [torch.tensor([1, -1, 64], dtype=torch.int8)]),
    "item_graph_break": (lambda x: x * x.sum().item(), [TI(3)]),
    "data_dependent_branch": (lambda x: x + 1 if x.sum() > 0 else x - 1, [TI(3, start=3)]),
    "nonzero_dynamic": (lambda x: torch.nonzero(x), [torch.tensor([0, 1, 0, 2])]),
    "unique_dynamic": (lambda x: torch.unique(x), [torch.tensor([3, 1, 3])]),
    "bool_mask_index": (lambda x: x[x > 0], [TI(6)]),
}
for name, (fn, args) in TORCH_VALUE.items():
    add("torch", f"torch.compile.{name}", lambda fn=fn, args=args: tc(fn, *args))
add("torch", "torch.compile.dynamic_sizes", lambda: (lambda f: [V(f(TI(n)), torch.sin(TI(n))) for n in (2, 3, 7, 0)])(
    (stt.reset(), torch.compile(torch.sin, backend=stt.backend))[1]))
add("torch", "torch.compile.dtype_changes_between_calls", lambda: (lambda f: [V(f(TI(3)), TI(3) * 2), V(f(torch.tensor([1, 2])), torch.tensor([2, 4])),
                                                                              V(f(torch.tensor([True])), torch.tensor([True]) * 2)])(
    (stt.reset(), torch.compile(lambda x: x * 2, backend=stt.backend))[1]))
add("torch", "torch.compile.inplace_input", lambda: tc_mut(lambda x: x.add_(1), TI(3)))
add("torch", "torch.compile.inplace_view_of_input", lambda: tc_mut(lambda x: x[1:].mul_(2), TI(4)))
add("torch", "torch.compile.inplace_transposed_input", lambda: tc_mut(lambda x: x.t().add_(torch.arange(3.0)), TI(3, 3)))
add("torch", "torch.compile.inplace_int_input", lambda: tc_mut(lambda x: x.mul_(3), torch.tensor([1, 2], dtype=torch.int16)))
add("torch", "torch.compile.inplace_index_put", lambda: tc_mut(lambda x, i: x.index_put_((i,), torch.tensor(5.0)), TI(4), torch.tensor([0, 3])))
add("torch", "torch.compile.inplace_two_inputs_aliased", lambda: (lambda base: tc_mut(lambda a, b: (a.add_(1), b * 1)[1], base, base))(TI(3)))
add("torch", "torch.compile.inplace_noncontig_setitem", lambda: tc_mut(lambda x: x.__setitem__((slice(None), 0), 7.0) or x.sum(), TI(3, 2)[::2]))
add("torch", "torch.compile.grads_int_input_mix", lambda: (lambda x, i: [V(_grad_compiled(x, i), _grad_eager(x, i))])(TI(3), torch.tensor([2, 0])))


def _gfn(x, i):
    return (x[i] * 3).sum()


def _grad_compiled(x, i):
    stt.reset()
    x = x.clone().requires_grad_()
    torch.compile(_gfn, backend=stt.backend)(x, i).backward()
    return x.grad


def _grad_eager(x, i):
    x = x.clone().requires_grad_()
    _gfn(x, i).backward()
    return x.grad


TORCH_ERR = {
    "index_oob": (lambda x: x[torch.tensor([5])], [TI(3)], r"5|out of|range|bound|index"),
    "index_select_oob": (lambda x: x.index_select(0, torch.tensor([3])), [TI(3)], r"3|out of|range|bound|index"),
    "gather_oob": (lambda x: x.gather(0, torch.tensor([4])), [TI(3)], r"4|out of|range|bound|index"),
    "embedding_oob": (lambda w, i: torch.nn.functional.embedding(i, w), [TI(4, 2), torch.tensor([4])], r"4|out of|range|bound|index"),
    "cross_entropy_oob": (lambda x, t: torch.nn.functional.cross_entropy(x, t), [TI(2, 3), torch.tensor([0, 3])], r"3|out of|range|bound|target"),
    "matmul_mismatch": (lambda x, y: x @ y, [TI(2, 3), TI(2, 3)], r"shape|size|3|2|mat"),
    "softmax_int": (lambda x: torch.softmax(x, -1), [torch.tensor([1, 2])], r"int|Long|dtype|softmax|implemented"),
    "mean_int": (lambda x: x.mean(), [torch.tensor([1, 2])], r"int|Long|dtype|mean|floating"),
    "int_div_zero_floor": (lambda x: x // torch.tensor([0, 1]), [torch.tensor([1, 2])], r"zero|Zero"),
    "reshape_bad": (lambda x: x.reshape(4), [TI(3)], r"shape|4|3|reshape|invalid"),
    "cat_rank_mismatch": (lambda x, y: torch.cat([x, y]), [TI(2, 3), TI(3)], r"dim|tensor|same|shape"),
    "bitwise_on_float": (lambda x: x & x, [TI(3)], r"bitwise|float|and|implemented"),
}
for name, (fn, args, match) in TORCH_ERR.items():
    add("torch", f"torch.compile_err.{name}", lambda fn=fn, args=args: tc_err(fn, *args), "error", match, ANY)


# strata.torch.scan
def tscan_ref(fn, init, xs):
    c, ys = init, []
    for x in xs:
        c, y = fn(c, x)
        ys.append(y)
    return c, (torch.stack(ys) if ys and ys[0] is not None else None)


def tscan(fn, init, xs, **kw):
    c, ys = stt.scan(fn, init, xs, **kw)
    rc, rys = tscan_ref(fn, init, xs)
    return [V(c, rc)] + ([V(ys, rys)] if rys is not None else [])


add("torch", "torch.scan.int_carry", lambda: tscan(lambda c, x: (c + x, c * 2), torch.tensor(0), torch.arange(5)))
add("torch", "torch.scan.noncontig_xs", lambda: tscan(lambda c, x: (c * 0.5 + x, c), torch.zeros(3), TI(3, 5).t()))
add("torch", "torch.scan.bool_carry", lambda: tscan(lambda c, x: (c ^ x, c), torch.tensor(False), torch.tensor([True, False, True])))
add("torch", "torch.scan.f16_carry", lambda: tscan(lambda c, x: (c + x, c), torch.zeros(2, dtype=torch.float16), TI(4, 2).half()))
add("torch", "torch.scan.zero_size_carry", lambda: tscan(lambda c, x: (c + x.sum(), c), torch.zeros(0, 3), TI(4, 2)))
add("torch", "torch.scan.empty_xs", lambda: (lambda out: [V(out[0], torch.ones(2)), V(out[1], torch.zeros(0, 2))])(
    stt.scan(lambda c, x: (c + x, c), torch.ones(2), torch.zeros(0, 2))), "either")
add("torch", "torch.scan.dict_carry", lambda: (lambda out: [V(out[0]["a"], TI(4, 2).sum(0)), V(out[0]["b"], torch.tensor(4.0))])(
    stt.scan(lambda c, x: ({"a": c["a"] + x, "b": c["b"] + 1}, None), {"a": torch.zeros(2), "b": torch.tensor(0.0)}, TI(4, 2))))
add("torch", "torch.scan.grad_init_xs", lambda: _scan_grads())


def _scan_grads():
    def body(c, x):
        return c * x + x.sin(), None
    i1, x1 = torch.tensor([0.5, -1.0], requires_grad=True), TI(3, 2).requires_grad_()
    stt.scan(body, i1, x1)[0].sum().backward()
    i2, x2 = torch.tensor([0.5, -1.0], requires_grad=True), TI(3, 2).requires_grad_()
    tscan_ref(body, i2, x2)[0].sum().backward()
    return [V(i1.grad, i2.grad), V(x1.grad, x2.grad)]


SCAN_ERR = {
    "carry_shape_changes": (lambda: stt.scan(lambda c, x: (c.unsqueeze(0), None), torch.zeros(2), TI(3, 2)), r"carry|shape|\[2\]|\[1, ?2\]"),
    "carry_dtype_changes": (lambda: stt.scan(lambda c, x: (c.double(), None), torch.zeros(2), TI(3, 2)), r"carry|dtype|float32|float64"),
    "carry_int_to_float": (lambda: stt.scan(lambda c, x: (c + x, None), torch.tensor(0), TI(3)), r"carry|dtype|int64|float"),
    "body_returns_tensor": (lambda: stt.scan(lambda c, x: c + x, torch.zeros(2), TI(3, 2)), r"pair|tuple|\(carry, ?y\)|return"),
    "body_returns_python_float": (lambda: stt.scan(lambda c, x: (1.0, None), torch.zeros(2), TI(3, 2)), r"carry|float|tensor"),
    "xs_lengths_differ": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2), (TI(3), TI(4))), r"length|3|4|differ"),
    "xs_0d": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2), torch.tensor(1.0)), r"0-d|leading"),
    "length_negative": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2), None, length=-3), r"length|-3|negative"),
    "length_mismatch": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2), TI(3), length=5), r"length|5|3"),
    "no_xs_no_length": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2)), r"length|xs"),
    "init_python_int": (lambda: stt.scan(lambda c, x: (c, None), 3, TI(3)), r"init|int|tensor"),
    "init_numpy": (lambda: stt.scan(lambda c, x: (c, None), np.zeros(2), TI(3)), r"init|ndarray|tensor"),
    "remat_bad": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2), TI(3), remat="everything"), r"remat|everything"),
    "body_item": (lambda: stt.scan(lambda c, x: (c + x.item(), None), torch.zeros(()), TI(3)), r"item|data|value|trac|scan|body"),
    "body_raises": (lambda: stt.scan(_raise_in_body, torch.zeros(2), TI(3, 2)), r"from the body"),
    "body_inplace_on_carry": (lambda: tscan(lambda c, x: (c.add_(x), c.clone()), torch.zeros(2), TI(3, 2)), "either"),
    "body_y_shape_changes_with_step": (lambda: stt.scan(lambda c, x: (c, x[: int(c.shape[0])]), torch.zeros(2), TI(3, 2)), "either"),
    # Nested scans run (test_torch_scan.py checks their values and gradients); one without xs
    # inside a body is refused.
    "nested_scan_without_xs": (lambda: stt.scan(lambda c, x: (stt.scan(lambda c2, _: (c2 + 1, None), c, length=2)[0], None), torch.zeros(()), TI(3, 2)),
                               r"nested|inside|scan|xs"),
    "meta_device": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2, device="meta"), TI(3)), r"meta|device|cpu"),
    "complex_carry": (lambda: stt.scan(lambda c, x: (c, None), torch.zeros(2, dtype=torch.complex64), TI(3)), r"complex|dtype"),
}
for name, (fn, match) in SCAN_ERR.items():
    add("torch", f"torch.scan_err.{name}", fn, "either" if match == "either" else "error", None if match == "either" else match,
        (_UserError,) if name == "body_raises" else None)


# apply_layers
class Block(torch.nn.Module):
    def __init__(self, n=4, buffer=False, out_tuple=False):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
        self.out_tuple = out_tuple
        if buffer:
            self.register_buffer("scale", torch.rand(n) + 0.5)

    def forward(self, x, *args, **kwargs):
        y = torch.tanh(self.lin(x))
        if hasattr(self, "scale"):
            y = y * self.scale
        return (y, torch.zeros(1)) if self.out_tuple else y


def _layers(n=3, **kw):
    torch.manual_seed(0)
    return torch.nn.ModuleList([Block(**kw) for _ in range(n)])


def _eager_layers(layers, x):
    for layer in layers:
        x = layer(x)
        x = x[0] if isinstance(x, tuple) else x
    return x


add("torch", "torch.layers.buffers", lambda: (lambda L: V(stt.apply_layers(L, TI(2, 4)), _eager_layers(L, TI(2, 4)), rtol=1e-4))(_layers(buffer=True)))
add("torch", "torch.layers.zero_batch", lambda: (lambda L: V(stt.apply_layers(L, torch.zeros(0, 4)), torch.zeros(0, 4)))(_layers()))
add("torch", "torch.layers.noncontig_x", lambda: (lambda L: V(stt.apply_layers(L, TI(4, 2).t()), _eager_layers(L, TI(4, 2).t()), rtol=1e-4))(_layers()))
add("torch", "torch.layers.one_layer", lambda: (lambda L: V(stt.apply_layers(L, TI(2, 4)), _eager_layers(L, TI(2, 4)), rtol=1e-4))(_layers(1)))
add("torch", "torch.layers.empty_returns_x", lambda: V(stt.apply_layers([], TI(2, 4)), TI(2, 4)))
add("torch", "torch.layers.grads_match", lambda: _layer_grads())
add("torch", "torch.layers.f64_layers", lambda: (lambda L: V(stt.apply_layers(L, TI(2, 4).double()), _eager_layers(L, TI(2, 4).double())))(
    _layers().double()))
add("torch", "torch.layers.x_int", lambda: stt.apply_layers(_layers(), torch.ones(2, 4, dtype=torch.int64)), "error", r"int|Long|dtype|float", ANY)
add("torch", "torch.layers.shapes_differ", lambda: stt.apply_layers([Block(4), Block(4), torch.nn.Sequential(torch.nn.Linear(4, 4))], TI(2, 4)),
    "error", r"layer 2|differ|type")
add("torch", "torch.layers.param_shape_differs", lambda: stt.apply_layers([Block(4), _BlockWide()], TI(2, 4)), "error", r"layer 1|differ|shape")
add("torch", "torch.layers.x_not_tensor", lambda: stt.apply_layers(_layers(), np.ones((2, 4), F32)), "error", r"tensor|ndarray")
add("torch", "torch.layers.tuple_output", lambda: (lambda L: V(stt.apply_layers(L, TI(2, 4)), _eager_layers(L, TI(2, 4)), rtol=1e-4))(
    _layers(out_tuple=True)), "either")
add("torch", "torch.layers.wrong_x_width", lambda: stt.apply_layers(_layers(), TI(2, 5)), "error", r"shape|5|4|mat", ANY)
add("torch", "torch.layers.train_vs_eval_mix", lambda: stt.apply_layers(_mixed_modes(), TI(2, 4)), "error", r"layer 1|mode|train|eval|differ")
add("torch", "torch.layers.object_arg", lambda: stt.apply_layers(_layers(), TI(2, 4), object()), "error", r"argument 0|object|carry")
add("torch", "torch.layers.bad_remat", lambda: stt.apply_layers(_layers(), TI(2, 4), remat="some"), "error", r"remat|some")
add("torch", "torch.layers.batchnorm_train_buffers", lambda: _bn_layers(), "either")


class _BlockWide(Block):
    def __init__(self):
        super().__init__(4)
        self.lin = torch.nn.Linear(4, 4, bias=False)


def _mixed_modes():
    L = _layers()
    L[1].eval()
    return L


def _layer_grads():
    L1, L2 = _layers(), _layers()
    x1, x2 = TI(2, 4).requires_grad_(), TI(2, 4).requires_grad_()
    stt.apply_layers(L1, x1).pow(2).sum().backward()
    _eager_layers(L2, x2).pow(2).sum().backward()
    return [V(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)] + [V(a.lin.weight.grad, b.lin.weight.grad, rtol=1e-4, atol=1e-5) for a, b in zip(L1, L2)]


def _bn_layers():
    torch.manual_seed(0)
    L1 = torch.nn.ModuleList([torch.nn.BatchNorm1d(4) for _ in range(2)])
    L2 = torch.nn.ModuleList([torch.nn.BatchNorm1d(4) for _ in range(2)])
    y1 = stt.apply_layers(L1, TI(3, 4))
    y2 = _eager_layers(L2, TI(3, 4))
    # train-mode BatchNorm updates its running stats: they must move as eager's do
    return [V(y1, y2, rtol=1e-4, atol=1e-5)] + [V(a.running_mean, b.running_mean, rtol=1e-4, atol=1e-6) for a, b in zip(L1, L2)]


# explain
add("torch", "torch.explain.graph_break", lambda: V(np.array(stt.explain(lambda x: x * x.sum().item(), TI(3)).graph_count >= 1), np.array(True)))
add("torch", "torch.explain.zero_size", lambda: V(np.array(stt.explain(lambda x: x + 1, torch.zeros(0, 2)).graph_count), np.array(1)))
add("torch", "torch.explain.not_callable", lambda: stt.explain(5, TI(3)), "error", r"call|int|5", ANY)
add("torch", "torch.explain.fn_raises", lambda: stt.explain(lambda x: x @ x, TI(2, 3)), "error", r"shape|mat|2|3", ANY)
add("torch", "torch.explain.module_with_buffer", lambda: V(np.array(stt.explain(Block(buffer=True), TI(2, 4)).graph_count >= 1), np.array(True)))
add("torch", "torch.explain.int_inputs", lambda: V(np.array(str(stt.explain(lambda x: x // 2, torch.tensor([5, -5]))).startswith("strata:")),
                                                   np.array(True)))
add("torch", "torch.explain.no_args", lambda: V(np.array(stt.explain(lambda: torch.ones(2) * 3).graph_count >= 0), np.array(True)), "either")
add("torch", "torch.compile.module_buffer_mutation", lambda: _buffer_mutation())


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1
        return x * self.count


def _buffer_mutation():
    stt.reset()
    m1, m2 = _Counter(), _Counter()
    f = torch.compile(m1, backend=stt.backend)
    outs = [f(TI(2)) for _ in range(3)]
    refs = [m2(TI(2)) for _ in range(3)]
    return [V(o, r) for o, r in zip(outs, refs)] + [V(m1.count, m2.count)]


# ---- the runner ----------------------------------------------------------------------------

# the summary's columns, in this order
OUTCOMES = ["ok-value", "ok-error", "CRASH", "HANG", "WRONG", "UNCLEAR", "REFUSED"]

if __name__ == "__main__":
    main(__file__, OUTCOMES)
