#!/usr/bin/python3
"""The training step of bench/train_step_bench.cc (BM_TrainStep/<layers>/1:
the Llama bench config, batch 4 x 256, apply_layers saving each layer's
input, AdamW, buffer donation) driven from Python. Prints the mean step
time in ms over --steps steps after one compiling step.

  PYTHONPATH=build-bench/python /usr/bin/python3 bench/python_train_bench.py --layers 2

bench/run_python_bench.sh runs it beside the C++ step.
"""
import argparse
import time

import numpy as np

import strata


def tokens(batch, seq, vocab, salt):
    """bench/llama_bench_config.h's Tokens: a multiplicative hash of the position."""
    i = np.arange(batch * seq, dtype=np.uint64)
    return ((i * np.uint64(2654435761) + np.uint64(salt)) % np.uint64(vocab)).astype(np.int64).reshape(batch, seq)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    config = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 512,
              "intermediate_size": 1536, "num_hidden_layers": args.layers,
              "num_attention_heads": 8, "num_key_value_heads": 4}
    model = strata.nn.LlamaForCausalLM(config, key=strata.random_key(2))
    params = model.parameters()
    opt = strata.optim.AdamW(params, lr=1e-4)
    strata.sync()  # initial weights and moments are data, as in training
    strata.set_buffer_donation(True)
    ids = strata.tensor(tokens(4, 256, 4096, 3))
    labels = strata.tensor(tokens(4, 256, 4096, 4))

    def step():
        loss = model.loss(model(ids), labels)
        opt.step(strata.gradients(loss, params))
        strata.sync()
        return loss

    step()  # compile
    t = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    mean = (time.perf_counter() - t) / args.steps  # the mean, as Google Benchmark reports the C++ step
    print(f"{mean * 1e3:.1f} ms/step, {4 * 256 / mean:.0f} tokens/s, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
