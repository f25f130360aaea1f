"""Unit checks of the training tools (small random models, a few seconds on one CPU thread).

    scripts/python.sh tools/train/test_train.py
"""
import os
import sys
import tempfile
import unittest
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch = common.set_threads(1)

import bpe  # noqa: E402
import model as M  # noqa: E402
import safetensors_io  # noqa: E402
import train_eagle  # noqa: E402


class Args:
    accept_window = 40
    accept_k = 4
    accept_max_windows = 0


def tiny_config():
    return M.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


class TestBpe(unittest.TestCase):
    def test_incremental_trainer_matches_naive(self):
        texts = ["def f(x):\n    return x + 1\n", "aaaa abab abab ba\n\n  x = 'it''s'\n"] * 3
        specials = ["<|endoftext|>"]
        vocab, merges = bpe.train_bpe(texts, 257 + 40, specials)
        words = Counter()
        for t in texts:
            words.update(bpe.pretokenize(t))
        seqs = {tuple(bpe.BYTE_ENCODER[b] for b in w.encode()): c for w, c in words.items()}
        ids = {tok: i for i, tok in enumerate(specials + [bpe.BYTE_ENCODER[b] for b in range(256)])}
        naive = []
        for _ in range(40):
            pairs = Counter()
            for s, c in seqs.items():
                for p in zip(s, s[1:]):
                    pairs[p] += c
            if not pairs:
                break
            best = min(pairs.items(), key=lambda kv: (-kv[1], ids[kv[0][0]], ids[kv[0][1]]))[0]
            naive.append(best)
            ids[best[0] + best[1]] = len(ids)
            merged = Counter()
            for s, c in seqs.items():
                out, i = [], 0
                while i < len(s):
                    if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                        out.append(s[i] + s[i + 1])
                        i += 2
                    else:
                        out.append(s[i])
                        i += 1
                merged[tuple(out)] += c
            seqs = merged
        self.assertEqual(merges, naive[:len(merges)])
        enc = bpe.Encoder(vocab, merges, {"<|endoftext|>": 0})
        for t in texts + ["unseen ünïcödé 🙂 text\r\n"]:
            self.assertEqual(enc.decode(enc.encode(t)), t)


class TestSafetensors(unittest.TestCase):
    def test_round_trip_bf16(self):
        torch.manual_seed(0)
        tensors = {"b": torch.randn(3, 5).to(torch.bfloat16), "a.weight": torch.randn(7).to(torch.bfloat16)}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.safetensors")
            safetensors_io.save_file(tensors, path, {"format": "pt"})
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
            self.assertEqual((8 + n) % 8, 0)
            back, meta = safetensors_io.load_file(path, dtype=torch.bfloat16)
        self.assertEqual(meta, {"format": "pt"})
        for k, v in tensors.items():
            self.assertTrue(torch.equal(back[k], v))


class TestModel(unittest.TestCase):
    def test_explicit_causal_mask_equals_default(self):
        torch.manual_seed(0)
        m = M.LlamaForCausalLM(tiny_config()).eval()
        x = torch.randint(0, 50, (2, 10))
        mask = torch.ones(10, 10, dtype=torch.bool).tril()
        with torch.no_grad():
            self.assertTrue(torch.allclose(m(x), m(x, mask=mask), atol=1e-5))

    def test_rope_is_relative(self):
        # Shifting every position by the same offset leaves causal attention unchanged.
        torch.manual_seed(0)
        m = M.LlamaForCausalLM(tiny_config()).eval()
        x = torch.randint(0, 50, (1, 8))
        pos = torch.arange(8)[None]
        with torch.no_grad():
            self.assertTrue(torch.allclose(m(x, pos), m(x, pos + 5), atol=1e-4))

    def test_state_dict_keys_are_hf_llama(self):
        keys = set(M.LlamaForCausalLM(tiny_config()).state_dict())
        self.assertIn("model.layers.1.self_attn.k_proj.weight", keys)
        self.assertIn("model.layers.0.mlp.gate_proj.weight", keys)
        self.assertIn("model.layers.0.post_attention_layernorm.weight", keys)
        self.assertIn("lm_head.weight", keys)
        head = set(M.EagleHead(tiny_config()).state_dict())
        self.assertEqual({k for k in head if not k.startswith("layers.0.")}, {"fc.weight", "fc.bias"})
        self.assertNotIn("layers.0.input_layernorm.weight", head)


class TestChainDrafting(unittest.TestCase):
    def test_batched_chain_equals_sequential(self):
        """offline_acceptance's masked one-pass drafting/verification equals the plain loop."""
        torch.manual_seed(0)
        cfg = tiny_config()
        cfg.vocab_size = 5
        target = M.LlamaForCausalLM(cfg).eval()
        head = M.EagleHead(cfg).eval()
        h = cfg.hidden_size
        with torch.no_grad():  # fc passes the feature through, so drafts often match the target
            head.fc.weight[:, h:] = torch.eye(h)
            head.fc.weight[:, :h] *= 100
        a = Args()
        L, K = a.accept_window, a.accept_k
        stream = torch.randint(0, cfg.vocab_size, (L,))
        res = train_eagle.offline_acceptance(torch, target, head, stream, a, log=lambda m: None)
        hist = [0] * (K + 1)
        with torch.no_grad():
            for t in range(L - 1):
                x = stream[:t + 2]
                feats = target.hidden(x[None])[0]
                f_in, toks, drafts = list(feats[:t + 1]), list(x[1:t + 2]), []
                for s in range(K):
                    n = len(f_in)
                    out = head(torch.stack(f_in)[None], target.model.embed_tokens(torch.stack(toks))[None],
                               torch.arange(n)[None])[0, -1]
                    d = target.lm_head(out).argmax()
                    drafts.append(d)
                    f_in.append(out)
                    toks.append(d)
                acc = 0
                seq = list(x)
                for j in range(K):
                    g = target(torch.stack(seq)[None])[0, -1].argmax()
                    if g != drafts[j]:
                        break
                    acc += 1
                    seq.append(drafts[j])
                hist[acc] += 1
        self.assertEqual(res["accepted_length_histogram"], hist)
        self.assertGreaterEqual(sum(c > 0 for c in hist), 3, hist)  # a mix of accepted lengths
        self.assertGreater(hist[K], 0, hist)


if __name__ == "__main__":
    unittest.main()
