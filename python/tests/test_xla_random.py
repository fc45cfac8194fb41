"""strata against XLA on random programs (issue 47): every case kept in
tests/xla_corpus/random/ runs through `strata run` and must give the expected
outputs within the case's tolerance (|strata - expected| <= atol + rtol
|expected| per output; atol 0: bit-equal), or be listed in KNOWN with what
strata still does wrong. The cases: findings of the fuzzer
tests/xla_corpus/random_programs.py, minimized, with XLA:CPU's outputs;
passing programs it kept as smoke regressions; and modules where XLA's own
simplifier is wrong, with XLA's outputs without it (cases.json says which,
and what each case found). Nothing is generated here: only the kept files run."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES_DIR = os.path.join(ROOT, "tests", "xla_corpus", "random")
STRATA = os.environ.get("STRATA_CLI", os.path.join(ROOT, "build", "strata"))
INDEX = json.load(open(os.path.join(CASES_DIR, "cases.json")))
CASES = INDEX["cases"]

# Findings strata still gets wrong: case -> the error text it prints, or "mismatch" for a
# wrong answer. A listed case that starts to pass fails the test, so the list stays true.
KNOWN = {}


def load(path):
    return {k: (v.float() if v.dtype in (torch.bfloat16, torch.float16) else v).numpy()
            for k, v in load_file(path).items()}


def leaf_order(name):
    return [int(p) if p.isdigit() else -1 for p in name.split(".")[1:]]


def differences(got, want, case):
    """What differs between strata's outputs and XLA's, [] when within tolerance."""
    names = sorted(got, key=leaf_order)
    if len(names) != case["outputs"]:
        return [f"{len(names)} outputs, XLA has {case['outputs']}"]
    found = []
    for k, (n, atol) in enumerate(zip(names, case["atol"])):
        g, w = got[n], want[f"expected.{k}"]
        if g.shape != w.shape or g.dtype != w.dtype:
            found.append(f"output {k}: {g.dtype}{list(g.shape)}, XLA {w.dtype}{list(w.shape)}")
            continue
        if atol < 0:  # not checked (the generator could not bound it)
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        close = np.abs(g64 - w64) <= atol + case.get("rtol", 0.0) * np.abs(w64)
        bad = ~(close | (g64 == w64) | (np.isnan(g64) & np.isnan(w64)))
        if bad.any():
            at = tuple(np.argwhere(bad)[0])
            found.append(f"output {k}: {int(bad.sum())} differ beyond {atol:.3g}, "
                         f"at {list(at)} strata {g64[at]} XLA {w64[at]}")
    return found


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_strata_gives_xlas_numbers(case, tmp_path):
    name = case["name"]
    inputs = os.path.join(CASES_DIR, f"{name}.safetensors")
    out = str(tmp_path / "out.safetensors")
    run = subprocess.run([STRATA, "run", os.path.join(CASES_DIR, f"{name}.hlo"),
                          "--inputs", inputs, "--output", out, "--quiet"],
                         capture_output=True, text=True, timeout=120)
    known = KNOWN.get(name)
    if known is not None and known != "mismatch":
        assert run.returncode != 0 and known in run.stderr, (
            f"listed as failing ({known}) but: exit {run.returncode} {run.stderr[-300:]}")
        return
    assert run.returncode == 0, run.stderr[-500:]
    found = differences(load(out), load(inputs), case)
    if known == "mismatch":
        assert found, "listed as a mismatch, but strata now gives XLA's numbers"
        return
    assert not found, "\n".join(found)


def test_the_cases_are_listed_once():
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)) and set(KNOWN) <= set(names)
    on_disk = {f[:-4] for f in os.listdir(CASES_DIR) if f.endswith(".hlo")}
    assert on_disk == set(names)
