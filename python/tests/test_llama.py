"""strata.nn.LlamaForCausalLM from Python against Hugging Face's Llama math
written out in PyTorch (scripts/check_llama_against_torch.py), and the
training loop of `strata train` in a few lines of Python."""
import json
import os
import sys

import numpy as np
import pytest
import torch

import strata
from conftest import close

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from check_llama_against_torch import llama_logits, read_safetensors  # noqa: E402

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64,
          "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "torch_dtype": "float32", "tie_word_embeddings": False}


def ids_batch(seed=0, shape=(2, 9)):
    return np.random.default_rng(seed).integers(0, CONFIG["vocab_size"], shape)


def hf_loss(logits, ids):
    """transformers' causal-LM loss with labels = input_ids."""
    shift = logits[:, :-1].reshape(-1, logits.shape[-1])
    return torch.nn.functional.cross_entropy(shift, torch.tensor(ids[:, 1:]).reshape(-1))


@pytest.fixture
def saved(tmp_path):
    model = strata.nn.LlamaForCausalLM(CONFIG, key=strata.random_key(7))
    model.save_pretrained(str(tmp_path))
    return model, str(tmp_path)


def test_from_pretrained_gives_hugging_faces_logits(saved):
    _, directory = saved
    assert json.load(open(os.path.join(directory, "config.json")))["hidden_size"] == 32
    model = strata.nn.LlamaForCausalLM.from_pretrained(directory)
    ids = ids_batch()
    weights = {k: v.double() for k, v in read_safetensors(os.path.join(directory, "model.safetensors")).items()}
    expected = llama_logits(CONFIG, weights, torch.tensor(ids))
    close(model(strata.tensor(ids)), expected.float(), rtol=1e-4, atol=2e-5)
    model.layer_mode = "unrolled"
    close(model(strata.tensor(ids)), expected.float(), rtol=1e-4, atol=2e-5)


def test_gradients_of_every_parameter_match_torch(saved):
    model, directory = saved
    ids = ids_batch(1)
    weights = {k: v.double().requires_grad_() for k, v in
               read_safetensors(os.path.join(directory, "model.safetensors")).items()}
    hf_loss(llama_logits(CONFIG, weights, torch.tensor(ids)), ids).backward()
    names = [n for n, _ in model.named_parameters()]
    params = model.parameters()
    loss = model.loss(model(strata.tensor(ids)), ids)
    grads = strata.gradients(loss, params)
    assert len(grads) == len(names) == 3 + 9  # embed, norm, lm_head + 9 stacked per-layer tensors
    for name, g in zip(names, grads):
        if "*" in name:  # stacked [layers, ...]
            expected = torch.stack([weights[name.replace("*", str(i))].grad for i in range(2)])
        else:
            expected = weights[name].grad
        close(g, expected.float(), rtol=1e-3, atol=1e-6)


def test_parameters_are_the_models_own_slots(saved):
    model, _ = saved
    (name, embed), = [(n, p) for n, p in model.named_parameters() if n == "model.embed_tokens.weight"]
    embed.copy_(strata.zeros(*embed.shape))
    close(model.state_dict()["model.embed_tokens.weight"], np.zeros((64, 32), np.float32))
    with pytest.raises(strata.Error, match="missing"):
        model.load_state_dict({})
    assert model.config["num_key_value_heads"] == 2


def test_the_training_loop_of_strata_train_matches_torch_step_for_step(saved):
    model, directory = saved
    weights = {k: v.clone().requires_grad_() for k, v in
               read_safetensors(os.path.join(directory, "model.safetensors")).items()}
    topt = torch.optim.AdamW(weights.values(), lr=1e-2, weight_decay=0.1)
    # Learnable data: each row counts up from a random start.
    starts = np.random.default_rng(3).integers(0, CONFIG["vocab_size"], 200)
    data = (starts[:, None] + np.arange(9)) % CONFIG["vocab_size"]

    # strata train's step, in Python.
    params = model.parameters()
    opt = strata.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    strata.set_buffer_donation(True)
    losses, torch_losses = [], []
    try:
        for step in range(12):
            batch = data[step * 4:][:4]
            ids = strata.tensor(batch)
            loss = model.loss(model(ids), ids)
            grads = strata.gradients(loss, params)
            norm = strata.optim.clip_grad_norm_(grads, 1.0)
            opt.lr = strata.optim.warmup_cosine_lr(step, 3, 12, 1e-2)
            opt.step(grads)
            strata.sync()
            losses.append(loss.item())

            tloss = hf_loss(llama_logits(CONFIG, weights, torch.tensor(batch)), batch)
            topt.zero_grad()
            tloss.backward()
            tnorm = torch.nn.utils.clip_grad_norm_(weights.values(), 1.0)
            for group in topt.param_groups:
                group["lr"] = strata.optim.warmup_cosine_lr(step, 3, 12, 1e-2)
            topt.step()
            torch_losses.append(tloss.item())
            assert norm.item() == pytest.approx(tnorm.item(), rel=1e-3)
    finally:
        strata.set_buffer_donation(False)
    np.testing.assert_allclose(losses, torch_losses, rtol=2e-4)
    assert losses[-1] < losses[0] - 0.5, losses
    state = model.state_dict()
    for name, w in weights.items():
        close(state[name], w, rtol=2e-3, atol=2e-4)


def test_safetensors_round_trip_keeps_dtypes(tmp_path):
    path = str(tmp_path / "t.safetensors")
    tensors = {"a": strata.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)),
               "b": strata.tensor([1, 2, 3]),
               "c": strata.from_dlpack(torch.randn(4).to(torch.bfloat16))}
    strata.save_safetensors(path, tensors, {"format": "pt"})
    back = strata.load_safetensors(path)
    assert sorted(back) == ["a", "b", "c"]
    assert back["c"].dtype == strata.bfloat16
    np.testing.assert_array_equal(back["a"].numpy(), tensors["a"].numpy())
    raw = read_safetensors(path)  # the reference parser
    assert torch.equal(raw["c"], torch.utils.dlpack.from_dlpack(tensors["c"]))
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"{{{{")
    with pytest.raises(strata.Error):
        strata.load_safetensors(path)
