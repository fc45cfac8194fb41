"""Trains Hugging Face's LlamaForCausalLM on the bundled corpus through
torch.compile(backend="strata"): the same model and recipe as `strata train`
(byte tokens, hidden 128, 4 layers, 4 heads, 2 key/value heads, batch 16 x
128, AdamW 3e-3 with a 40-step warm-up and a cosine decay to 3e-4, weight
decay 0.1, clipping at 1.0), written as an ordinary PyTorch training loop.
The model, the loss and the optimizer step are PyTorch's and transformers'
own; strata compiles them.

    scripts/train_hf_llama.sh [--steps 400] [--backend strata|inductor|eager]
"""
import argparse
import math
import os
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


def batches(data, batch, seq, generator):
    while True:
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=generator)
        yield torch.stack([data[s:s + seq + 1] for s in starts.tolist()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(HERE, "..", "data", "corpus.txt"))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--backend", default="strata")
    parser.add_argument("--seed", type=int, default=1234)
    a = parser.parse_args()
    torch.manual_seed(a.seed)
    data = torch.tensor(list(open(a.corpus, "rb").read()), dtype=torch.int64)
    heldout = data[int(len(data) * 0.9):]
    data = data[:int(len(data) * 0.9)]
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 40 if s < 40 else (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 40) / max(a.steps - 40, 1)))))
    if a.backend == "eager":
        forward, opt_step = model, opt.step
    else:
        forward = torch.compile(model, backend=a.backend)

        @torch.compile(backend=a.backend)
        def opt_step():
            opt.step()

    print(f"HF LlamaForCausalLM through torch.compile(backend={a.backend!r}): "
          f"{params / 1e6:.2f}M parameters, {a.steps} steps of 16 x 128 bytes")
    gen = torch.Generator().manual_seed(a.seed)
    stream = batches(data, 16, 128, gen)
    start = time.perf_counter()
    first = None
    for step in range(a.steps):
        window = next(stream)
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = forward(input_ids=window[:, :-1], labels=window[:, :-1]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt_step()
        schedule.step()
        if first is None:
            first = loss.item()
            compiled_at = time.perf_counter()
        if (step + 1) % 50 == 0 or step == a.steps - 1:
            rate = (step + 1) * 16 * 128 / (time.perf_counter() - start)
            print(f"step {step + 1:4d}  loss {loss.item():.4f}  {rate:7.0f} tokens/s", flush=True)
    train_time = time.perf_counter() - compiled_at
    model.eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        losses = [forward(input_ids=w[:, :-1], labels=w[:, :-1]).loss.item()
                  for w, _ in zip(batches(heldout, 16, 128, g), range(4))]
    print(f"loss {first:.4f} -> {loss.item():.4f} (training), held-out {sum(losses) / 4:.4f}; "
          f"first step (compiles) {compiled_at - start:.1f} s, then "
          f"{(a.steps - 1) * 16 * 128 / train_time:.0f} tokens/s")


if __name__ == "__main__":
    main()
