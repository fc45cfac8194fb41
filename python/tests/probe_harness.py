"""The harness the adversarial probes (probe_hostile.py, probe_hostile_round3.py) share: the
case table, the value checks, the classifier of outcomes, the CLI runner, the worker subprocess
that isolates the cases, and the summary.

A probe picks its Rules with use_rules() (ROUND3_RULES unless it says), registers its cases
with add() / err() and ends with main(__file__, columns). Cases run one after another in a
worker subprocess (the probe script run again with --worker); a worker that dies is restarted
and its case recorded as CRASH, one silent for too long is killed and its case recorded as HANG. Outcomes: ok-value, ok-error (a clear error where the reference refuses
too), REFUSED (a clear error where the reference gives a value), CRASH, HANG, WRONG (a value
unlike the reference, or a value where the reference refuses), UNCLEAR (an error that does not
say what was wrong), PROBE-ERROR (the probe's own failure). Not named test_*: CI's pytest glob
skips it."""
import argparse
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import strata
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))  # python/tests -> the checkout
CLI = os.environ.get("STRATA_CLI", os.path.join(REPO, "build", "strata"))
HANG_SECONDS = 60

# ---- what counts as clear and as right ----------------------------------------------------

# error text that says nothing to the user, whatever the case
_UNCLEAR = (r"Unable to cast|std::|stoll|stoul|stoi\b|stod\b|basic_string|vector::|_M_range_check|"
            r"bad_alloc|bad_optional|bad_variant|map::at|unordered_map|Check failed|assert(ion)? fail")
# CLI output of a crash or an internal error
_CLI_UNCLEAR = (r"terminate called|what\(\):|Aborted|core dumped|std::|stoll|stoi\b|basic_string|"
                r"Check failed|Segmentation|InternalError")


class Rules:
    """What a probe counts as a clear error and as a right value. The two probes were written
    with different rules; each keeps its own so that its outcomes stay as they were."""

    def __init__(self, unclear, cli_unclear, clear_types, exact_values, clear_raise,
                 clear_names, cli_match_stderr):
        self.unclear = unclear  # an error message matching it is UNCLEAR
        self.cli_unclear = cli_unclear  # CLI output matching it is UNCLEAR
        self.clear_types = clear_types  # the exception types of a clear error (unless a case says)
        # integers compared exactly, object arrays by value, and the signs of inf too
        self.exact_values = exact_values
        # an exception from strata's Python is clear where its line is a `raise` ...
        self.clear_raise = clear_raise
        # ... or where it names strata, is a pybind11 argument-type error or Dynamo's own error
        self.clear_names = clear_names
        self.cli_match_stderr = cli_match_stderr  # a CLI case's `match` is looked for in stderr only


# probe_hostile.py's rules
HOSTILE_RULES = Rules(
    unclear=re.compile(_UNCLEAR, re.I),
    cli_unclear=re.compile(_CLI_UNCLEAR, re.I),
    clear_types=(strata.Error, TypeError, ValueError, IndexError, OverflowError),
    exact_values=False, clear_raise=True, clear_names=False, cli_match_stderr=False)
# probe_hostile_round3.py's rules (the default): stricter about text, values and the CLI
ROUND3_RULES = Rules(
    unclear=re.compile(_UNCLEAR + r"|absl::|RET_CHECK", re.I),
    cli_unclear=re.compile(_CLI_UNCLEAR + r"|unexpected error|"
                           r"Traceback .*File \".*/python/strata/", re.I | re.S),
    clear_types=(strata.Error, TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError,
                 KeyError),
    exact_values=True, clear_raise=False, clear_names=True, cli_match_stderr=True)
RULES = ROUND3_RULES


def use_rules(rules):
    """Makes `rules` the ones this process judges by (a probe calls it once, at import)."""
    global RULES
    RULES = rules


# ---- the case table ------------------------------------------------------------------------


class Case:
    def __init__(self, cid, family, fn, expect, match, types):
        self.id, self.family, self.fn, self.expect, self.match, self.types = (
            cid, family, fn, expect, match, types)


CASES = []


def add(family, cid, fn, expect="value", match=None, types=None):
    """expect: "value" (fn returns V(...) checks or an Auto), "error" (fn must raise a clear
    error; `match`, a regex, is what the message must name), "either" (a right value or a clear
    error), "lenient" (for an Auto: "either", and also any value where the reference refuses
    for a limitation of its own)."""
    assert all(c.id != cid for c in CASES), cid
    CASES.append(Case(cid, family, fn, expect, match, types))


def err(family, cid, fn, match=None, types=None):
    add(family, cid, fn, "error", match, types)


class V:
    """A value check: `got` (strata Tensor, torch tensor, number, list) against `want`
    (NumPy, torch or plain Python, never strata)."""

    def __init__(self, got, want, dtype=True, rtol=1e-5, atol=1e-6):
        self.got, self.want, self.dtype, self.rtol, self.atol = got, want, dtype, rtol, atol


class Auto:
    """strata's answer `sfn()` against the reference's `rfn()`, both run by the case."""

    def __init__(self, sfn, rfn, check=None, **kw):
        self.sfn, self.rfn, self.check, self.kw = sfn, rfn, check, kw


class WrongValue(Exception):
    pass


# ---- comparing values ----------------------------------------------------------------------


def as_numpy(x):
    """(NumPy array, dtype name or None) for a strata tensor, a torch tensor or anything else."""
    if isinstance(x, strata.Tensor):
        if x.dtype == strata.bfloat16:
            return x.astype(strata.float32).numpy(), "bfloat16"
        a = x.numpy()
        return a, a.dtype.name
    if isinstance(x, torch.Tensor):
        x = x.detach()
        name = str(x.dtype).removeprefix("torch.")
        if x.dtype == torch.bfloat16:
            return x.float().numpy(), name
        if x.dtype in (torch.uint16, torch.uint32, torch.uint64):
            return x.numpy(), name
        return x.resolve_conj().numpy(), name
    a = np.asarray(x)
    return a, a.dtype.name if isinstance(x, np.ndarray) or isinstance(x, np.generic) else None


def _comparable(a, exact):
    """Integers or bools `a` ready for np.array_equal: as Python ints (exact), or else with
    unsigned integers as float64."""
    if exact:
        return a.astype(object)
    return a.astype(np.float64) if a.dtype.kind == "u" else a


def check_value(v):
    """Raises WrongValue where v.got differs from v.want in shape, dtype or values."""
    got, got_dtype = as_numpy(v.got)
    want, want_dtype = as_numpy(v.want)
    if got.shape != want.shape:
        raise WrongValue(f"shape {got.shape} != reference {want.shape}")
    if v.dtype and want_dtype and got_dtype and got_dtype != want_dtype:
        raise WrongValue(f"dtype {got_dtype} != reference {want_dtype}")
    exact = RULES.exact_values
    if exact and (got.dtype == object or want.dtype == object):
        ok = got.tolist() == want.tolist()
    elif got.dtype == bool or want.dtype == bool or got.dtype.kind in "iu" and want.dtype.kind in "iu":
        ok = np.array_equal(_comparable(got, exact), _comparable(want, exact))
    else:
        ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=v.rtol,
                         atol=v.atol, equal_nan=True)
        # inf and -0.0 must be the same too (allclose lets -0.0 == 0.0 pass: fine)
        if ok and exact and got.size:
            g, w = got.astype(np.float64), want.astype(np.float64)
            ok = np.array_equal(np.isinf(g) & (g > 0), np.isinf(w) & (w > 0)) and \
                np.array_equal(np.isinf(g) & (g < 0), np.isinf(w) & (w < 0))
    if not ok:
        g = np.array2string(got.ravel()[:8], precision=6)
        w = np.array2string(want.ravel()[:8], precision=6)
        raise WrongValue(f"value {g} != reference {w}")


def short(out):
    """A short description of a value (dtype, shape, first elements) for the report."""
    try:
        if isinstance(out, V):
            out = out.got
        if isinstance(out, (tuple, list)) and out and not isinstance(out[0], (int, float, bool)):
            return "(" + ", ".join(short(o) for o in out) + ")"
        a, _ = as_numpy(out)
        return f"{a.dtype}{list(a.shape)} {np.array2string(a.ravel()[:6])}"
    except Exception:  # noqa: BLE001
        return repr(out)[:120]


def _sync(out):
    """Waits for every tensor in `out` (reads it back), so that errors show here."""
    if isinstance(out, strata.Tensor):
        if out.dtype == strata.bfloat16:
            out = out.astype(strata.float32)
        out.numpy()
    elif isinstance(out, (list, tuple)):
        for o in out:
            _sync(o)
    elif isinstance(out, dict):
        for o in out.values():
            _sync(o)
    elif isinstance(out, torch.Tensor):
        out.detach().clone()


def _pairs(got, want, kw):
    """The V checks that compare `got` with `want`, pairing tuples, lists and dicts element by
    element."""
    if isinstance(want, (tuple, list)) and not isinstance(want, np.ndarray) and want and \
            not isinstance(want[0], (int, float, bool, np.generic)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise WrongValue(f"{short(got)} is not {len(want)} results like the reference's")
        out = []
        for g, w in zip(got, want):
            out += _pairs(g, w, kw)
        return out
    if isinstance(want, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(want):
            raise WrongValue(f"keys {sorted(got) if isinstance(got, dict) else type(got)} != {sorted(want)}")
        out = []
        for k in want:
            out += _pairs(got[k], want[k], kw)
        return out
    if want is None:
        if got is not None:
            raise WrongValue(f"{short(got)} where the reference gives None")
        return []
    return [V(got, want, **kw)]


# ---- classifying errors --------------------------------------------------------------------

def torch_errors():
    """Errors PyTorch itself raises through strata.torch (Dynamo's wrapped user errors)."""
    try:
        import torch._dynamo.exc as exc
        return (exc.TorchRuntimeError, exc.Unsupported, exc.UserError)
    except Exception:  # noqa: BLE001
        return ()


def classify_error(case, e, tb):
    """ok-error, or UNCLEAR (WRONG for a WrongValue) with the reason."""
    msg = str(e)
    kind = type(e).__name__
    if isinstance(e, strata.InternalError):
        return "UNCLEAR", f"InternalError: {msg}"
    if isinstance(e, WrongValue):
        return "WRONG", msg
    if not msg.strip():
        return "UNCLEAR", f"{kind} with an empty message"
    if RULES.unclear.search(msg):
        return "UNCLEAR", f"{kind}: {msg}"
    # An exception raised by strata's own Python (not by its C++ or a deliberate raise,
    # which starts with "[name]").
    frames = traceback.extract_tb(tb)
    last = frames[-1].filename if frames else ""
    deliberate = bool(frames) and (frames[-1].line or "").lstrip().startswith("raise ")
    # A Python wrapper's call of a C++ op (strata/_views.py) passes the C++ error on.
    calls_cpp = bool(frames) and re.search(r"\b(_raw_\w+|raw|_strata\.\w+)\(", frames[-1].line or "")
    if last.startswith(os.path.dirname(strata.__file__)) and not calls_cpp \
            and not isinstance(e, strata.Error) and not msg.startswith("[") \
            and not (RULES.clear_raise and deliberate) \
            and not (RULES.clear_names and (isinstance(e, torch_errors()) or "strata" in msg
                                            or "incompatible function arguments" in msg)):
        return "UNCLEAR", f"{kind} from {os.path.basename(last)}:{frames[-1].lineno}: {msg}"
    allowed = case.types or RULES.clear_types
    if not isinstance(e, allowed):
        return "UNCLEAR", f"{kind} (not a strata.Error/TypeError/ValueError/IndexError): {msg}"
    if case.match and not re.search(case.match, msg, re.I | re.S):
        return "UNCLEAR", f"{kind}: {msg!r} does not name /{case.match}/"
    return "ok-error", f"{kind}: {msg}"


def _checked(case, check):
    """(outcome, detail) of `check()`, which checks a value already given: it raises WrongValue
    for a wrong value, and may return a note (a string) for the report."""
    try:
        note = check()
    except WrongValue as e:
        return "WRONG", str(e)
    except Exception as e:  # noqa: BLE001  reading the value failed
        outcome, detail = classify_error(case, e, e.__traceback__)
        return ("REFUSED" if outcome == "ok-error" else outcome), "on reading: " + detail
    return "ok-value", note if isinstance(note, str) else ""


# ---- running one case ----------------------------------------------------------------------


def run_auto(case, a):
    """(outcome, detail) for an Auto: strata's answer judged by the reference's."""
    try:
        with np.errstate(all="ignore"):
            want = a.rfn()
        ref_err = None
    except WrongValue as e:
        return "WRONG", f"the probe's reference: {e}"
    except Exception as e:  # noqa: BLE001
        want, ref_err = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    try:
        got = a.sfn()
        _sync(got)
    except Exception as e:  # noqa: BLE001
        outcome, detail = classify_error(case, e, e.__traceback__)
        if outcome != "ok-error":
            return outcome, detail + (f" | reference: {ref_err}" if ref_err else f" | reference gives {short(want)}")
        if ref_err or case.expect in ("either", "error", "lenient"):
            return "ok-error", detail + (f" | reference: {ref_err}" if ref_err else "")
        return "REFUSED", detail + f" | reference gives {short(want)}"
    if ref_err:
        if case.expect == "lenient":  # the reference's refusal is a limitation of its own
            return "ok-value", f"value {short(got)} (reference refuses: {ref_err})"
        return "WRONG", f"gave {short(got)} where the reference refuses: {ref_err}"
    if case.expect == "error":
        return "WRONG", f"gave {short(got)} where an error was expected (reference {short(want)})"

    def check():  # the case's own check, or the values pair by pair
        if a.check is not None:
            return a.check(got, want)
        for c in _pairs(got, want, a.kw):
            check_value(c)
    return _checked(case, check)


def _run_cli_result(case, out):
    """(outcome, detail) for a case that ran the CLI or a subprocess."""
    if out.outcome == "ok-error" and case.match and not re.search(case.match, out.text, re.I | re.S):
        return "UNCLEAR", f"{out.text[-400:]!r} does not name /{case.match}/"
    if case.expect == "either" and out.outcome == "WRONG" and out.detail.startswith("exit 0"):
        return "ok-value", ""
    if case.expect == "either" and out.outcome == "REFUSED":
        return "ok-error", out.detail
    return out.outcome, out.detail


def run_case(case):
    """(outcome, detail) for one case, in this process."""
    checks = None
    try:
        out = case.fn()
        if isinstance(out, Auto):
            return run_auto(case, out)
        if isinstance(out, CLIResult):
            return _run_cli_result(case, out)
        checks = [o for o in (out if isinstance(out, list) else [out]) if isinstance(o, V)]
        _sync(out if not checks else [c.got for c in checks])
    except WrongValue as e:  # raised by a case itself
        return "WRONG", str(e)
    except Exception as e:  # noqa: BLE001
        outcome, detail = classify_error(case, e, e.__traceback__)
        if case.expect == "value" and outcome == "ok-error":
            return "REFUSED", detail
        return outcome, detail
    if case.expect == "error":
        return "WRONG", f"gave a value where the reference refuses: {short(out)}"

    def check():
        for c in checks:
            check_value(c)
    return _checked(case, check)


# ---- CLI cases -----------------------------------------------------------------------------


class CLIResult:
    """The outcome of a CLI or subprocess run, judged already; `text` is what an error said."""

    def __init__(self, outcome, detail, text=""):
        self.outcome, self.detail, self.text = outcome, detail, text


def _judge(p, text, expect, match):
    """The CLIResult of a finished CLI run `p`, by exit status and stderr."""
    last = text.splitlines()[-1] if text else ""
    if p.returncode < 0 or p.returncode in (134, 136, 139):
        return CLIResult("CRASH", f"exit {p.returncode}: {text[-400:]}")
    if RULES.cli_unclear.search(text):
        return CLIResult("UNCLEAR", f"exit {p.returncode}: {text[-400:]}")
    if expect == "error":
        if p.returncode == 0:
            return CLIResult("WRONG", f"exit 0 where an error was expected: {text[-300:]}")
        if not p.stderr.strip():
            return CLIResult("UNCLEAR", f"exit {p.returncode} with nothing on stderr: {text[-200:]}")
        said = p.stderr if RULES.cli_match_stderr else text  # where the error must name `match`
        if match and not re.search(match, said, re.I | re.S):
            return CLIResult("UNCLEAR", f"exit {p.returncode}: {said[-400:]!r} does not name /{match}/")
        return CLIResult("ok-error", f"exit {p.returncode}: {last}", said)
    if p.returncode != 0:
        return CLIResult("REFUSED", f"exit {p.returncode}: {text[-400:]}")
    if callable(expect):  # checks the output / the files written
        try:
            expect(p.stdout + p.stderr)
        except WrongValue as w:
            return CLIResult("WRONG", str(w))
        except Exception as x:  # noqa: BLE001
            return CLIResult("WRONG", f"{type(x).__name__}: {x}")
    return CLIResult("ok-value", "")


def cli(args, expect="error", match=None, timeout=60, cwd=None, env=None):
    """Runs the CLI; the outcome by exit status and stderr. expect: "error", "value" or a
    callable given the output, raising WrongValue."""
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run([CLI] + args, capture_output=True, text=True, timeout=timeout,
                           cwd=cwd or TMP, env=e, errors="replace")
    except subprocess.TimeoutExpired:
        return CLIResult("HANG", f"strata {' '.join(args)} ran over {timeout} s")
    return _judge(p, (p.stderr + p.stdout).strip(), expect, match)


# ---- scratch files -------------------------------------------------------------------------

# the probe's scratch directory: a worker is given its parent's (--tmp); the parent makes one
TMP = sys.argv[sys.argv.index("--tmp") + 1] if "--tmp" in sys.argv[:-1] else tempfile.mkdtemp(prefix="strata-probe-")


def tmp(name):
    return os.path.join(TMP, name)


def st_bytes(header, data=b""):
    """A safetensors file's bytes: the header's length, the header, the data."""
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    return struct.pack("<Q", len(text)) + text + data


def write(name, content):
    """Writes `content` (bytes or text) to tmp(name); its path."""
    path = tmp(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
    return path


# ---- helpers the cases share ---------------------------------------------------------------

S = strata.tensor
F32 = np.float32
# dtype name -> strata dtype, and the torch dtype of that name
SD = {"bool": strata.bool, "int8": strata.int8, "int16": strata.int16, "int32": strata.int32,
      "int64": strata.int64, "uint8": strata.uint8, "uint16": strata.uint16,
      "uint32": strata.uint32, "uint64": strata.uint64, "float16": strata.float16,
      "bfloat16": strata.bfloat16, "float32": strata.float32, "float64": strata.float64}
TD = {k: getattr(torch, k) for k in SD}


def ar(*shape, dtype=np.float32, start=0):
    """An array of the shape with small values (-3..3, shifted by `start`), repeating."""
    n = int(np.prod(shape)) if shape else 1
    return (np.arange(n) % 7 + start - 3).astype(dtype).reshape(shape)


def tt(a):
    """A torch tensor of the NumPy array `a`."""
    return torch.from_numpy(np.ascontiguousarray(a))


def mesh(ids=(0, 1, 2, 3), shape=(2, 2), names=("a", "b")):
    return strata.Mesh(list(ids), list(shape), names)


def shard(a, spec, m=None):
    """The array `a` as a strata tensor sharded by `spec` over mesh `m` (default mesh())."""
    return strata.mark_sharding(S(a), m or mesh(), spec)


# a program for `strata run` adding its two f32[3] parameters
HLO_ADD = """HloModule m

ENTRY main (x: f32[3], y: f32[3]) -> f32[3] {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  ROOT add.0 = f32[3] add(x, y)
}
"""


def leak_from_scan(keep):
    """A value leaked out of a strata.scan body (carry zeros(2), xs ar(5, 2)): what
    keep(carry, x) gives inside it."""
    leaked = []

    def body(c, x):
        leaked.append(keep(c, x))
        return c + x, None
    strata.scan(body, S(np.zeros(2, F32)), S(ar(5, 2)))
    return leaked[0]


def save_inputs(name, **tensors):
    """Saves the arrays `tensors` to the safetensors file tmp(name); its path."""
    path = tmp(name)
    strata.save_safetensors(path, {k: S(v) for k, v in tensors.items()})
    return path


def llama_dir(config, base, name, changes):
    """A tiny Llama of `config` saved (once) in tmp(base); for another `name`, a fresh copy in
    tmp(name) with `changes` made to its config.json (a None value removes the key)."""
    base = tmp(base)
    if not os.path.exists(os.path.join(base, "config.json")):
        strata.nn.LlamaForCausalLM(config, key=strata.random_key(5)).save_pretrained(base)
    path = tmp(name)
    if path == base:
        return base
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(base, path)
    if changes:
        saved = json.load(open(os.path.join(path, "config.json")))
        for k, v in changes.items():
            if v is None:
                saved.pop(k, None)
            else:
                saved[k] = v
        json.dump(saved, open(os.path.join(path, "config.json"), "w"))
    return path


def token_file(name, arr=None, key="input_ids"):
    """Saves token ids `arr` (default [[1, 5, 7, 2]]) as `key` to tmp(name); its path."""
    arr = np.array([[1, 5, 7, 2]], np.int64) if arr is None else arr
    path = tmp(name)
    strata.save_safetensors(path, {key: S(arr)})
    return path


def train_args(args, changes, bare, corpus, run, out=None):
    """The arguments of `strata train`: `args` with each (flag, value) of `changes` applied (a
    None value drops the flag, the value `bare` gives it alone), then --corpus (the file
    `corpus()` writes) and --out (`out`, or tmp(run) emptied) where they are missing."""
    args = list(args)
    for k, v in changes:
        if k in args:
            i = args.index(k)
            if v is None:
                del args[i:i + 2]
            else:
                args[i + 1] = v
        elif v is not None:
            args += [k] if v == bare else [k, v]
    if "--corpus" not in args:
        args += ["--corpus", corpus()]
    if "--out" not in args:
        shutil.rmtree(tmp(run), ignore_errors=True)
        args += ["--out", out or tmp(run)]
    return args


# ---- the runner ----------------------------------------------------------------------------


def worker(fd):
    """The worker's loop: reads case ids on stdin, writes each outcome as a JSON line to fd."""
    out = os.fdopen(fd, "w", buffering=1)
    by_id = {c.id: c for c in CASES}
    for line in sys.stdin:
        cid = line.strip()
        if not cid:
            continue
        start = time.time()
        try:
            outcome, detail = run_case(by_id[cid])
        except BaseException as e:  # noqa: BLE001  the probe's own failure, not strata's
            outcome, detail = "PROBE-ERROR", f"{type(e).__name__}: {e}"
        out.write(json.dumps({"id": cid, "outcome": outcome, "detail": str(detail)[:1500],
                              "seconds": round(time.time() - start, 2)}) + "\n")


class Worker:
    """A worker subprocess running the probe `script`; its cases share the scratch directory."""

    def __init__(self, script):
        read, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--worker", str(write_fd), "--tmp", TMP],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(write_fd,), text=True, start_new_session=True, cwd=HERE)
        os.close(write_fd)
        self.read = os.fdopen(read, "r")
        self.buffer = ""

    def run(self, cid, seconds=HANG_SECONDS):
        """The result of case `cid`: the worker's answer, or HANG / CRASH."""
        self.proc.stdin.write(cid + "\n")
        self.proc.stdin.flush()
        deadline = time.time() + seconds
        while "\n" not in self.buffer:
            left = deadline - time.time()
            if left <= 0:
                return {"id": cid, "outcome": "HANG", "detail": f"no answer in {seconds} s"}
            ready, _, _ = select.select([self.read], [], [], left)
            if ready:
                chunk = os.read(self.read.fileno(), 65536).decode(errors="replace")
                if not chunk:
                    code = self.proc.wait()
                    name = signal.Signals(-code).name if code < 0 else f"exit {code}"
                    return {"id": cid, "outcome": "CRASH", "detail": f"worker died: {name}"}
                self.buffer += chunk
        line, self.buffer = self.buffer.split("\n", 1)
        return json.loads(line)

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def print_summary(results, columns, seconds):
    """A table of outcome counts per family and for all; an outcome seen but not among
    `columns` gets a column of its own at the end."""
    columns = columns + sorted({r["outcome"] for r in results} - set(columns))
    families = sorted({r["family"] for r in results})
    print(f"\n{len(results)} cases in {seconds:.0f} s")
    header = f"{'family':10}" + "".join(f"{o:>9}" for o in columns) + f"{'total':>7}"
    print(header)
    for f in families + [None]:
        rows = [r for r in results if f is None or r["family"] == f]
        counts = [sum(r["outcome"] == o for r in rows) for o in columns]
        print(f"{f or 'all':10}" + "".join(f"{n:>9}" for n in counts) + f"{len(rows):>7}")


def main(script, columns, slow_families=None):
    """The probe's command line: runs the chosen cases of `script` in a worker, prints each
    case that is not ok, then the summary with `columns`. slow_families: family -> seconds a
    case may take before it counts as HANG (default HANG_SECONDS)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", action="append")
    parser.add_argument("--id", action="append")
    parser.add_argument("--json")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--worker", type=int)
    parser.add_argument("--tmp")
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker)
    cases = [c for c in CASES if (not args.family or c.family in args.family)
             and (not args.id or c.id in args.id)]
    if args.list:
        for c in cases:
            print(c.family, c.id, c.expect)
        print(len(cases), "cases")
        return
    results = []
    w = Worker(script)
    start = time.time()
    for c in cases:
        r = w.run(c.id, (slow_families or {}).get(c.family, HANG_SECONDS))
        r["family"] = c.family
        results.append(r)
        if r["outcome"] in ("CRASH", "HANG"):  # a fresh worker for the next case
            w.kill()
            w = Worker(script)
        if not r["outcome"].startswith("ok"):
            print(f"{r['outcome']:8} {c.family:9} {c.id}: {r['detail'][:600]}", flush=True)
    w.kill()
    print_summary(results, columns, time.time() - start)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    shutil.rmtree(TMP, ignore_errors=True)
