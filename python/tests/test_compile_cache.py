"""The persistent compile cache (STRATA_CACHE_DIR): a second process running
the same torch model through backend="strata" compiles nothing, reads every
program from the cache, and computes the same numbers bit for bit; both
agree with eager PyTorch."""
import json
import os
import subprocess
import sys
import textwrap

import strata

CHILD = textwrap.dedent("""
    import json, sys
    import torch, transformers
    import strata
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(cfg).train()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))

    def step(forward):
        model.zero_grad(set_to_none=True)
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters()]

    eager_loss, eager_grads = step(model)
    strata.reset_metrics()
    loss, grads = step(torch.compile(model, backend="strata"))
    worst = max(float(((g - e).abs() / (e.abs() + 1e-3)).max())
                for g, e in zip(grads, eager_grads))
    print(json.dumps({"loss": loss, "eager_loss": eager_loss, "worst_grad_rel": worst,
                      "grads": [g.flatten()[:8].tolist() for g in grads],
                      "metrics": strata.metrics()}))
""")


def run_child(cache_dir):
    env = dict(os.environ, STRATA_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_a_second_process_compiles_nothing_and_computes_the_same(tmp_path):
    first, _ = run_child(tmp_path)
    second, warnings = run_child(tmp_path)
    assert first["metrics"]["compiles"] >= 2  # forward and backward
    assert first["metrics"]["disk_cache_hits"] == 0
    assert second["metrics"]["compiles"] == 0, second["metrics"]
    assert second["metrics"]["disk_cache_hits"] == first["metrics"]["compiles"]
    assert "[compile cache]" not in warnings
    assert second["loss"] == first["loss"] and second["grads"] == first["grads"]
    for run in (first, second):
        assert abs(run["loss"] - run["eager_loss"]) <= 1e-5 * abs(run["eager_loss"])
        assert run["worst_grad_rel"] < 1e-3


def test_the_cache_directory_is_a_setting(tmp_path):
    saved = strata.config()["cache_dir"]
    try:
        strata.set_config(cache_dir=str(tmp_path))
        assert strata.config()["cache_dir"] == str(tmp_path)
        x = strata.tensor([1.0, 2.0, 3.0])
        assert (x * 3.0 + 1.0).numpy().tolist() == [4.0, 7.0, 10.0]
        assert any(p.suffix == ".hlo" for p in tmp_path.iterdir())
    finally:
        strata.set_config(cache_dir=saved)
