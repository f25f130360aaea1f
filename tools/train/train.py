"""Trains pagedllm-tiny, a LlamaForCausalLM, on the pinned corpus.

    scripts/python.sh tools/train/train.py --tokenizer build-train/tokenizer --out build-train/target

Writes into --out: log.jsonl (one JSON object per logged step / eval), ckpt.pt (every
--ckpt-every steps; a rerun of the same command resumes from it), final.pt (fp32 weights +
config) for export_hf.py.

Determinism: the weights are initialised from torch.manual_seed(--seed); the batch of step s
is drawn from a generator seeded with (seed, s) alone, so a resumed run sees the same batches
as an uninterrupted one. Batches are random windows of the training token stream. The last
--long-frac of the steps use --long-seq-len (fewer sequences per batch, same tokens), so the
model has seen every position up to max_position_embeddings.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--archive", default=None, help="corpus archive (default: the committed one)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (torch, OpenMP, OpenBLAS)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                    help="bf16: autocast matmuls to bf16 with fp32 master weights")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--max-pos", type=int, default=512, help="max_position_embeddings")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--long-seq-len", type=int, default=512)
    ap.add_argument("--long-frac", type=float, default=0.15)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=1300)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="stop (after a checkpoint) when this much wall time has passed; rerun to resume")
    return ap.parse_args(argv)


def seq_len_at(step, args):
    return args.long_seq_len if step >= round(args.steps * (1 - args.long_frac)) else args.seq_len


def get_batch(torch, stream, step, seq_len, batch_tokens, seed):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    n = batch_tokens // seq_len
    starts = torch.randint(0, len(stream) - seq_len - 1, (n,), generator=g)
    return torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()])


def evaluate(torch, model, stream, seq_len, device, dtype, batch=16):
    """Mean next-token loss over non-overlapping windows of the held-out stream."""
    import torch.nn.functional as F
    model.eval()
    nwin = (len(stream) - 1) // seq_len
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, nwin, batch):
            rows = [stream[j * seq_len:j * seq_len + seq_len + 1] for j in range(i, min(nwin, i + batch))]
            x = torch.stack(rows).long().to(device)
            with common.autocast(torch, device, dtype):
                logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                   reduction="sum")
            total += loss.item()
            count += x[:, 1:].numel()
    model.train()
    return total / count, count


def main(argv=None):
    args = parse_args(argv)
    torch = common.set_threads(args.threads)
    import torch.nn.functional as F
    import data
    import model as M

    os.makedirs(args.out, exist_ok=True)
    log = common.JsonLog(os.path.join(args.out, "log.jsonl"))
    archive = args.archive or data.corpus.DEFAULT_ARCHIVE
    train_ids, held_ids, info = data.token_streams(os.path.join(args.tokenizer, "tokenizer.json"),
                                                   args.out, archive)
    train_stream = torch.from_numpy(train_ids).long()
    held_stream = torch.from_numpy(held_ids).long()
    device = torch.device(args.device)

    cfg = M.LlamaConfig(vocab_size=8192, hidden_size=args.hidden, intermediate_size=args.intermediate,
                        num_hidden_layers=args.layers, num_attention_heads=args.heads,
                        num_key_value_heads=args.kv_heads, max_position_embeddings=args.max_pos,
                        rope_theta=args.rope_theta)
    import json
    with open(os.path.join(args.tokenizer, "tokenizer.json")) as f:
        tj = json.load(f)
    cfg.vocab_size = len(tj["model"]["vocab"])
    cfg.bos_token_id = cfg.eos_token_id = tj["model"]["vocab"]["<|endoftext|>"]

    torch.manual_seed(args.seed)
    model = M.LlamaForCausalLM(cfg).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, tokens_seen, train_seconds = 0, 0, 0.0
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, tokens_seen, train_seconds = ck["step"], ck["tokens_seen"], ck["train_seconds"]
        log(event="resume", step=step)
    else:
        log(event="start", args=vars(args), config=cfg.to_dict(), params=M.count_params(model),
            data=info, torch=torch.__version__)

    def save_ckpt():
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "tokens_seen": tokens_seen, "train_seconds": train_seconds,
                    "config": cfg.to_dict()}, tmp)
        os.replace(tmp, ckpt_path)

    t_start = time.time()
    t_last, tok_last, loss_acc, loss_n = time.time(), tokens_seen, 0.0, 0
    model.train()
    while step < args.steps:
        t0 = time.time()
        lr = common.lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        seq_len = seq_len_at(step, args)
        x = get_batch(torch, train_stream, step, seq_len, args.batch_tokens, args.seed).to(device)
        with common.autocast(torch, device, args.dtype):
            logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        tokens_seen += x[:, 1:].numel()
        train_seconds += time.time() - t0
        loss_acc += loss.item()
        loss_n += 1
        if step % args.log_every == 0 or step == args.steps:
            now = time.time()
            log(step=step, loss=round(loss_acc / loss_n, 5), lr=lr, seq_len=seq_len,
                grad_norm=round(float(gnorm), 4), tokens=tokens_seen,
                tok_per_s=round((tokens_seen - tok_last) / (now - t_last), 1),
                train_seconds=round(train_seconds, 1))
            t_last, tok_last, loss_acc, loss_n = now, tokens_seen, 0.0, 0
        if step % args.eval_every == 0 or step == args.steps:
            t_eval = time.time()
            ev, n = evaluate(torch, model, held_stream, args.seq_len, device, args.dtype)
            log(step=step, eval_loss=round(ev, 5), eval_ppl=round(math.exp(ev), 3), eval_tokens=n,
                eval_seq_len=args.seq_len, eval_seconds=round(time.time() - t_eval, 1))
        if step % args.ckpt_every == 0 or step == args.steps:
            save_ckpt()
            if args.max_minutes and time.time() - t_start > args.max_minutes * 60 and step < args.steps:
                log(event="paused", step=step)
                return 0
    torch.save({"model": model.state_dict(), "config": cfg.to_dict(), "step": step,
                "tokens_seen": tokens_seen, "train_seconds": train_seconds}, os.path.join(args.out, "final.pt"))
    log(event="done", step=step, tokens_seen=tokens_seen, train_seconds=round(train_seconds, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
