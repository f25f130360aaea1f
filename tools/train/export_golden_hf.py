#!/usr/bin/env python3
"""Golden fidelity fixtures from HF transformers for the engine's tests (GPU-session tool).

NOT RUN YET: this machine has no `transformers` / `tokenizers`. Run it where they are
installed (the lent GPU machine; the CPU is enough, the model is tiny):

    scripts/python.sh tools/train/export_golden_hf.py --model models/pagedllm-tiny \
        --out tests/fixtures/models/pagedllm-tiny/golden_hf.json

It loads the exported directory with transformers' own classes (AutoTokenizer,
LlamaForCausalLM, fp32), and for each fixed prompt writes:
  - the prompt ids from HF tokenizers (and whether they equal tools/train/bpe.py's ids),
  - per prompt position the top-5 next-token ids and logits,
  - at the last position the top-64 ids and logits and the log-sum-exp of all logits,
  - the greedy continuation (model.generate, do_sample=False, 32 new tokens) and its text,
  - the largest |logit| difference between HF and tools/train/model.py on the same weights
    (a check that the plain-PyTorch model used for training is the HF architecture).
The script fails if the tokenizers disagree or the two models differ by more than --atol.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "    def __repr__(self):",
    "# Read a JSON file and return its contents\ndef load_json(path):",
    "for i in range(10):\n    print(i",
    "x = {'a': 1, 'b': [1, 2, 3]}\n",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--atol", type=float, default=2e-3)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoTokenizer, LlamaForCausalLM

    import bpe
    import hf_load

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model)
    hf = LlamaForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    ours, _ = hf_load.load_target(args.model)
    enc = bpe.Encoder.from_file(os.path.join(args.model, "tokenizer.json"))
    cases, worst = [], 0.0
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        ref = [enc.specials["<|endoftext|>"]] + enc.encode(prompt)
        if ids != ref:
            raise SystemExit(f"HF tokenizers and bpe.py disagree on {prompt!r}: {ids} vs {ref}")
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = hf(x).logits[0].float()
            diff = (logits - ours(x)[0]).abs().max().item()
            out = hf.generate(x, do_sample=False, max_new_tokens=args.new_tokens,
                              eos_token_id=hf.generation_config.eos_token_id,
                              pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
        worst = max(worst, diff)
        top5 = logits.topk(5, dim=-1)
        last = logits[-1].topk(64)
        cases.append({
            "prompt": prompt, "prompt_ids": ids,
            "top5_per_position": [{"ids": i.tolist(), "logits": [round(v, 5) for v in l.tolist()]}
                                  for i, l in zip(top5.indices, top5.values)],
            "last_top64": {"ids": last.indices.tolist(), "logits": [round(v, 5) for v in last.values.tolist()]},
            "last_logsumexp": round(torch.logsumexp(logits[-1], 0).item(), 5),
            "greedy_ids": out, "greedy_text": tok.decode(out),
            "max_abs_diff_vs_tools_train_model": diff,
        })
    if worst > args.atol:
        raise SystemExit(f"HF and tools/train/model.py differ by {worst} > {args.atol}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "dtype": "float32 compute from the stored weights",
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "max_abs_diff_vs_tools_train_model": worst, "cases": cases}, f, indent=1,
                  ensure_ascii=False)
    print(f"wrote {args.out}: {len(cases)} prompts, HF vs tools/train/model.py max |diff| {worst:.2e}")


if __name__ == "__main__":
    main()
