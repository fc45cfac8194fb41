"""strata against XLA itself (issue 47): every module of tests/xla_corpus/
(JAX functions lowered to HLO, unoptimized and as XLA:CPU optimized them,
and modules of XLA's ops JAX does not write, each with its inputs and XLA's
outputs; tests/xla_corpus/generate.py writes it)
runs through `strata run` and must give XLA's numbers within the case's
family tolerance, or be listed below with the reason it cannot."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "xla_corpus")
STRATA = os.environ.get("STRATA_CLI", os.path.join(ROOT, "build", "strata"))
INDEX = json.load(open(os.path.join(CORPUS, "cases.json")))
# JAX's functions come unoptimized and optimized; the modules written for XLA's ops JAX does
# not write come as written.
CASES = [(c, v) for c in INDEX["cases"] for v in c.get("variants", ("hlo", "opt.hlo"))]

# What strata cannot run yet, each a clear error from the parser; a case
# listed here that starts to pass fails the test, so the list stays true.
KNOWN = {}


def load(path):
    return {k: (v.float() if v.dtype in (torch.bfloat16, torch.float16) else v).numpy()
            for k, v in load_file(path).items()}


def leaf_order(name):
    return [int(p) if p.isdigit() else -1 for p in name.split(".")[1:]]


@pytest.mark.parametrize("case,variant", CASES, ids=[f"{c['name']}-{v}" for c, v in CASES])
def test_strata_gives_xlas_numbers(case, variant, tmp_path):
    name = case["name"]
    inputs = os.path.join(CORPUS, "cases", f"{name}.safetensors")
    out = str(tmp_path / "out.safetensors")
    run = subprocess.run([STRATA, "run", os.path.join(CORPUS, "cases", f"{name}.{variant}"),
                          "--inputs", inputs, "--output", out, "--quiet"],
                         capture_output=True, text=True, timeout=120)
    known = KNOWN.get((name, variant))
    if known is not None:
        assert run.returncode == 1 and known in run.stderr, (
            f"listed as failing ({known}) but: exit {run.returncode} {run.stderr[-300:]}")
        return
    assert run.returncode == 0, run.stderr[-500:]
    got = load(out)
    want = load(inputs)
    names = sorted(got, key=leaf_order)
    assert len(names) == case["outputs"], names
    for k, n in enumerate(names):
        g, w = got[n], want[f"expected.{k}"]
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=case["rtol"],
                                   atol=case["atol"], equal_nan=True, err_msg=f"output {k}")


def test_the_corpus_covers_what_the_issue_names():
    families = {c["family"] for c in INDEX["cases"]}
    assert {"elementwise", "transcendental", "reduction", "dot", "convolution", "reduce_window",
            "sort", "gather_scatter", "dynamic_slice", "control", "bits", "convert", "linalg",
            "special"} <= families
    passing = len(CASES) - len(KNOWN)
    assert passing / len(CASES) >= 0.95, f"{passing} of {len(CASES)} modules match XLA"
