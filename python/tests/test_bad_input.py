"""Bad input from Python raises a Python exception: never a crash, never an
internal error (strata.InternalError means a check inside strata fired)."""
import itertools

import numpy as np
import pytest

import strata

SKIP = {"sync", "metrics", "metrics_report", "reset_metrics", "last_miss_explanation",
        "set_buffer_donation", "set_dump_dir", "hlo_text", "partition_report"}


def public_functions():
    for name in sorted(dir(strata._strata)):
        f = getattr(strata._strata, name)
        if name.startswith("_") or name in SKIP or isinstance(f, type) or not callable(f):
            continue
        yield name, f


def bad_arguments():
    t = strata.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    i = strata.tensor([5, -9])
    values = [None, "x", -3, 1e300, [], [[1], [2, 3]], {"a": 1}, t, i, strata.tensor(True),
              strata.zeros(0, 4), (0, -1)]
    yield ()
    for v in values:
        yield (v,)
    for a, b in itertools.product([t, i, strata.zeros(0, 4)], values):
        yield (a, b)
    for v in values:
        yield (t, 0, v)
        yield (t, v, t)


@pytest.mark.parametrize("name,f", list(public_functions()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_function_rejects_bad_arguments_with_a_python_exception(name, f):
    for args in bad_arguments():
        try:
            out = f(*args)
            for leaf in (out if isinstance(out, (list, tuple)) else [out]):
                if isinstance(leaf, strata.Tensor):
                    leaf.sync()  # errors found at run time must be Errors too
        except strata.InternalError as e:
            pytest.fail(f"strata.{name}{args!r} fired an internal check: {e}")
        except (strata.Error, TypeError, ValueError, IndexError, OverflowError, KeyError,
                AttributeError, RuntimeError):
            pass


def tensor_methods():
    skip = {"__init__", "__new__", "__init_subclass__", "__subclasshook__", "__reduce__",
            "__reduce_ex__", "__setattr__", "__delattr__", "__getattribute__", "__dir__",
            "__format__", "__sizeof__", "__class__", "backward", "sync", "__iter__"}
    for name in sorted(dir(strata.Tensor)):
        if name not in skip and callable(getattr(strata.Tensor, name)):
            yield name


@pytest.mark.parametrize("name", list(tensor_methods()))
def test_every_tensor_method_rejects_bad_arguments_with_a_python_exception(name):
    values = [None, "x", -3, 2.5, [], [[1], [2, 3]], {"a": 1}, strata.tensor([5, -9]),
              strata.zeros(0, 4), slice(None, None, -1), (0, 0, 0, 0), Ellipsis, np.zeros(7)]
    for receiver in [strata.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)),
                     strata.tensor(3), strata.zeros(0, 4)]:
        for args in [()] + [(v,) for v in values] + [(v, w) for v in values[:6] for w in values[:6]]:
            try:
                out = getattr(receiver, name)(*args)
                for leaf in (out if isinstance(out, (list, tuple)) else [out]):
                    if isinstance(leaf, strata.Tensor):
                        leaf.sync()
            except strata.InternalError as e:
                pytest.fail(f"Tensor.{name}{args!r} fired an internal check: {e}")
            except (strata.Error, TypeError, ValueError, IndexError, OverflowError, KeyError,
                    AttributeError, RuntimeError, NotImplementedError):
                pass
