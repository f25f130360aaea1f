"""Beam search's oracle for tests/api/test_beam_search.py: HF transformers' generate(num_beams=...)
on the embedded models/pagedllm-tiny, and a float64 replay of the same search that measures how far
each of its decisions is from a tie (a decision within the engine's numerical tolerance of a tie could
go either way, so the tests only use searches whose every decision is farther than that).
"""

import contextlib
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models" / "pagedllm-tiny"
EOS = [0, 2]  # generation_config.json's eos_token_id: what ends a beam (the engine reads the same file)

_models = {}


@contextlib.contextmanager
def one_thread():
    """The tiny model gains nothing from threads, and on a machine other jobs share, torch's
    threads waiting on each other made each search 5 to 20 times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def model(dtype):
    if dtype not in _models:
        m = transformers.LlamaForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32, attn_implementation="eager")
        _models[dtype] = m.to(dtype).eval()
    return _models[dtype]


def hf_beam_search(prompt_ids, width, n, max_tokens, length_penalty, early_stopping):
    """transformers' beam search (float32, CPU): [(output token ids, score)], best first."""
    m = model(torch.float32)
    ids = torch.tensor([prompt_ids])
    with torch.no_grad(), one_thread():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), num_beams=width, num_return_sequences=n,
                         length_penalty=length_penalty, early_stopping=early_stopping, do_sample=False,
                         temperature=None, top_p=None, top_k=None, max_new_tokens=max_tokens, eos_token_id=EOS,
                         pad_token_id=EOS[0], output_scores=True, return_dict_in_generate=True)
    results = []
    for row, score in zip(out.sequences[:, len(prompt_ids):].tolist(), out.sequences_scores.tolist()):
        # A hypothesis ends at its first EOS (what follows is padding) or at max_tokens.
        end = next((i + 1 for i, t in enumerate(row) if t in EOS), len(row))
        results.append((row[:end], score))
    return results


def token_logprobs(prompt_ids, output_ids):
    """Teacher-forced log-softmax (float32, as the engine computes) of each output token."""
    m = model(torch.float32)
    ids = torch.tensor([prompt_ids + output_ids])
    with torch.no_grad(), one_thread():
        rows = torch.log_softmax(m(ids).logits[0].double(), dim=-1)
    return [float(rows[len(prompt_ids) + i - 1, t]) for i, t in enumerate(output_ids)]


def replay_margins(prompt_ids, width, max_tokens, length_penalty, early_stopping):
    """HF's beam search rules replayed in float64 over full forwards. Returns (the width
    hypotheses, best first, as (tokens, score)) and the smallest gap, over the whole search,
    between two values whose order decides something: the width-th and next candidate (which
    may finish), the width-th and next unfinished candidate (which run on), the early-stopping
    comparison, and neighbouring hypotheses among the best width + 1."""
    m = model(torch.float64)
    k = max(2, 1 + len(EOS)) * width
    running = [(0.0, [])]
    finished = []  # every hypothesis made: (score, tokens)
    kept = []
    margin = float("inf")
    for step in range(max_tokens):
        length = step + 1
        batch = torch.tensor([prompt_ids + tokens for _, tokens in running])
        with torch.no_grad(), one_thread():
            logp = torch.log_softmax(m(batch, logits_to_keep=1).logits[:, -1], dim=-1)
        candidates = []
        for b, (score, tokens) in enumerate(running):
            top = torch.topk(logp[b], k)
            candidates += [(score + v, tokens + [t]) for v, t in zip(top.values.tolist(), top.indices.tolist())]
        candidates.sort(key=lambda c: -c[0])
        margin = min(margin, candidates[width - 1][0] - candidates[width][0])
        candidates = candidates[:k]

        def done(candidate):
            return candidate[1][-1] in EOS or length >= max_tokens

        if not (len(kept) == width and early_stopping is True):
            for c in candidates[:width]:
                if done(c):
                    finished.append((c[0] / length ** length_penalty, c[1]))
            finished.sort(key=lambda h: -h[0])
            kept = finished[:width]
        unfinished = [c for c in candidates if not done(c)]
        if len(unfinished) > width:
            margin = min(margin, unfinished[width - 1][0] - unfinished[width][0])
        running = unfinished[:width]
        if not running:
            break
        if len(kept) == width:
            if early_stopping is True:
                break
            longest = early_stopping == "never" and length_penalty > 0
            best = running[0][0] / (max_tokens if longest else length) ** length_penalty
            margin = min(margin, abs(best - kept[-1][0]))
            if best <= kept[-1][0]:
                break
    scores = [h[0] for h in finished[:width + 1]]
    margin = min([margin] + [a - b for a, b in zip(scores, scores[1:])])
    return [(tokens, score) for score, tokens in kept], margin


def main():
    """Prints each case of test_beam_search.py with its smallest gap, and whether the replay
    finds transformers' hypotheses (it must, or its gaps mean nothing)."""
    import test_beam_search

    tokenizer = transformers.AutoTokenizer.from_pretrained(MODEL_DIR)
    cases = [(tokenizer(prompt)["input_ids"], case) for prompt, *case in test_beam_search.CASES]
    cases.append((tokenizer(test_beam_search.CASES[3][0])["input_ids"], (4, 2, 12, 1.0, False)))  # the batch test
    messages, *chat_case = test_beam_search.CHAT_CASE
    cases.append((tokenizer.apply_chat_template(messages, add_generation_prompt=True), chat_case))
    for ids, (width, n, max_tokens, length_penalty, early_stopping) in cases:
        hf = hf_beam_search(ids, width, n, max_tokens, length_penalty, early_stopping)
        replayed, margin = replay_margins(ids, width, max_tokens, length_penalty, early_stopping)
        same = [tokens for tokens, _ in hf] == [tokens for tokens, _ in replayed[:n]]
        print(f"{len(ids)} prompt tokens, width {width}, n {n}, max_tokens {max_tokens}, length_penalty "
              f"{length_penalty}, early_stopping {early_stopping}: smallest gap {margin:.1e}, "
              f"{'the same hypotheses as transformers' if same else 'NOT the hypotheses of transformers'}")


if __name__ == "__main__":
    main()
